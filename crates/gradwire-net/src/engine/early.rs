//! The early store: datagrams of calls this rank has not posted yet, kept so the sender
//! need not resend them (`EngineConfig::early_buffer_bytes` bounds it).

/// Where each kept datagram is: (offset, length, CE, sending rank).
type Index = Vec<(usize, usize, bool, u32)>;

/// Kept datagrams back to back, and their index.
#[derive(Default)]
pub(super) struct Kept {
    data: Vec<u8>,
    index: Index,
}

impl Kept {
    /// Each kept datagram with its CE mark and sending rank, in arrival order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], bool, u32)> {
        self.index.iter().map(|&(at, len, ce, from)| (&self.data[at..at + len], ce, from))
    }
}

pub(super) struct EarlyStore {
    kept: Kept,
    /// The previous store, emptied: a replay reuses its memory (already faulted in)
    /// instead of growing a new one.
    spare: Kept,
    limit: usize,
}

impl EarlyStore {
    pub(super) fn new(limit: usize) -> Self {
        EarlyStore { kept: Kept::default(), spare: Kept::default(), limit }
    }

    /// Datagrams kept.
    pub(super) fn len(&self) -> usize {
        self.kept.index.len()
    }

    /// Keeps `d` if it fits the limit; false if it was dropped.
    pub(super) fn keep(&mut self, d: &[u8], ce: bool, from: u32) -> bool {
        if self.kept.data.len() + d.len() > self.limit {
            return false;
        }
        self.kept.index.push((self.kept.data.len(), d.len(), ce, from));
        self.kept.data.extend_from_slice(d);
        true
    }

    /// Everything kept so far, for a replay (which keeps again what is still early); the
    /// store starts over in the spare's memory. `None`: nothing kept.
    pub(super) fn take(&mut self) -> Option<Kept> {
        if self.kept.index.is_empty() {
            return None;
        }
        Some(std::mem::replace(&mut self.kept, std::mem::take(&mut self.spare)))
    }

    /// Hands back a replayed batch's memory for the next replay.
    pub(super) fn recycle(&mut self, mut used: Kept) {
        used.data.clear();
        used.index.clear();
        self.spare = used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_limit_and_replays_in_order() {
        let mut s = EarlyStore::new(10);
        assert!(s.take().is_none());
        assert!(s.keep(b"abcd", false, 1) && s.keep(b"efg", true, 2));
        assert!(!s.keep(b"hijk", false, 3), "11 bytes > 10");
        assert_eq!(s.len(), 2);
        let kept = s.take().unwrap();
        assert_eq!(s.len(), 0);
        let got: Vec<_> = kept.iter().map(|(d, ce, from)| (d.to_vec(), ce, from)).collect();
        assert_eq!(got, vec![(b"abcd".to_vec(), false, 1), (b"efg".to_vec(), true, 2)]);
        // a replay keeps what is still early
        let (d, ce, from) = kept.iter().nth(1).unwrap();
        assert!(s.keep(d, ce, from));
        s.recycle(kept);
        assert_eq!(s.len(), 1);
        assert!(s.keep(b"1234567", false, 4) && !s.keep(b"x", false, 5));
    }
}
