//! Which bytes of a stream have arrived: the cumulative point plus out-of-order ranges.
//! Shared by the cumulative-ACK receivers (TCP, pFabric).

use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub(crate) struct ReceivedBytes {
    /// Every byte below this has arrived.
    next: u64,
    /// Data above `next`: disjoint, non-adjacent `start -> end` ranges.
    ooo: BTreeMap<u64, u64>,
}

impl ReceivedBytes {
    /// Bytes received in order so far.
    pub(crate) fn in_order(&self) -> u64 {
        self.next
    }

    /// Record `[start, end)`, merging with touching ranges, and advance the in-order point.
    /// Bytes below the in-order point are ignored; nothing is counted twice.
    pub(crate) fn insert(&mut self, start: u64, end: u64) {
        let mut start = start.max(self.next);
        let mut end = end;
        if end <= start {
            return;
        }
        // Ranges starting at or before `end` may touch the new one; walk them backwards.
        let touching: Vec<(u64, u64)> =
            self.ooo.range(..=end).rev().take_while(|&(_, &e)| e >= start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            self.ooo.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.ooo.insert(start, end);
        while let Some((&s, &e)) = self.ooo.first_key_value() {
            if s > self.next {
                break;
            }
            self.ooo.remove(&s);
            self.next = self.next.max(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReceivedBytes;

    #[test]
    fn merges_out_of_order_ranges_and_advances() {
        let mut r = ReceivedBytes::default();
        r.insert(20, 30);
        r.insert(40, 50);
        assert_eq!(r.in_order(), 0);
        r.insert(10, 20); // touches [20, 30)
        assert_eq!(r.in_order(), 0);
        r.insert(0, 10);
        assert_eq!(r.in_order(), 30);
        r.insert(25, 45); // overlaps the gap and [40, 50)
        assert_eq!(r.in_order(), 50);
        r.insert(0, 50); // duplicate: nothing new
        assert_eq!(r.in_order(), 50);
        assert!(r.ooo.is_empty());
    }
}
