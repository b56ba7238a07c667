//! The sender's per-segment record: when each outstanding segment was last sent, and with
//! SACK what the receiver holds and what is lost (RFC 6675's scoreboard, RFC 8985's
//! per-segment transmit times).
//!
//! Compact by construction: one 16-byte record per outstanding segment, in a ring that
//! the window's own growth sizes (the SACK-less sender kept the same records for Karn's
//! rule), flags for SACKed / lost / retransmission in flight, and running counts, so
//! `pipe` (RFC 6675) is O(1). Segments are MSS-aligned (a retransmission covers exactly
//! one original segment), so a segment is its index `seq / mss`.

use std::collections::VecDeque;

use crate::time::Time;

/// One outstanding segment.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SegInfo {
    /// When it was last sent.
    pub(super) sent_at: Time,
    /// Ever sent twice (Karn's rule: no RTT sample from it).
    pub(super) retransmitted: bool,
    /// The receiver holds it (a SACK named it).
    pub(super) sacked: bool,
    /// Deemed lost (SACKs above it, RACK, or an RTO) and not yet SACKed.
    pub(super) lost: bool,
    /// A retransmission of it, sent after it was deemed lost, may still be in flight.
    pub(super) retx_out: bool,
}

/// The records of segments `base..base + len`, from the oldest unacknowledged on.
#[derive(Clone, Debug, Default)]
pub(super) struct Scoreboard {
    segs: VecDeque<SegInfo>,
    base: u64,
    sacked: u64,
    lost: u64,
    retx_out: u64,
    /// One past the highest SACKed segment (0: none).
    high_sacked: u64,
    /// Segments below this are not candidates for SACK-based loss marking again.
    loss_scan: u64,
    /// No lost segment awaiting retransmission lies below this.
    retx_scan: u64,
    /// Times a segment (or a retransmission of it) has been deemed lost, ever.
    marks: u64,
}

impl Scoreboard {
    fn get_mut(&mut self, idx: u64) -> Option<&mut SegInfo> {
        let off = idx.checked_sub(self.base)?;
        self.segs.get_mut(off as usize)
    }

    pub(super) fn get(&self, idx: u64) -> Option<&SegInfo> {
        let off = idx.checked_sub(self.base)?;
        self.segs.get(off as usize)
    }

    /// Segment `idx` was sent at `now` (`retransmission`: not for the first time).
    pub(super) fn on_send(&mut self, idx: u64, now: Time, retransmission: bool) {
        let Some(off) = idx.checked_sub(self.base) else { return };
        let off = off as usize;
        if self.segs.len() <= off {
            self.segs.resize(off + 1, SegInfo::default());
        }
        let s = &mut self.segs[off];
        s.sent_at = now;
        s.retransmitted |= retransmission;
        if s.lost && retransmission && !s.retx_out {
            s.retx_out = true;
            self.retx_out += 1;
        }
    }

    /// The records of segments `base..base + n` (`n` may exceed what is recorded).
    pub(super) fn range(&self, first: u64, end: u64) -> impl Iterator<Item = &SegInfo> {
        let lo = first.saturating_sub(self.base).min(self.segs.len() as u64) as usize;
        let hi = end.saturating_sub(self.base).min(self.segs.len() as u64) as usize;
        self.segs.range(lo..hi.max(lo))
    }

    /// Everything below segment `upto` is cumulatively acknowledged: forget it.
    pub(super) fn release(&mut self, upto: u64) {
        while self.base < upto {
            let Some(s) = self.segs.pop_front() else { break };
            self.base += 1;
            self.sacked -= s.sacked as u64;
            self.lost -= s.lost as u64;
            self.retx_out -= s.retx_out as u64;
        }
        self.base = self.base.max(upto);
        self.loss_scan = self.loss_scan.max(self.base);
        self.retx_scan = self.retx_scan.max(self.base);
    }

    /// A SACK names segment `idx`; returns its record as it was if this is news.
    pub(super) fn sack(&mut self, idx: u64) -> Option<SegInfo> {
        let s = self.get_mut(idx)?;
        if s.sacked {
            return None;
        }
        let was = *s;
        s.sacked = true;
        s.lost = false;
        s.retx_out = false;
        self.sacked += 1;
        self.lost -= was.lost as u64;
        self.retx_out -= was.retx_out as u64;
        self.high_sacked = self.high_sacked.max(idx + 1);
        Some(was)
    }

