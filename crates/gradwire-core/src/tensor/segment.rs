//! Tensor partition into self-describing, MTU-sized segments (DLCP §3.2.3).
//!
//! Segment `i` covers bytes `[i * seg_bytes, min((i + 1) * seg_bytes, total))`, where
//! `seg_bytes` is the largest multiple of the element size that fits in one packet's
//! payload. Boundaries are multiples of the element size, so no gradient is ever split
//! across two packets and a lost packet loses whole gradients. Only the last segment may
//! be shorter.

/// A tensor is named by the id of the transfer that carries it.
pub type TensorId = u32;

/// One packet's worth of a tensor: enough to place it without any other state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The tensor it belongs to.
    pub tensor: TensorId,
    /// Position among the tensor's segments, from 0.
    pub index: u64,
    /// First byte within the tensor.
    pub offset: u64,
    /// Payload bytes; `seg_bytes` for all but possibly the last segment.
    pub len: u32,
}

impl Segment {
    /// One past the last byte within the tensor: the segment is `[offset, end)`.
    pub fn end(&self) -> u64 {
        self.offset + self.len as u64
    }
}

/// Why a tensor cannot be segmented (a configuration error, reported at setup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentError {
    /// The element size is 0 bytes.
    ZeroElementSize,
    /// An element does not fit in one packet, so it could not stay whole.
    ElementLargerThanMss {
        /// Element size, bytes.
        elem_bytes: u32,
        /// Payload bytes per packet.
        mss: u32,
    },
    /// The tensor has more than `u32::MAX` segments (control messages name segments by u32).
    TooManySegments,
}

/// Why a received segment was refused. Counted by the receiver, never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Some byte lies at or beyond the end of the tensor.
    OutOfRange,
    /// The offset is not the start of a segment.
    Misaligned,
    /// The offset starts a segment but the length is not that segment's length.
    WrongLength,
}

/// How one tensor is cut into segments: a pure function of (tensor, size, element size,
/// MSS), so sender and receiver compute the same cut without exchanging it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segmentation {
    tensor: TensorId,
    total: u64,
    seg_bytes: u32,
    count: u64,
}

impl Segmentation {
    /// Segment `total_bytes` of elements of `elem_bytes` into payloads of at most `mss`.
    /// A `total_bytes` that is not a whole number of elements ends in a partial element,
    /// which sits alone at the end of the last segment.
    pub fn new(tensor: TensorId, total_bytes: u64, elem_bytes: u32, mss: u32) -> Result<Self, SegmentError> {
        if elem_bytes == 0 {
            return Err(SegmentError::ZeroElementSize);
        }
        if elem_bytes > mss {
            return Err(SegmentError::ElementLargerThanMss { elem_bytes, mss });
        }
        let seg_bytes = mss / elem_bytes * elem_bytes;
        let count = total_bytes.div_ceil(seg_bytes as u64);
        if count > u32::MAX as u64 {
            return Err(SegmentError::TooManySegments);
        }
        Ok(Segmentation { tensor, total: total_bytes, seg_bytes, count })
    }

    /// A tensor of `n` elements.
    pub fn for_elems(tensor: TensorId, n: u64, elem_bytes: u32, mss: u32) -> Result<Self, SegmentError> {
        let total = n.checked_mul(elem_bytes as u64).ok_or(SegmentError::TooManySegments)?;
        Self::new(tensor, total, elem_bytes, mss)
    }

    /// The tensor this segmentation describes.
    pub fn tensor(&self) -> TensorId {
        self.tensor
    }

    /// Size of the tensor, bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Payload bytes of every segment but the last.
    pub fn seg_bytes(&self) -> u32 {
        self.seg_bytes
    }

    /// Number of segments (0 for an empty tensor; at most `u32::MAX`).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Segment `index`, or `None` past the end.
    pub fn segment(&self, index: u64) -> Option<Segment> {
        if index >= self.count {
            return None;
        }
        let offset = index * self.seg_bytes as u64;
        let len = (self.total - offset).min(self.seg_bytes as u64) as u32;
        Some(Segment { tensor: self.tensor, index, offset, len })
    }

    /// Every segment, in index order.
    pub fn iter(&self) -> impl Iterator<Item = Segment> + '_ {
        (0..self.count).filter_map(|i| self.segment(i))
    }

    /// The segment index a received `(offset, len)` claims to be, if it is exactly one
    /// of this tensor's segments. Never trusts either number: both are checked.
    pub fn locate(&self, offset: u64, len: u32) -> Result<u64, Reject> {
        if offset >= self.total || offset.saturating_add(len as u64) > self.total {
            return Err(Reject::OutOfRange);
        }
        if !offset.is_multiple_of(self.seg_bytes as u64) {
            return Err(Reject::Misaligned);
        }
        let index = offset / self.seg_bytes as u64;
        match self.segment(index) {
            Some(s) if s.len == len => Ok(index),
            _ => Err(Reject::WrongLength),
        }
    }

    /// Byte range `[start, end)` of segments `[first, end_seg)`, clipped to the tensor.
    pub fn byte_range(&self, first: u64, end_seg: u64) -> std::ops::Range<u64> {
        let sb = self.seg_bytes as u64;
        let start = first.saturating_mul(sb).min(self.total);
        let end = end_seg.saturating_mul(sb).min(self.total);
        start..end.max(start)
    }
}
