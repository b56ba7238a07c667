//! Tensors on the wire: partition into self-describing segments, reassembly by bitmap,
//! bubble filling, and the priority / importance tags a DLCP sender puts on packets.

mod reassembly;
mod segment;
mod tag;
#[cfg(test)]
mod tests;

pub use reassembly::{Placed, Reassembly, TensorBuffer};
pub use segment::{Reject, Segment, SegmentError, Segmentation, TensorId};
pub use tag::{
    importance_mask, importance_with_threshold, layer_priority, layer_queue, sample_median_abs, synthetic_important,
    CTRL_QUEUE, MAX_DATA_PRIORITIES, MEDIAN_SAMPLE_FRACTION,
};
