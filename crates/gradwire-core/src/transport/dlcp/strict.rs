//! Strict priority inside a host pair's rate (`pair_strict`, a deviation from dlcp.md).
//!
//! With the pair's rate state (`dlcp_rate_state` other than `tensor` ([`super::RateState`])) the transfers of one
//! host pair that have data to send can split the pair's rate evenly (`pair_shared`) or
//! by priority (`pair_priority`, where a tensor splits it only with those at its priority
//! or above, so the pair may send more than its rate). [`PairSenders`] splits it so that
//! it never does: the transfers at the highest data priority the pair has sending split
//! the rate, less one minimal pace (one packet per rate period) for each transfer below
//! them, which paces at that minimal rate while any transfer ahead of it has data. Should
//! the rate not cover everyone's minimal pace, all split it evenly. Whenever a transfer
//! stops sending, the others may pace faster: the sender hands their flows to its driver
//! ([`crate::transport::EndpointEvent::Wake`]) so one parked until its old slot is asked
//! again at once.

use std::sync::Mutex;

use crate::packet::FlowId;

/// The DLCP senders of one host pair that have data queued, with their data priorities
/// (0 is the highest).
#[derive(Debug, Default)]
pub struct PairSenders {
    sending: Mutex<Vec<(FlowId, u8)>>,
}

impl PairSenders {
    /// `flow` at `priority` has data queued.
    pub(super) fn join(&self, flow: FlowId, priority: u8) {
        let mut s = self.sending.lock().expect("not poisoned");
        if !s.iter().any(|&(f, _)| f == flow) {
            s.push((flow, priority));
        }
    }

    /// `flow` has no data queued any more; the flows still sending are appended to `wake`.
    pub(super) fn leave(&self, flow: FlowId, wake: &mut Vec<FlowId>) {
        let mut s = self.sending.lock().expect("not poisoned");
        s.retain(|&(f, _)| f != flow);
        wake.extend(s.iter().map(|&(f, _)| f));
    }

    /// The pace of a sender at `priority` whose rate control allows `rate_bps`, the minimal
    /// pace being `min_bps`. Over the senders counted, at one `rate_bps`, the paces add up
    /// to at most `rate_bps`.
    pub(super) fn pace(&self, priority: u8, rate_bps: u64, min_bps: u64) -> u64 {
        let s = self.sending.lock().expect("not poisoned");
        let all = s.len() as u64;
        let Some(top) = s.iter().map(|&(_, p)| p).min() else { return rate_bps.max(1) };
        if rate_bps < all.saturating_mul(min_bps) {
            return (rate_bps / all).max(1);
        }
        if priority > top {
            return min_bps.max(1);
        }
        let at_top = s.iter().filter(|&&(_, p)| p == top).count() as u64;
        ((rate_bps - (all - at_top) * min_bps) / at_top).max(1)
    }

    /// Senders counted (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.sending.lock().expect("not poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_level_splits_the_rate_less_the_minimal_paces_below() {
        let p = PairSenders::default();
        let mut wake = Vec::new();
        p.join(1, 2);
        assert_eq!(p.pace(2, 1000, 10), 1000, "alone: the whole rate");
        p.join(2, 5);
        p.join(3, 5);
        assert_eq!(p.pace(2, 1000, 10), 980);
        assert_eq!(p.pace(5, 1000, 10), 10);
        p.join(4, 2);
        assert_eq!(p.pace(2, 1000, 10), 490);
        // the sum is the rate
        assert_eq!(2 * p.pace(2, 1000, 10) + 2 * p.pace(5, 1000, 10), 1000);
        // too little for everyone's minimal pace: an even split
        assert_eq!(p.pace(2, 30, 10), 7);
        assert_eq!(p.pace(5, 30, 10), 7);
        p.leave(1, &mut wake);
        p.leave(4, &mut wake);
        assert_eq!(wake, vec![2, 3, 4, 2, 3]);
        assert_eq!(p.pace(5, 1000, 10), 500, "the level below is now the top");
        p.leave(2, &mut wake);
        p.leave(3, &mut wake);
        assert_eq!(p.len(), 0);
    }
}
