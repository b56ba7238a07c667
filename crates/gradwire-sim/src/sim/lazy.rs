//! Per-flow state that exists only for flows that have started.
//!
//! A DNN workload creates every flow of the run up front, most of them gated by barriers
//! or scheduled later. [`Chunked`] keeps per-flow records in chunks of [`CHUNK`] flows,
//! allocated when the first flow of a chunk starts: a chunk whose flows all lie ahead
//! costs 8 bytes. Flow ids of a DNN iteration follow its buckets, but a PS bucket's pushes
//! and pulls alternate, so a chunk comes as soon as its first push starts.

/// Flows per chunk.
pub(super) const CHUNK_BITS: u32 = 10;
pub(super) const CHUNK: usize = 1 << CHUNK_BITS;

pub(super) struct Chunked<T> {
    chunks: Vec<Option<Box<[T; CHUNK]>>>,
    len: usize,
}

impl<T> Chunked<T> {
    /// Room for `len` records, none allocated.
    pub fn new(len: usize) -> Self {
        let n = len.div_ceil(CHUNK);
        Chunked { chunks: (0..n).map(|_| None).collect(), len }
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

    /// Record `i`, its chunk allocated (every record `vacant()`) if it was not.
    pub fn get_or_alloc(&mut self, i: u32, vacant: impl Fn() -> T) -> &mut T {
        assert!((i as usize) < self.len, "record {i} of {}", self.len);
        let c = self.chunks[(i >> CHUNK_BITS) as usize].get_or_insert_with(|| {
            let v: Vec<T> = (0..CHUNK).map(|_| vacant()).collect();
            v.into_boxed_slice().try_into().unwrap_or_else(|_| unreachable!("CHUNK records"))
        });
        &mut c[i as usize & (CHUNK - 1)]
    }

    /// Chunks allocated now.
    #[cfg(test)]
    pub fn chunks_allocated(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_comes_with_its_first_record() {
        let mut c: Chunked<u64> = Chunked::new(3 * CHUNK + 5);
        assert_eq!(c.chunks.len(), 4);
        assert!(c.get(0).is_none() && c.get(3 * CHUNK as u32 + 4).is_none());
        *c.get_or_alloc(CHUNK as u32 + 3, || 7) = 1;
        assert_eq!(c.get(CHUNK as u32), Some(&7));
        assert_eq!(c.get(CHUNK as u32 + 3), Some(&1));
        assert!(c.get(0).is_none());
        assert_eq!(c.chunks_allocated(), 1);
        assert!(c.get(u32::MAX).is_none());
    }
}
