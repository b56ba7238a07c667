//! PCN, proactive congestion notification (pcn.md §3): before a DDL burst, the worker
//! sends a PCN-START toward its parameter server; every switch port on the path lowers its
//! ECN marking threshold to the PCN threshold the START carries, so long-lived flows drain
//! the queue for one RTT; the server ACKs, the worker sends its burst after the ACK, and a
//! port restores its initial threshold once every announced burst has arrived.
//!
//! Sans-IO, like the rest of the switch: a driver (the simulator, the emulated testbed)
//! owns the packets and the clock and calls
//!
//! * [`PcnMark::decode`] on a packet's 6-bit DSCP: `None` for ordinary traffic;
//! * per egress port, [`PcnRegister::on_mark`] for each marked packet it forwards, then
//!   applies [`PcnRegister::threshold`] (e.g. [`EgressPort::set_ecn_threshold`]); at
//!   [`PcnRegister::poll_timeout`] it calls [`PcnRegister::handle_timeout`] and applies
//!   the threshold again (the lease that restores a port whose bursts never came);
//! * at the server, [`PcnMark::ack_for`] to answer a START;
//! * at the worker, a [`PcnWorker`]: `start` gives the START's DSCP, `on_ack` or
//!   `handle_timeout` lets the burst go, and the burst's first packet carries
//!   [`PcnMark::Burst`].
//!
//! [`EgressPort::set_ecn_threshold`]: super::EgressPort::set_ecn_threshold
//!
//! Encoding (pcn.md Figure 7): DSCP bit 5 is the START flag, bit 4 the ACK flag, bits 0-3
//! the PCN threshold divided by 5 (0..=75 in steps of 5). pcn.md does not say how a switch
//! recognises "the burst arrives"; here the burst's first packet carries both flags (a
//! combination neither a START nor an ACK uses).

use crate::time::Time;

/// Largest threshold the 4-bit field carries (15 x 5).
pub const MAX_PCN_THRESHOLD: u32 = 75;
const START_BIT: u8 = 0b10_0000;
const ACK_BIT: u8 = 0b01_0000;
const THRESHOLD_BITS: u8 = 0b00_1111;

/// A PCN packet's meaning, as carried in its DSCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcnMark {
    /// Worker to server: a burst is coming, apply this threshold (packets).
    Start {
        /// PCN threshold to apply, in packets.
        threshold: u32,
    },
    /// Server to worker: START received; the worker may send its burst.
    Ack {
        /// The START's threshold, echoed (packets).
        threshold: u32,
    },
    /// The first packet of an announced burst: the port's counter goes down.
    Burst,
}

/// A threshold the 4-bit DSCP field cannot carry: not a multiple of 5, or above
/// [`MAX_PCN_THRESHOLD`]. Holds the rejected value (packets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadThreshold(pub u32);

impl std::fmt::Display for BadThreshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a PCN threshold is a multiple of 5 in 0..={MAX_PCN_THRESHOLD} packets (got {})", self.0)
    }
}

impl std::error::Error for BadThreshold {}

fn field(threshold: u32) -> Result<u8, BadThreshold> {
    if !threshold.is_multiple_of(5) || threshold > MAX_PCN_THRESHOLD {
        return Err(BadThreshold(threshold));
    }
    Ok((threshold / 5) as u8)
}

impl PcnMark {
    /// The 6-bit DSCP (shift left by 2 and add the ECN bits for the IPv4 TOS byte).
    pub fn encode(self) -> Result<u8, BadThreshold> {
        Ok(match self {
            PcnMark::Start { threshold } => START_BIT | field(threshold)?,
            PcnMark::Ack { threshold } => ACK_BIT | field(threshold)?,
            PcnMark::Burst => START_BIT | ACK_BIT,
        })
    }

    /// `None` for a DSCP without PCN flags (ordinary traffic). Bits above the 6 DSCP bits
    /// are ignored.
    pub fn decode(dscp: u8) -> Option<PcnMark> {
        let threshold = (dscp & THRESHOLD_BITS) as u32 * 5;
        match (dscp & START_BIT != 0, dscp & ACK_BIT != 0) {
            (false, false) => None,
            (true, false) => Some(PcnMark::Start { threshold }),
            (false, true) => Some(PcnMark::Ack { threshold }),
            (true, true) => Some(PcnMark::Burst),
        }
    }

