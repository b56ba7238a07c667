//! When a paced sender may put its next packet on the wire (quinn-proto's `Pacer` has
//! the same job: the sender, not its driver, knows when the next packet may leave).
//!
//! The pacer keeps the start of the next packet's slot. A packet may leave while that
//! slot starts no later than `now + burst`; each packet moves the slot on by its
//! serialization time at the sender's rate, from `now - catch_up` at the earliest, so a
//! driver that came back late may send the slots it missed (up to `catch_up` of them) at
//! once. With both at zero (the simulator's NIC asks for every packet on time) a packet
//! leaves at its slot exactly. The driver learns when to come back from
//! [`Pacer::next_transmit`], folded into the sender's `poll_timeout`: the slot's start,
//! when a whole burst may leave, as quinn-proto waits for a full token bucket, so a
//! driver that batches sends gets whole bursts, not one packet per wakeup.

use crate::time::{serialization, Time};

/// How far a paced sender may run ahead of, and catch up behind, its slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacing {
    /// A packet may leave this long before its slot, so a driver that wakes once per
    /// burst (a software host sending in GSO batches) keeps the rate. 0: at its slot.
    pub burst: Time,
    /// After a gap in which the driver did not ask (a busy loop, a preempted thread), the
    /// sender may send up to this much of the gap's worth of slots at once, so the gaps do
    /// not set the rate. 0: slots the driver missed are lost.
    pub catch_up: Time,
}

/// The slot clock of one paced sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacer {
    next: Time,
    cfg: Pacing,
    /// With [`Pacer::on_sent_following`]: the last packet's wire bytes, whose slot length
    /// is taken at the rate asked later; 0 otherwise.
    pending: u32,
}

impl Pacer {
    /// A pacer whose first slot is `now`.
    pub fn new(cfg: Pacing, now: Time) -> Pacer {
        Pacer { next: now, cfg, pending: 0 }
    }

    /// A packet may leave at `now`.
    pub fn may_send(&self, now: Time) -> bool {
        self.next <= now.saturating_add(self.cfg.burst)
    }

    /// A packet of `wire_bytes` left at `now`, paced at `rate_bps`.
    #[inline]
    pub fn on_sent(&mut self, now: Time, wire_bytes: u32, rate_bps: u64) {
        self.next = self.next.max(now.saturating_sub(self.cfg.catch_up)) + serialization(wire_bytes, rate_bps);
    }

    /// When the driver should ask again: the next slot starts (a whole burst may leave).
    pub fn next_transmit(&self) -> Time {
        self.next
    }

    /// For a sender whose rate may change between its packets (another sender it shares
    /// a rate with stops): a packet of `wire_bytes` left at `now`, and the time it takes at
    /// the rate asked when the next one may leave ([`Pacer::next_transmit_at`]) is what
    /// moves the slot on, not its time at the rate it left at. With a constant rate this
    /// is [`Pacer::on_sent`]. Use these three together, never with the others.
    pub fn on_sent_following(&mut self, now: Time, wire_bytes: u32, rate_bps: u64) {
        self.next = self.next_transmit_at(rate_bps).max(now.saturating_sub(self.cfg.catch_up));
        self.pending = wire_bytes;
    }

    /// With [`Pacer::on_sent_following`]: a packet may leave at `now` at `rate_bps`.
    pub fn may_send_at(&self, now: Time, rate_bps: u64) -> bool {
        self.next_transmit_at(rate_bps) <= now.saturating_add(self.cfg.burst)
    }

    /// With [`Pacer::on_sent_following`]: the next slot at `rate_bps`.
    pub fn next_transmit_at(&self, rate_bps: u64) -> Time {
        self.next + serialization(self.pending, rate_bps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::US;

    /// 1250 bytes at 1 Gbit/s: 10 µs a packet.
    const RATE: u64 = 1_000_000_000;
    const WIRE: u32 = 1250;

    fn sends(p: &mut Pacer, now: Time) -> u32 {
        let mut n = 0;
        while p.may_send(now) {
            p.on_sent(now, WIRE, RATE);
            n += 1;
        }
        n
    }

    #[test]
    fn without_burst_a_packet_leaves_at_its_slot() {
        let mut p = Pacer::new(Pacing::default(), 0);
        assert_eq!(sends(&mut p, 0), 1);
        assert_eq!(p.next_transmit(), 10 * US);
        assert!(!p.may_send(10 * US - 1));
        // a late driver loses the slots it missed
        assert_eq!(sends(&mut p, 55 * US), 1);
        assert_eq!(p.next_transmit(), 65 * US);
    }

    #[test]
    fn a_burst_runs_ahead_and_catch_up_keeps_the_rate_across_a_gap() {
        let mut p = Pacer::new(Pacing { burst: 20 * US, catch_up: 0 }, 0);
        // slots 0, 10 and 20 µs start within the burst
        assert_eq!(sends(&mut p, 0), 3);
        assert_eq!(p.next_transmit(), 30 * US);
        let mut q = Pacer::new(Pacing { burst: 0, catch_up: 40 * US }, 0);
        assert_eq!(sends(&mut q, 0), 1);
        // back 100 µs later: the last 40 µs of slots, then the one due now
        assert_eq!(sends(&mut q, 100 * US), 5);
        assert_eq!(q.next_transmit(), 110 * US);
    }

    #[test]
    fn a_following_slot_takes_the_rate_asked_now() {
        let mut p = Pacer::new(Pacing::default(), 0);
        assert!(p.may_send_at(0, RATE / 10));
        // sent at a tenth of the rate (100 µs a packet) ...
        p.on_sent_following(0, WIRE, RATE / 10);
        assert_eq!(p.next_transmit_at(RATE / 10), 100 * US);
        assert!(!p.may_send_at(50 * US, RATE / 10));
        // ... but the rate rose since: the slot is 10 µs after the last one
        assert!(p.may_send_at(10 * US, RATE));
        assert_eq!(p.next_transmit_at(RATE), 10 * US);
        p.on_sent_following(12 * US, WIRE, RATE);
        assert_eq!(p.next_transmit_at(RATE), 22 * US);
        // a constant rate gives on_sent's slots
        let mut q = Pacer::new(Pacing::default(), 0);
        for now in [0, 10 * US, 25 * US] {
            q.on_sent(now, WIRE, RATE);
        }
        let mut r = Pacer::new(Pacing::default(), 0);
        for now in [0, 10 * US, 25 * US] {
            r.on_sent_following(now, WIRE, RATE);
        }
        assert_eq!(q.next_transmit(), r.next_transmit_at(RATE));
    }
}