    /// Deem segment `idx` lost (unless SACKed); a retransmission of it in flight is
    /// presumed lost too. True if it was not lost before or had a retransmission out.
    pub(super) fn mark_lost(&mut self, idx: u64) -> bool {
        let Some(s) = self.get_mut(idx) else { return false };
        if s.sacked || (s.lost && !s.retx_out) {
            return false;
        }
        let was = *s;
        s.lost = true;
        s.retx_out = false;
        self.lost += !was.lost as u64;
        self.retx_out -= was.retx_out as u64;
        self.retx_scan = self.retx_scan.min(idx);
        self.marks += 1;
        true
    }

    /// Times a segment or a retransmission has been deemed lost so far (a new loss shows
    /// as a change).
    pub(super) fn marks(&self) -> u64 {
        self.marks
    }

    /// RFC 6675 IsLost with `dupthresh`: every segment with at least `dupthresh` SACKed
    /// segments above it is lost. Amortised O(1) per segment: a segment is looked at once
    /// on the way up (`loss_scan`), the SACKed ones at the top once per call.
    pub(super) fn mark_lost_below_sacks(&mut self, dupthresh: u32) -> u64 {
        if self.sacked < dupthresh as u64 {
            return 0;
        }
        // The dupthresh-th highest SACKed segment: everything below it is lost.
        let (mut count, mut idx) = (0u32, self.high_sacked);
        while idx > self.base && count < dupthresh {
            idx -= 1;
            count += self.get(idx).is_some_and(|s| s.sacked) as u32;
        }
        let mut marked = 0;
        let mut i = self.loss_scan.max(self.base);
        while i < idx {
            marked += self.mark_lost(i) as u64;
            i += 1;
        }
        self.loss_scan = self.loss_scan.max(idx);
        marked
    }

    /// Every outstanding segment not SACKed is lost (an RTO).
    pub(super) fn mark_all_lost(&mut self) {
        for i in self.base..self.base + self.segs.len() as u64 {
            self.mark_lost(i);
        }
    }

    /// The lowest lost segment with no retransmission in flight.
    pub(super) fn next_lost(&mut self) -> Option<u64> {
        if self.lost == self.retx_out {
            return None;
        }
        let mut i = self.retx_scan.max(self.base);
        while let Some(s) = self.get(i) {
            if s.lost && !s.retx_out {
                self.retx_scan = i;
                return Some(i);
            }
            i += 1;
        }
        self.retx_scan = i;
        None
    }

    /// RFC 6675's pipe, in segments, given `outstanding` segments `base..`: what the network
    /// still holds of them.
    pub(super) fn pipe(&self, outstanding: u64) -> u64 {
        (outstanding + self.retx_out).saturating_sub(self.sacked + self.lost)
    }

    pub(super) fn sacked(&self) -> u64 {
        self.sacked
    }

    pub(super) fn lost(&self) -> u64 {
        self.lost
    }

    pub(super) fn base(&self) -> u64 {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(n: u64) -> Scoreboard {
        let mut b = Scoreboard::default();
        for i in 0..n {
            b.on_send(i, i, false);
        }
        b
    }

    #[test]
    fn holes_below_three_sacks_are_lost_and_pipe_counts_what_the_network_holds() {
        let mut b = board(10);
        assert_eq!(b.pipe(10), 10);
        for i in [3, 4, 6] {
            b.sack(i).unwrap();
        }
        assert!(b.sack(4).is_none(), "a SACK is news once");
        // The third-highest SACK is 3: segments 0..3 are lost, 5 (between SACKs) is not yet.
        assert_eq!(b.mark_lost_below_sacks(3), 3);
        assert_eq!((b.sacked(), b.lost()), (3, 3));
        assert_eq!(b.pipe(10), 4, "10 outstanding - 3 SACKed - 3 lost");
        b.sack(8).unwrap();
        assert_eq!(b.mark_lost_below_sacks(3), 0, "5 has two SACKs above it");
        b.sack(9).unwrap();
        assert_eq!(b.mark_lost_below_sacks(3), 1, "now 5 has three");
        assert_eq!(b.next_lost(), Some(0));
        b.on_send(0, 20, true);
        assert_eq!(b.next_lost(), Some(1));
        assert_eq!(b.pipe(10), 10 - 5 - 4 + 1);
        // A retransmission presumed lost is due again; the cumulative ACK forgets segments.
        assert!(b.mark_lost(0));
        assert_eq!(b.next_lost(), Some(0));
        b.release(3);
        assert_eq!((b.base(), b.sacked(), b.lost()), (3, 5, 1));
        assert_eq!(b.next_lost(), Some(5));
    }

    #[test]
    fn an_rto_marks_everything_not_sacked() {
        let mut b = board(6);
        b.sack(2).unwrap();
        b.mark_all_lost();
        assert_eq!((b.lost(), b.pipe(6)), (5, 0));
    }
}