    /// The server's answer to a START (the same threshold, ACK flag instead).
    pub fn ack_for(self) -> Option<PcnMark> {
        match self {
            PcnMark::Start { threshold } => Some(PcnMark::Ack { threshold }),
            _ => None,
        }
    }
}

/// pcn.md Eq. (1): the ECN threshold below which `n` long flows lose throughput,
/// `RTT · C / (√N · MTU)` packets (37 in pcn.md's testbed).
pub fn ecn_lower_bound(rtt_ns: f64, link_bps: f64, long_flows: u32, mtu_bytes: u32) -> f64 {
    rtt_ns * 1e-9 * link_bps / 8.0 / ((long_flows.max(1) as f64).sqrt() * mtu_bytes as f64)
}

/// The smallest multiple of 5 at least `x` (switch thresholds are multiples of 5), within
/// 5..=75.
fn up_to_five(x: f64) -> u32 {
    ((x / 5.0).ceil() as u32 * 5).clamp(5, MAX_PCN_THRESHOLD)
}

/// pcn.md §3.3: the initial threshold, Eq. (1)'s bound rounded up to a multiple of 5
/// (37 -> 40), and the PCN threshold `h_PCN = bound · k` (Eq. 2) rounded the same way
/// (k = 1/4: 9.25 -> 10; k = 1 gives the initial threshold: PCN changes nothing).
pub fn pcn_thresholds(rtt_ns: f64, link_bps: f64, long_flows: u32, mtu_bytes: u32, k: f64) -> (u32, u32) {
    let bound = ecn_lower_bound(rtt_ns, link_bps, long_flows, mtu_bytes);
    (up_to_five(bound), up_to_five(bound * k))
}

/// What one [`PcnRegister`] has seen, in packets (marks) or events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcnCounters {
    /// START marks forwarded.
    pub starts: u64,
    /// Burst marks that matched an announced burst.
    pub bursts: u64,
    /// Burst marks that found the counter at zero (a duplicate, or the lease already ran out).
    pub unmatched_bursts: u64,
    /// Times the lease restored the initial threshold with bursts still announced.
    pub lease_expiries: u64,
}

/// One egress port's PCN state (pcn.md §3.2): the counter of announced bursts and the
/// threshold register. The PCN threshold applies while the counter is non-zero; the
/// initial threshold is restored when it reaches zero — or when `lease` passes after the
/// last START without all bursts arriving (a lost burst mark must not leave the port
/// lowered forever).
#[derive(Clone, Debug)]
pub struct PcnRegister {
    initial: u32,
    pcn: u32,
    counter: u32,
    lease: Time,
    expires: Time,
    /// Totals since creation.
    pub counters: PcnCounters,
}

impl PcnRegister {
    /// A port at `initial_threshold` packets, with nothing announced. `lease` (ps) is how
    /// long after the last START the port stays lowered if its bursts do not all arrive.
    pub fn new(initial_threshold: u32, lease: Time) -> Self {
        PcnRegister {
            initial: initial_threshold,
            pcn: initial_threshold,
            counter: 0,
            lease,
            expires: Time::MAX,
            counters: PcnCounters::default(),
        }
    }

    /// Feed one PCN packet this port forwards; returns the threshold now in force. ACKs
    /// travel the other way and change nothing.
    pub fn on_mark(&mut self, mark: PcnMark, now: Time) -> u32 {
        self.handle_timeout(now);
        match mark {
            PcnMark::Start { threshold } => {
                self.counters.starts += 1;
                self.counter += 1;
                self.pcn = threshold;
                self.expires = now.saturating_add(self.lease);
            }
            PcnMark::Burst if self.counter > 0 => {
                self.counters.bursts += 1;
                self.counter -= 1;
                if self.counter == 0 {
                    self.expires = Time::MAX;
                }
            }
            PcnMark::Burst => self.counters.unmatched_bursts += 1,
            PcnMark::Ack { .. } => {}
        }
        self.threshold()
    }

    /// The ECN threshold in force.
    pub fn threshold(&self) -> u32 {
        if self.counter > 0 {
            self.pcn
        } else {
            self.initial
        }
    }

    /// The threshold (packets) the port returns to when no burst is pending.
    pub fn initial(&self) -> u32 {
        self.initial
    }

    /// Bursts announced and not yet arrived.
    pub fn pending(&self) -> u32 {
        self.counter
    }

