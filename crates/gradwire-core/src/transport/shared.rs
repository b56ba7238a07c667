//! What the tensor transports (DLCP, LTP) share: which packets an endpoint handles, how a
//! tensor is cut into segments, how much of it may be missing, and the checks of their
//! configurations.

use super::error::ConfigError;
use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::tensor::{Segmentation, TensorId};
use crate::time::Time;

/// `pkt`'s kind if it is transfer `flow`'s and goes from `peer` to `local`; `None` for
/// anything else a host hands the endpoint (another transfer's packets, strays), which the
/// endpoint ignores.
pub(crate) fn kind_from_peer(pkt: &Packet, flow: FlowId, peer: HostId, local: HostId) -> Option<PacketKind> {
    (pkt.flow == flow && pkt.src == peer && pkt.dst == local).then_some(pkt.kind)
}

/// Segments of at most `mss` bytes holding whole elements of `elem_bytes` (both clamped
/// into range: the endpoints never fail on a configuration, loaders refuse it).
pub(crate) fn segmentation(tensor: TensorId, size: u64, mss: u32, elem_bytes: u32) -> Segmentation {
    let mss = mss.max(1);
    Segmentation::new(tensor, size, elem_bytes.clamp(1, mss), mss).expect("a tensor of more than 2^32 segments")
}

/// Bytes of a transfer of `size` bytes that may be missing under `loss_bound` (NaN: none).
pub(crate) fn allowed_missing(loss_bound: f64, size: u64) -> u64 {
    let p = if loss_bound.is_nan() { 0.0 } else { loss_bound.clamp(0.0, 1.0) };
    ((p * size as f64).floor() as u64).min(size)
}

/// `loss_bound` is a share of a transfer: in `[0, 1]`.
pub fn check_loss_bound(field: &str, loss_bound: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&loss_bound) {
        Ok(())
    } else {
        Err(ConfigError::new(field, format!("{loss_bound} is outside [0, 1]")))
    }
}

/// A tensor cut into segments of `mss` bytes holding whole elements of `elem_bytes`.
pub(crate) fn check_segments(mss: u32, elem_bytes: u32) -> Result<(), ConfigError> {
    if mss == 0 {
        return Err(ConfigError::new("mss", "must be positive (got 0)"));
    }
    if elem_bytes == 0 || elem_bytes > mss {
        return Err(ConfigError::new("elem_bytes", format!("must be in 1..=mss ({mss}) (got {elem_bytes})")));
    }
    Ok(())
}

/// Switch queues are 0..=7.
pub(crate) fn check_priorities(ctrl: u8, data: u8) -> Result<(), ConfigError> {
    for (field, p) in [("ctrl_priority", ctrl), ("data_priority", data)] {
        if p > 7 {
            return Err(ConfigError::new(field, format!("must be in 0..=7 (got {p})")));
        }
    }
    Ok(())
}

pub(crate) fn check_positive(field: &str, v: Time) -> Result<(), ConfigError> {
    if v > 0 {
        Ok(())
    } else {
        Err(ConfigError::new(field, "must be positive (got 0)"))
    }
}
