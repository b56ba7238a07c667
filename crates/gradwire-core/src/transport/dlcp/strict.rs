//! Strict priority inside a host pair's rate (`pair_strict`, a deviation from dlcp.md).
//!
//! With the pair's rate state (`dlcp_rate_state` other than `tensor` ([`super::RateState`])) the transfers of one
//! host pair that have data to send can split the pair's rate evenly (`pair_shared`) or
//! by priority (`pair_priority`, where a tensor splits it only with those at its priority
//! or above, so the pair may send more than its rate); `pair_strict` splits it so that
//! it never does: the transfers at the highest data priority the pair has sending split
//! the rate, less one minimal pace (one packet per rate period) for each transfer below
//! them, which paces at that minimal rate while any transfer ahead of it has data. Should
//! the rate not cover everyone's minimal pace, all split it evenly. Whenever a transfer
//! stops sending, the others may pace faster: the sender hands their flows to its driver
//! ([`crate::transport::EndpointEvent::Wake`]) so one parked until its old slot is asked
//! again at once. All three count the pair's senders with data in one [`PairSenders`], in
//! the sending host's state; a sender paces from its [`PairView`] of it.

use crate::packet::FlowId;

/// The DLCP senders of one host pair that have data queued, with their priorities (0 is
/// the highest; the same for all under `pair_shared`), in the order they joined. It lives
/// in the sending host's [`crate::transport::HostState`]; each sender paces from a
/// view of it, which the driver refreshes whenever it changes.
#[derive(Debug, Default)]
pub struct PairSenders {
    sending: Vec<(FlowId, u8)>,
}

impl PairSenders {
    /// `flow` at `priority` has data queued.
    pub(super) fn join(&mut self, flow: FlowId, priority: u8) {
        if !self.sending.iter().any(|&(f, _)| f == flow) {
            self.sending.push((flow, priority));
        }
    }

    /// `flow` has no data queued any more.
    pub(super) fn leave(&mut self, flow: FlowId) {
        self.sending.retain(|&(f, _)| f != flow);
    }

    /// The flows counted, in the order they joined.
    pub(crate) fn flows(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.sending.iter().map(|&(f, _)| f)
    }

    /// What a sender at `priority` paces by.
    pub(super) fn view(&self, priority: u8) -> PairView {
        let top = self.sending.iter().map(|&(_, p)| p).min().unwrap_or(0);
        let saturated = |n: usize| n.min(u16::MAX as usize) as u16;
        let count = |keep: &dyn Fn(u8) -> bool| saturated(self.sending.iter().filter(|&&(_, p)| keep(p)).count());
        let all = saturated(self.sending.len());
        PairView { all, at_top: count(&|p| p == top), up_to: count(&|p| p <= priority), top }
    }

    /// Senders counted (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.sending.len()
    }
}

/// A sender's view of its pair's senders with data ([`PairSenders::view`]); small, as it
/// sits in the sender (counts saturate at 65 535 transfers of one host pair).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PairView {
    /// Senders counted.
    all: u16,
    /// At the highest priority present.
    at_top: u16,
    /// At the viewer's priority or above.
    up_to: u16,
    /// The highest priority present.
    top: u8,
}

impl PairView {
    /// The senders a sender splits the rate with (`pair_shared`, `pair_priority`): those at
    /// its priority or above, itself included (at least one).
    pub fn sharing(&self) -> u32 {
        self.up_to.max(1) as u32
    }

    /// The pace of a sender at `priority` whose rate control allows `rate_bps`, the minimal
    /// pace being `min_bps` (`pair_strict`). Over the senders counted, at one `rate_bps`,
    /// the paces add up to at most `rate_bps`.
    pub fn pace(&self, priority: u8, rate_bps: u64, min_bps: u64) -> u64 {
        let all = self.all as u64;
        if all == 0 {
            return rate_bps.max(1);
        }
        if rate_bps < all.saturating_mul(min_bps) {
            return (rate_bps / all).max(1);
        }
        if priority > self.top {
            return min_bps.max(1);
        }
        let at_top = self.at_top as u64;
        ((rate_bps - (all - at_top) * min_bps) / at_top).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_level_splits_the_rate_less_the_minimal_paces_below() {
        let mut p = PairSenders::default();
        let pace = |p: &PairSenders, prio: u8, rate: u64| p.view(prio).pace(prio, rate, 10);
        assert_eq!(pace(&p, 2, 1000), 1000, "nobody counted: the whole rate");
        p.join(1, 2);
        assert_eq!(pace(&p, 2, 1000), 1000, "alone: the whole rate");
        p.join(2, 5);
        p.join(3, 5);
        assert_eq!(pace(&p, 2, 1000), 980);
        assert_eq!(pace(&p, 5, 1000), 10);
        p.join(4, 2);
        assert_eq!(pace(&p, 2, 1000), 490);
        // the sum is the rate
        assert_eq!(2 * pace(&p, 2, 1000) + 2 * pace(&p, 5, 1000), 1000);
        // too little for everyone's minimal pace: an even split
        assert_eq!(pace(&p, 2, 30), 7);
        assert_eq!(pace(&p, 5, 30), 7);
        // split evenly with those at or above one's priority
        assert_eq!((p.view(2).sharing(), p.view(5).sharing(), p.view(0).sharing()), (2, 4, 1));
        p.leave(1);
        p.leave(4);
        assert_eq!(p.flows().collect::<Vec<_>>(), vec![2, 3], "in the order they joined");
        assert_eq!(pace(&p, 5, 1000), 500, "the level below is now the top");
        p.leave(2);
        p.leave(3);
        assert_eq!(p.len(), 0);
    }
}