    /// When the lease runs out, if bursts are pending.
    pub fn poll_timeout(&self) -> Option<Time> {
        (self.counter > 0).then_some(self.expires)
    }

    /// Restore the initial threshold if the lease ran out.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.counter > 0 && now >= self.expires {
            self.counter = 0;
            self.expires = Time::MAX;
            self.counters.lease_expiries += 1;
        }
    }
}

/// The worker's side (pcn.md §3.1): START, wait for the ACK, burst. If the START or the
/// ACK is lost the worker sends its burst anyway after `fallback` (it must never stall
/// training on a control packet; without the ACK the burst simply goes out without PCN's
/// head start).
#[derive(Clone, Debug)]
pub struct PcnWorker {
    fallback: Time,
    state: WorkerState,
    /// Bursts released by the fallback timer rather than by an ACK.
    pub fallbacks: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WorkerState {
    Idle,
    Waiting { since: Time },
    Ready,
}

impl PcnWorker {
    /// An idle worker that waits at most `fallback` (ps) for its ACK; see
    /// [`worker_fallback`].
    pub fn new(fallback: Time) -> Self {
        PcnWorker { fallback, state: WorkerState::Idle, fallbacks: 0 }
    }

    /// Announce a burst: the DSCP of the START to send now.
    pub fn start(&mut self, threshold: u32, now: Time) -> Result<u8, BadThreshold> {
        let dscp = PcnMark::Start { threshold }.encode()?;
        self.state = WorkerState::Waiting { since: now };
        Ok(dscp)
    }

    /// A packet with PCN flags reached the worker; true when it released the burst.
    pub fn on_mark(&mut self, mark: PcnMark) -> bool {
        if matches!((self.state, mark), (WorkerState::Waiting { .. }, PcnMark::Ack { .. })) {
            self.state = WorkerState::Ready;
            return true;
        }
        false
    }

    /// When the fallback releases the burst, while a START waits for its ACK.
    pub fn poll_timeout(&self) -> Option<Time> {
        match self.state {
            WorkerState::Waiting { since } => Some(since.saturating_add(self.fallback)),
            _ => None,
        }
    }

    /// True when the fallback released the burst.
    pub fn handle_timeout(&mut self, now: Time) -> bool {
        match self.poll_timeout() {
            Some(t) if now >= t => {
                self.state = WorkerState::Ready;
                self.fallbacks += 1;
                true
            }
            _ => false,
        }
    }

    /// The burst may go (its first packet carries [`PcnMark::Burst`]).
    pub fn may_send(&self) -> bool {
        self.state == WorkerState::Ready
    }

