//! Placing segments by their address, in any order, with a bitmap over segments.
//!
//! [`Reassembly`] is the bookkeeping only (what the simulator needs: packets carry no
//! bytes); [`TensorBuffer`] adds the receive buffer and the bubble filling of a real
//! receiver. Either way a segment is accepted only if it is exactly one of the tensor's
//! segments, so nothing outside the tensor is ever written.

use std::ops::Range;

use super::segment::{Reject, Segmentation};

/// What [`Reassembly::insert`] did with an acceptable segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// First copy of segment `index`: its bytes should be stored.
    New(u64),
    /// Already had it: nothing to store.
    Duplicate(u64),
}

/// Which segments of one tensor have arrived, one bit per segment, with byte and
/// malformed-packet counters. Holds no payload.
#[derive(Clone, Debug)]
pub struct Reassembly {
    seg: Segmentation,
    bits: Vec<u64>,
    received_bytes: u64,
    duplicates: u64,
    rejected: u64,
}

impl Reassembly {
    /// Nothing received yet of the tensor `seg` describes.
    pub fn new(seg: Segmentation) -> Self {
        let words = seg.count().div_ceil(64) as usize;
        Reassembly { seg, bits: vec![0; words], received_bytes: 0, duplicates: 0, rejected: 0 }
    }

    /// How the tensor is cut into segments.
    pub fn segmentation(&self) -> &Segmentation {
        &self.seg
    }

    /// Record the segment claimed by `(offset, len)`; malformed claims are counted.
    pub fn insert(&mut self, offset: u64, len: u32) -> Result<Placed, Reject> {
        let index = match self.seg.locate(offset, len) {
            Ok(i) => i,
            Err(e) => {
                self.rejected += 1;
                return Err(e);
            }
        };
        let (w, b) = ((index / 64) as usize, index % 64);
        if self.bits[w] & (1 << b) != 0 {
            self.duplicates += 1;
            return Ok(Placed::Duplicate(index));
        }
        self.bits[w] |= 1 << b;
        self.received_bytes += len as u64;
        Ok(Placed::New(index))
    }

    /// A segment at `offset` of `len` bytes would be placed: it is a whole segment of this
    /// tensor and has not arrived yet.
    pub fn wants(&self, offset: u64, len: u32) -> bool {
        self.seg.locate(offset, len).is_ok_and(|i| !self.has(i))
    }

    /// Segment `index` has arrived (false past the end).
    pub fn has(&self, index: u64) -> bool {
        index < self.seg.count() && self.bits[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    /// Payload bytes of the distinct segments received (duplicates count once).
    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    /// Payload bytes not yet received: `total_bytes - received_bytes`.
    pub fn missing_bytes(&self) -> u64 {
        self.seg.total_bytes() - self.received_bytes
    }

    /// Share of the tensor's bytes received; an empty tensor is complete.
    pub fn delivered_fraction(&self) -> f64 {
        match self.seg.total_bytes() {
            0 => 1.0,
            t => self.received_bytes as f64 / t as f64,
        }
    }

    /// Every segment has arrived (true at once for an empty tensor).
    pub fn is_complete(&self) -> bool {
        self.received_bytes == self.seg.total_bytes()
    }

    /// Inserts of a segment already held.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Inserts refused because `(offset, len)` was not one of the tensor's segments.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Maximal runs `[first, end)` of missing segment indices, ascending.
    pub fn missing_runs(&self) -> Vec<Range<u64>> {
        let n = self.seg.count();
        let mut runs: Vec<Range<u64>> = Vec::new();
        let mut i = 0;
        while i < n {
            let word = self.bits[(i / 64) as usize];
            // Skip whole received words quickly; they are the common case.
            if i % 64 == 0 && word == u64::MAX {
                i += 64;
                continue;
            }
            if word & (1 << (i % 64)) == 0 {
                match runs.last_mut() {
                    Some(r) if r.end == i => r.end = i + 1,
                    _ => runs.push(i..i + 1),
                }
            }
            i += 1;
        }
        runs
    }

    /// The exact missing byte ranges (merged, sorted): what bubble filling zeroes.
    pub fn bubbles(&self) -> Vec<Range<u64>> {
        self.missing_runs().into_iter().map(|r| self.seg.byte_range(r.start, r.end)).collect()
    }
}

/// A receive buffer of exactly the tensor's size, written only through [`Reassembly`].
#[derive(Clone, Debug)]
pub struct TensorBuffer {
    reasm: Reassembly,
    data: Vec<u8>,
}

impl TensorBuffer {
    /// A zeroed buffer of `seg.total_bytes()` bytes, nothing received.
    pub fn new(seg: Segmentation) -> Self {
        TensorBuffer { data: vec![0; seg.total_bytes() as usize], reasm: Reassembly::new(seg) }
    }

    /// Store a received segment's payload at its offset, if it is a valid new segment.
    pub fn place(&mut self, offset: u64, payload: &[u8]) -> Result<Placed, Reject> {
        let Ok(len) = u32::try_from(payload.len()) else {
            return Err(Reject::WrongLength);
        };
        let placed = self.reasm.insert(offset, len)?;
        if let Placed::New(_) = placed {
            // `insert` checked `offset + len <= total`, which is `data.len()`.
            self.data[offset as usize..offset as usize + payload.len()].copy_from_slice(payload);
        }
        Ok(placed)
    }

    /// Zero every missing range (a lost gradient becomes 0.0) and return those ranges.
    pub fn fill_bubbles(&mut self) -> Vec<Range<u64>> {
        let bubbles = self.reasm.bubbles();
        for r in &bubbles {
            self.data[r.start as usize..r.end as usize].fill(0);
        }
        bubbles
    }

    /// Which segments have been placed.
    pub fn reassembly(&self) -> &Reassembly {
        &self.reasm
    }

    /// The tensor's bytes: placed segments as received, the rest zero.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }
}
