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
    /// Records addressed (ids `0..len`).
    len: usize,
    /// The ids kept, when not all are: chunk slots are their ranks among them.
    members: Option<Members>,
}

impl<T> Chunked<T> {
    /// Room for `len` records, none allocated.
    pub fn new(len: usize) -> Self {
        let n = len.div_ceil(CHUNK);
        Chunked { chunks: (0..n).map(|_| None).collect(), len, members: None }
    }

    /// Room for the records of the ids in `0..len` that `keep` selects, none allocated;
    /// the others have none (`get` answers `None`, `get_or_alloc` panics).
    pub fn subset(len: usize, keep: impl Fn(u32) -> bool) -> Self {
        let members = Members::new(len, keep);
        let n = members.count().div_ceil(CHUNK);
        Chunked { chunks: (0..n).map(|_| None).collect(), len, members: Some(members) }
    }

    /// Ids addressed, kept or not.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The slot of id `i`, if it is kept.
    #[inline]
    fn slot(&self, i: u32) -> Option<usize> {
        match &self.members {
            None => Some(i as usize),
            Some(m) => m.rank(i),
        }
    }

    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        let s = self.slot(i)?;
        match self.chunks.get(s >> CHUNK_BITS) {
            Some(Some(c)) => Some(&c[s & (CHUNK - 1)]),
            _ => None,
        }
    }

    /// Record `i`, its chunk allocated (every record `vacant()`) if it was not.
    pub fn get_or_alloc(&mut self, i: u32, vacant: impl Fn() -> T) -> &mut T {
        assert!((i as usize) < self.len, "record {i} of {}", self.len);
        let s = self.slot(i).unwrap_or_else(|| panic!("record {i} is not kept here"));
        let c = self.chunks[s >> CHUNK_BITS].get_or_insert_with(|| {
            let v: Vec<T> = (0..CHUNK).map(|_| vacant()).collect();
            v.into_boxed_slice().try_into().unwrap_or_else(|_| unreachable!("CHUNK records"))
        });
        &mut c[s & (CHUNK - 1)]
    }

    /// The same records addressed by id, every id kept.
    pub fn into_whole(self, vacant: impl Fn() -> T) -> Self
    where
        T: Copy,
    {
        let mut whole = Chunked::new(self.len);
        for i in 0..self.len as u32 {
            if let Some(&r) = self.get(i) {
                *whole.get_or_alloc(i, &vacant) = r;
            }
        }
        whole
    }

    /// Chunks allocated now.
    #[cfg(test)]
    pub fn chunks_allocated(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }
}

/// A set of ids in `0..len`, with each member's rank among them in two loads.
struct Members {
    bits: Vec<u64>,
    /// Members in the words before each word.
    before: Vec<u32>,
}

impl Members {
    fn new(len: usize, keep: impl Fn(u32) -> bool) -> Self {
        let mut bits = vec![0u64; len.div_ceil(64)];
        for i in (0..len as u32).filter(|&i| keep(i)) {
            bits[i as usize / 64] |= 1 << (i % 64);
        }
        let mut n = 0;
        let before = bits
            .iter()
            .map(|w| {
                let b = n;
                n += w.count_ones();
                b
            })
            .collect();
        Members { bits, before }
    }

    fn count(&self) -> usize {
        self.before.last().map_or(0, |&b| b as usize + self.bits[self.bits.len() - 1].count_ones() as usize)
    }

    #[inline]
    fn rank(&self, i: u32) -> Option<usize> {
        let (w, bit) = (i as usize / 64, i % 64);
        let word = *self.bits.get(w)?;
        (word >> bit & 1 == 1).then(|| (self.before[w] + (word & ((1 << bit) - 1)).count_ones()) as usize)
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

    #[test]
    fn a_subset_keeps_its_members_densely_and_no_one_else() {
        let len = 5 * CHUNK + 17;
        let mut c: Chunked<u32> = Chunked::subset(len, |i| i % 2 == 1);
        assert_eq!(c.len(), len);
        assert_eq!(c.chunks.len(), (len / 2).div_ceil(CHUNK));
        for i in (1..len as u32).step_by(2) {
            *c.get_or_alloc(i, || 0) = i;
        }
        // every odd id's record, in chunks of odd ids only
        assert_eq!(c.chunks_allocated(), (len / 2).div_ceil(CHUNK));
        assert!((0..len as u32).all(|i| c.get(i) == (i % 2 == 1).then_some(&i)));
        assert!(c.get(u32::MAX).is_none());
        let whole = c.into_whole(|| 0);
        assert!((0..len as u32).all(|i| whole.get(i) == Some(&if i % 2 == 1 { i } else { 0 })));
    }

    #[test]
    #[should_panic(expected = "record 2 is not kept here")]
    fn a_subset_refuses_a_record_it_does_not_keep() {
        let mut c: Chunked<u32> = Chunked::subset(10, |i| i % 2 == 1);
        c.get_or_alloc(2, || 0);
    }

    #[test]
    fn members_rank_across_words() {
        let m = Members::new(200, |i| i % 3 == 0 || i == 130);
        let kept: Vec<u32> = (0..200).filter(|&i| i % 3 == 0 || i == 130).collect();
        assert_eq!(m.count(), kept.len());
        for (r, &i) in kept.iter().enumerate() {
            assert_eq!(m.rank(i), Some(r));
        }
        assert_eq!(m.rank(1), None);
        assert_eq!(Members::new(0, |_| true).count(), 0);
    }
}