    /// The burst went out: back to idle until the next START.
    pub fn burst_sent(&mut self) {
        self.state = WorkerState::Idle;
    }
}

/// The fallback the worker should wait for its ACK: twice the longest round trip a
/// START and its ACK can see without being lost — the base RTT plus every buffer on the
/// way full, both ways. Longer than that, the START or the ACK was dropped (or the server
/// is gone), and waiting on only delays the burst; shorter, and a merely queued ACK would
/// release bursts before the ports have drained.
pub fn worker_fallback(base_rtt: Time, max_queueing_one_way: Time) -> Time {
    2 * (base_rtt + 2 * max_queueing_one_way)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::US;

    #[test]
    fn dscp_round_trips_for_every_threshold_0_to_75() {
        for threshold in (0..=MAX_PCN_THRESHOLD).step_by(5) {
            for mark in [PcnMark::Start { threshold }, PcnMark::Ack { threshold }] {
                let dscp = mark.encode().unwrap();
                assert!(dscp < 64, "6 bits");
                assert_eq!(PcnMark::decode(dscp), Some(mark));
                // the ECN bits of the TOS byte do not disturb it
                assert_eq!(PcnMark::decode(((dscp << 2) | 0b11) >> 2), Some(mark));
            }
        }
        assert_eq!(PcnMark::decode(PcnMark::Burst.encode().unwrap()), Some(PcnMark::Burst));
        assert_eq!(PcnMark::Start { threshold: 10 }.encode(), Ok(0b10_0010));
        assert_eq!(PcnMark::decode(0), None, "ordinary traffic");
        assert_eq!(PcnMark::decode(0b00_0111), None, "threshold bits without flags: not PCN");
        for bad in [1, 7, 39, 76, 80, 1000] {
            assert_eq!(PcnMark::Start { threshold: bad }.encode(), Err(BadThreshold(bad)));
        }
        assert_eq!(PcnMark::Start { threshold: 20 }.ack_for(), Some(PcnMark::Ack { threshold: 20 }));
        assert_eq!(PcnMark::Burst.ack_for(), None);
    }

    #[test]
    fn the_threshold_is_restored_after_every_burst() {
        let mut r = PcnRegister::new(40, 1000 * US);
        for i in 0..5 {
            let t = i * 100 * US;
            assert_eq!(r.on_mark(PcnMark::Start { threshold: 10 }, t), 10);
            assert_eq!(r.on_mark(PcnMark::Ack { threshold: 10 }, t + US), 10, "ACKs change nothing");
            assert_eq!(r.on_mark(PcnMark::Burst, t + 2 * US), 40);
            assert_eq!((r.pending(), r.poll_timeout()), (0, None));
        }
        assert_eq!((r.counters.starts, r.counters.bursts), (5, 5));
    }

    #[test]
    fn two_workers_keep_it_lowered_until_both_bursts_arrive() {
        let mut r = PcnRegister::new(40, 1000 * US);
        r.on_mark(PcnMark::Start { threshold: 10 }, 0);
        r.on_mark(PcnMark::Start { threshold: 10 }, 0);
        assert_eq!(r.on_mark(PcnMark::Burst, 10 * US), 10, "one of two bursts arrived");
        assert_eq!(r.on_mark(PcnMark::Burst, 20 * US), 40);
        assert_eq!(r.on_mark(PcnMark::Burst, 30 * US), 40, "a stray burst mark does not underflow");
        assert_eq!(r.counters.unmatched_bursts, 1);
    }

    #[test]
    fn a_lost_burst_mark_is_undone_by_the_lease() {
        let mut r = PcnRegister::new(40, 500 * US);
        r.on_mark(PcnMark::Start { threshold: 10 }, 0);
        r.on_mark(PcnMark::Start { threshold: 10 }, 100 * US);
        assert_eq!(r.poll_timeout(), Some(600 * US), "the last START renews the lease");
        r.handle_timeout(599 * US);
        assert_eq!(r.threshold(), 10);
        r.handle_timeout(600 * US);
        assert_eq!((r.threshold(), r.pending(), r.counters.lease_expiries), (40, 0, 1));
    }

    #[test]
    fn a_lost_start_or_ack_does_not_stall_the_worker() {
        let fallback = worker_fallback(10 * US, 50 * US);
        assert_eq!(fallback, 220 * US);
        let mut w = PcnWorker::new(fallback);
        // the ACK arrives: the burst goes at once
        let dscp = w.start(10, 0).unwrap();
        assert_eq!(PcnMark::decode(dscp), Some(PcnMark::Start { threshold: 10 }));
        assert!(!w.may_send());
        assert!(w.on_mark(PcnMark::Ack { threshold: 10 }));
        assert!(w.may_send());
        w.burst_sent();
        // START (or ACK) lost: nothing arrives; the fallback releases the burst
        w.start(10, 1000 * US).unwrap();
        assert_eq!(w.poll_timeout(), Some(1220 * US));
        assert!(!w.handle_timeout(1219 * US) && !w.may_send());
        assert!(w.handle_timeout(1220 * US) && w.may_send());
        assert_eq!(w.fallbacks, 1);
        assert!(!w.on_mark(PcnMark::Ack { threshold: 10 }), "a late ACK changes nothing");
        assert!(w.start(12, 0).is_err());
    }

    #[test]
    fn thresholds_follow_pcn_md_section_3_3() {
        // pcn.md: RTT·C/(√3·MTU) = 37 -> initial 40; k = 1/4 -> 10, 1/2 -> 20, 1 -> 40
        let (rtt, c, mtu) = (37.0 * 3f64.sqrt() * 1500.0 * 8.0 / 10e9 * 1e9, 10e9, 1500);
        assert!((ecn_lower_bound(rtt, c, 3, mtu) - 37.0).abs() < 1e-9);
        assert_eq!(pcn_thresholds(rtt, c, 3, mtu, 1.0), (40, 40));
        assert_eq!(pcn_thresholds(rtt, c, 3, mtu, 0.5), (40, 20));
        assert_eq!(pcn_thresholds(rtt, c, 3, mtu, 0.25), (40, 10));
        assert_eq!(pcn_thresholds(rtt, c, 3, mtu, 0.125), (40, 5));
    }
}
