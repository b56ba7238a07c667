//! Per-flow state that exists only for flows that have started.
//!
//! A DNN workload creates every flow of the run up front, most of them gated by barriers
//! or scheduled later. [`Chunked`] keeps per-flow records in chunks of [`CHUNK`] flows,
//! allocated when the first flow of a chunk starts (and, for endpoint pairs, freed when the
//! last one of it is done): a flow whose start lies ahead costs nothing here. Flow ids of
//! a DNN iteration follow its buckets, so a chunk's flows start and end close together.
//!
//! Indexing goes through the chunk table (8 bytes per chunk: 32 KiB at 4 M flows, which
//! stays in cache), so a packet's lookup of its flow costs one more load from a hot line
//! rather than one more miss.

/// Flows per chunk.
pub(super) const CHUNK_BITS: u32 = 10;
pub(super) const CHUNK: usize = 1 << CHUNK_BITS;

pub(super) struct Chunked<T> {
    chunks: Vec<Option<Box<[T; CHUNK]>>>,
    /// Per chunk: records in use (what [`Chunked::open`] and [`Chunked::close`] count).
    open: Vec<u32>,
    len: usize,
}

impl<T> Chunked<T> {
    /// Room for `len` records, none allocated.
    pub fn new(len: usize) -> Self {
        let n = len.div_ceil(CHUNK);
        Chunked { chunks: (0..n).map(|_| None).collect(), open: vec![0; n], len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        match self.chunks.get((i >> CHUNK_BITS) as usize) {
            Some(Some(c)) => Some(&c[i as usize & (CHUNK - 1)]),
            _ => None,
        }
    }

    #[inline]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        match self.chunks.get_mut((i >> CHUNK_BITS) as usize) {
            Some(Some(c)) => Some(&mut c[i as usize & (CHUNK - 1)]),
            _ => None,
        }
    }

    /// Record `i`, its chunk allocated (every record `vacant()`) if it was not.
    pub fn get_or_alloc(&mut self, i: u32, vacant: impl Fn() -> T) -> &mut T {
        assert!((i as usize) < self.len, "record {i} of {}", self.len);
        let c = self.chunks[(i >> CHUNK_BITS) as usize].get_or_insert_with(|| {
            let v: Vec<T> = (0..CHUNK).map(|_| vacant()).collect();
            v.into_boxed_slice().try_into().unwrap_or_else(|_| unreachable!("CHUNK records"))
        });
        &mut c[i as usize & (CHUNK - 1)]
    }

    /// Count record `i` as in use (its chunk must exist).
    pub fn open(&mut self, i: u32) {
        self.open[(i >> CHUNK_BITS) as usize] += 1;
    }

    /// Record `i` is no longer in use; its chunk is freed when it was the last.
    pub fn close(&mut self, i: u32) {
        let c = (i >> CHUNK_BITS) as usize;
        self.open[c] -= 1;
        if self.open[c] == 0 {
            self.chunks[c] = None;
        }
    }

    /// Records in use.
    pub fn in_use(&self) -> u64 {
        self.open.iter().map(|&n| n as u64).sum()
    }

    /// Chunks allocated now.
    pub fn chunks_allocated(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_and_go_with_their_records() {
        let mut c: Chunked<u64> = Chunked::new(3 * CHUNK + 5);
        assert_eq!(c.chunks.len(), 4);
        assert!(c.get(0).is_none() && c.get(3 * CHUNK as u32 + 4).is_none());
        *c.get_or_alloc(CHUNK as u32 + 3, || 7) = 1;
        c.open(CHUNK as u32 + 3);
        assert_eq!(c.get(CHUNK as u32), Some(&7));
        assert_eq!(c.get(CHUNK as u32 + 3), Some(&1));
        assert!(c.get(0).is_none());
        assert_eq!((c.chunks_allocated(), c.in_use()), (1, 1));
        c.close(CHUNK as u32 + 3);
        assert_eq!((c.chunks_allocated(), c.in_use()), (0, 0));
        assert!(c.get(CHUNK as u32 + 3).is_none());
        assert!(c.get(u32::MAX).is_none());
    }
}
