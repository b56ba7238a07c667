//! Which bytes of a stream have arrived: the cumulative point plus out-of-order ranges.
//! Shared by the cumulative-ACK receivers (TCP, pFabric).

use std::collections::BTreeMap;

use crate::transport::EndpointEvent;

/// A flow of known size being reassembled: what has arrived, and the one `Delivered`
/// event once every byte is in (at once for a zero-byte flow).
#[derive(Clone, Debug)]
pub(crate) struct Reassembly {
    size: u64,
    received: ReceivedBytes,
    complete: bool,
    delivered_pending: bool,
}

impl Reassembly {
    pub(crate) fn new(size: u64) -> Self {
        let empty = size == 0;
        Reassembly { size, received: ReceivedBytes::default(), complete: empty, delivered_pending: empty }
    }

    /// Record a data packet's `len` bytes at `seq`, clipped to the flow: bytes beyond `size`
    /// or below the in-order point carry nothing new.
    pub(crate) fn accept(&mut self, seq: u64, len: u64) {
        let start = seq.max(self.received.in_order());
        let end = seq.saturating_add(len).min(self.size);
        if start < end {
            self.received.insert(start, end);
        }
        if !self.complete && self.received.in_order() == self.size {
            self.complete = true;
            self.delivered_pending = true;
        }
    }

    /// Bytes received in order so far: the cumulative ACK.
    pub(crate) fn in_order(&self) -> u64 {
        self.received.in_order()
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Whether data above the in-order point is waiting for a hole to fill.
    pub(crate) fn has_gaps(&self) -> bool {
        self.received.ooo.is_some()
    }

    /// `Delivered`, once, after the last byte has arrived.
    pub(crate) fn poll_event(&mut self) -> Option<EndpointEvent> {
        if !self.delivered_pending {
            return None;
        }
        self.delivered_pending = false;
        Some(EndpointEvent::Delivered { bytes: self.size })
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct ReceivedBytes {
    /// Every byte below this has arrived.
    next: u64,
    /// Data above `next`: disjoint, non-adjacent `start -> end` ranges, while there are
    /// any (boxed: most receivers never see a hole, and 10^6 of them live at once keep 8
    /// bytes here instead of the map's 24).
    #[allow(clippy::box_collection)] // the box is the point: 8 bytes in the receiver
    ooo: Option<Box<BTreeMap<u64, u64>>>,
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
        if start == self.next && self.ooo.is_none() {
            // in order with no hole above: most packets, and no map node to allocate
            self.next = end;
            return;
        }
        // Ranges starting at or before `end` may touch the new one; walk them backwards.
        let ooo = self.ooo.get_or_insert_with(Default::default);
        let touching: Vec<(u64, u64)> =
            ooo.range(..=end).rev().take_while(|&(_, &e)| e >= start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            ooo.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        ooo.insert(start, end);
        while let Some((&s, &e)) = ooo.first_key_value() {
            if s > self.next {
                break;
            }
            ooo.remove(&s);
            self.next = self.next.max(e);
        }
        if ooo.is_empty() {
            // no hole left: free the map (a finished flow's receiver lingers)
            self.ooo = None;
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
        assert!(r.ooo.is_none());
    }
}
