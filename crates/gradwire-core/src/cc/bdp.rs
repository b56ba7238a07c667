//! BDP-based congestion control, BBR-like (LTP §III-D; Cardwell et al., BBR, 2016).
//!
//! Loss is *not* a congestion signal: the controller models the path by two numbers,
//!
//! - **BtlBw**, the max of delivery-rate samples over the last `btlbw_window_rounds`
//!   round trips (a windowed max filter), and
//! - **RTprop**, the min of RTT samples over the last `rtprop_window` of time,
//!
//! and allows `cwnd = cwnd_gain * BDP` bytes in flight (BDP = BtlBw x RTprop), sent paced
//! at `pacing_gain * BtlBw`. Until a sample exists, the configured initial estimates
//! stand in (the transport's `initial_rtprop` / `initial_btlbw_bps`).
//!
//! Phases, simplified from BBR:
//! - `Startup`: gains 2/ln2 (doubling per round) until BtlBw grew less than 25% for 3
//!   rounds in a row (the pipe is full). As in BBR, Startup begins from a small window
//!   (`initial_cwnd_bytes`) that grows by the bytes acknowledged, i.e. doubles per round,
//!   up to `2/ln2 * BDP`; until a rate sample exists it is paced at `2/ln2 * cwnd / RTprop`;
//! - `Drain`: pacing gain ln2/2 until in-flight <= BDP (empty the queue Startup built);
//! - `ProbeBw`: pacing gain cycles `[1.25, 0.75, 1, 1, 1, 1, 1, 1]`, one RTprop each;
//!   cwnd gain 2.
//!
//! After Startup the window also covers **ACK aggregation**, as Linux's BBR does
//! (`bbr_update_ack_aggregation`, `ack_aggregation` here): when ACKs come in bursts (a
//! receiver that reads a batch of packets and acknowledges them together, a host that
//! wakes late) more bytes are acknowledged in an epoch than BtlBw would deliver, and a
//! window of `cwnd_gain × BDP` idles the sender between bursts whenever the path's RTprop
//! is shorter than the wake-up interval (a 20 µs path whose ACKs come every 250 µs). The
//! excess, the max over the last 5–10 rounds, is added to the window (at most 100 ms of
//! BtlBw). ACKs clocked out at the bottleneck's rate leave it near zero.
//!
//! No ProbeRTT: an LTP transfer is one training iteration's gradients, and the idle gap
//! between iterations drains the queues, so fresh RTprop samples come for free. When the
//! min filter's window expires it simply adopts the newest sample.
//!
//! Delivery-rate samples follow BBR's rate-sample algorithm: each sent packet remembers the
//! connection's `delivered` count and times ([`SendState`]); when it is acknowledged the
//! sample is `delivered bytes since / max(send interval, ack interval)`. Samples taken
//! while the sender had nothing to send (app-limited) only raise the estimate.
//! All byte counts are wire bytes, so BtlBw is comparable to a link rate.

use std::collections::VecDeque;

use crate::time::{Time, SEC};

/// BBR's high gain, 2/ln 2: doubles the delivery rate every round in Startup.
pub const HIGH_GAIN: f64 = 2.885;
/// Pacing gains of ProbeBw, one phase per RTprop.
pub const PROBE_BW_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];

/// Tuning of [`BdpCc`]; the defaults are BBR's where BBR has one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BdpConfig {
    /// Rounds (round trips) over which the max filter keeps BtlBw samples.
    pub btlbw_window_rounds: u64,
    /// Time (ps) after which the RTprop min filter accepts a larger sample.
    pub rtprop_window: Time,
    /// cwnd gain in ProbeBw (cwnd = gain × BDP).
    pub cwnd_gain: f64,
    /// cwnd never below this many bytes (a few packets keep the ACK clock running).
    pub min_cwnd_bytes: u64,
    /// Window Startup begins with, bytes (BBR: 10 packets). It grows by the bytes
    /// acknowledged.
    pub initial_cwnd_bytes: u64,
    /// After Startup, add the bytes acknowledged beyond BtlBw's pace in an ACK burst to
    /// the window (Linux BBR's extra_acked; see the module docs).
    pub ack_aggregation: bool,
}

impl Default for BdpConfig {
    fn default() -> Self {
        BdpConfig {
            btlbw_window_rounds: 10,
            rtprop_window: 10 * SEC,
            cwnd_gain: 2.0,
            min_cwnd_bytes: 4 * 1500,
            initial_cwnd_bytes: 10 * 1500,
            ack_aggregation: true,
        }
    }
}

/// Rounds each of the two extra-acked max filters covers (Linux: `bbr_extra_acked_win_rtts`).
const EXTRA_ACKED_WINDOW_ROUNDS: u32 = 5;
/// An aggregation epoch that acknowledged this much is restarted (Linux: 2^20 packets).
const ACK_EPOCH_RESET_BYTES: u64 = 1 << 30;
/// The aggregation allowance never exceeds this much time of BtlBw (Linux: 100 ms).
const EXTRA_ACKED_MAX: Time = SEC / 10;

/// Where [`BdpCc`] is in its cycle (see the module docs for the gains of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BdpPhase {
    /// Searching for BtlBw: window and rate double per round.
    Startup,
    /// Emptying the queue Startup built, until in-flight ≤ BDP.
    Drain,
    /// Steady state: cycling the pacing gain around 1 to probe for more bandwidth.
    ProbeBw,
}

/// What a packet remembers at send time, handed back on its ACK for a rate sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendState {
    /// Wire bytes acknowledged on the connection when the packet was sent.
    pub delivered: u64,
    /// When (ps) the last of those bytes was acknowledged (or the send restarted from idle).
    pub delivered_time: Time,
    /// Send time (ps) of the packet whose ACK last gave a rate sample: the start of the
    /// send interval.
    pub first_sent_time: Time,
    /// When (ps) this packet was sent.
    pub sent_at: Time,
    /// The sender was application-limited: the sample may only raise BtlBw.
    pub app_limited: bool,
}

/// The BDP congestion controller of one sender (see the module docs).
///
/// The sender calls [`Self::on_send`] for each packet, [`Self::on_ack`] for each ACK and
/// [`Self::on_app_limited`] when it runs out of data; it keeps in-flight bytes within
/// [`Self::cwnd_bytes`] and spaces packets at [`Self::pacing_bps`]. All byte counts are wire
/// bytes.
#[derive(Clone, Debug)]
pub struct BdpCc {
    cfg: BdpConfig,
    phase: BdpPhase,
    initial_rtprop: Time,
    initial_btlbw_bps: u64,

    // rate-sample state
    delivered: u64,
    delivered_time: Time,
    first_sent_time: Time,
    /// Samples of packets sent before `delivered` reaches this are app-limited.
    app_limited_until: u64,

    // round counting: a round ends when a packet sent after the last round start is acked
    round: u64,
    next_round_delivered: u64,

    /// Monotone deque of (round, bit/s): the front is the windowed max.
    btlbw: VecDeque<(u64, u64)>,
    rtprop: Option<(Time, Time)>, // (value, when sampled)

    // startup exit
    full_bw: u64,
    full_bw_rounds: u32,

    // ProbeBw cycle
    cycle_index: usize,
    cycle_stamp: Time,

    /// Startup's window: the initial window plus every byte acknowledged since.
    startup_cwnd: u64,

    // ACK aggregation: the current epoch (start, bytes acknowledged in it) and two max
    // filters of the excess over BtlBw's pace, each over EXTRA_ACKED_WINDOW_ROUNDS rounds
    ack_epoch_start: Time,
    ack_epoch_acked: u64,
    extra_acked: [u64; 2],
    extra_acked_idx: usize,
    extra_acked_rounds: u32,
}

impl BdpCc {
    /// A controller in Startup, with the initial estimates (RTprop in ps, BtlBw in bit/s,
    /// each raised to at least 1) standing in until samples arrive.
    pub fn new(cfg: BdpConfig, initial_rtprop: Time, initial_btlbw_bps: u64) -> Self {
        BdpCc {
            cfg,
            phase: BdpPhase::Startup,
            initial_rtprop: initial_rtprop.max(1),
            initial_btlbw_bps: initial_btlbw_bps.max(1),
            delivered: 0,
            delivered_time: 0,
            first_sent_time: 0,
            app_limited_until: 0,
            round: 0,
            next_round_delivered: 0,
            btlbw: VecDeque::new(),
            rtprop: None,
            full_bw: 0,
            full_bw_rounds: 0,
            cycle_index: 0,
            cycle_stamp: 0,
            startup_cwnd: cfg.initial_cwnd_bytes.max(cfg.min_cwnd_bytes),
            ack_epoch_start: 0,
            ack_epoch_acked: 0,
            extra_acked: [0; 2],
            extra_acked_idx: 0,
            extra_acked_rounds: 0,
        }
    }

    /// Start from a path model measured earlier (e.g. the previous transfer on this link):
    /// the estimates count as samples and Startup is skipped.
    pub fn warm(cfg: BdpConfig, rtprop: Time, btlbw_bps: u64, now: Time) -> Self {
        let mut cc = BdpCc::new(cfg, rtprop, btlbw_bps);
        cc.btlbw.push_back((0, btlbw_bps.max(1)));
        cc.rtprop = Some((rtprop.max(1), now));
        cc.phase = BdpPhase::ProbeBw;
        cc.cycle_stamp = now;
        // Start with the probing phase (gain 1.25): the carried estimate comes from a
        // transfer that may never have filled the pipe (one that ends in Startup measures
        // about half its rate), and a transfer is often too short to reach the cycle's
        // probing phase later; an estimate too high drains in the next phase (0.75).
        cc.cycle_index = 0;
        cc
    }

    /// The current phase.
    pub fn phase(&self) -> BdpPhase {
        self.phase
    }

    /// Round trips counted so far: a round ends when a packet sent after the previous
    /// round's end is acknowledged.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Whether BtlBw and RTprop both come from samples (not the initial estimates).
    pub fn measured(&self) -> bool {
        !self.btlbw.is_empty() && self.rtprop.is_some()
    }

    /// Bottleneck bandwidth estimate, bit/s: the windowed max of delivery-rate samples,
    /// or the initial estimate before the first sample.
    pub fn btlbw_bps(&self) -> u64 {
        self.btlbw.front().map_or(self.initial_btlbw_bps, |&(_, b)| b)
    }

    /// Round-trip propagation time estimate, ps: the windowed min of RTT samples, or the
    /// initial estimate before the first sample.
    pub fn rtprop(&self) -> Time {
        self.rtprop.map_or(self.initial_rtprop, |(r, _)| r)
    }

    /// Bandwidth-delay product in bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (self.btlbw_bps() as u128 * self.rtprop() as u128 / 8 / SEC as u128).min(u64::MAX as u128) as u64
    }

    fn gains(&self) -> (f64, f64) {
        match self.phase {
            BdpPhase::Startup => (HIGH_GAIN, HIGH_GAIN),
            BdpPhase::Drain => (1.0 / HIGH_GAIN, HIGH_GAIN),
            BdpPhase::ProbeBw => (PROBE_BW_GAINS[self.cycle_index], self.cfg.cwnd_gain),
        }
    }

    /// Multiplier of BtlBw for the pacing rate in the current phase (and ProbeBw cycle
    /// slot).
    pub fn pacing_gain(&self) -> f64 {
        self.gains().0
    }

    /// Rate to pace data at, bit/s (at least 1): `pacing_gain × BtlBw`; before the first
    /// rate sample, the Startup window spread over an RTprop at high gain, capped at the
    /// initial BtlBw.
    pub fn pacing_bps(&self) -> u64 {
        if self.btlbw.is_empty() {
            // No rate sample yet (BBR's init): spread the initial window over an RTprop,
            // never faster than the configured BtlBw (the NIC's line rate).
            let init = (self.startup_cwnd as u128 * 8 * SEC as u128 / self.rtprop() as u128) as f64 * HIGH_GAIN;
            return (init as u64).clamp(1, self.initial_btlbw_bps);
        }
        ((self.btlbw_bps() as f64 * self.pacing_gain()) as u64).max(1)
    }

    /// Wire bytes allowed in flight. In Startup, the small initial window grown by the
    /// bytes acknowledged (doubling per round, up to `2/ln2 × BDP`); afterwards
    /// `cwnd_gain × BDP`, never below `min_cwnd_bytes`, plus [`Self::aggregation_cwnd`].
    ///
    /// Startup does not open at `2/ln2 × BDP` of the configured path: at 100 Gbit/s and
    /// an 85 µs RTT that is 3 MB per sender, and an incast of 32 such senders into a
    /// 512 KB port drops half the packets and kills the survivors' ACK clocks.
    pub fn cwnd_bytes(&self) -> u64 {
        if self.phase == BdpPhase::Startup {
            self.startup_cwnd
        } else {
            self.target_cwnd()
        }
    }

    fn target_cwnd(&self) -> u64 {
        ((self.bdp_bytes() as f64 * self.gains().1) as u64).max(self.cfg.min_cwnd_bytes) + self.aggregation_cwnd()
    }

    /// Bytes the window gets on top of `cwnd_gain × BDP` for ACK aggregation: none in
    /// Startup (BBR adds it once the pipe was full), else the larger of the two filters,
    /// at most [`EXTRA_ACKED_MAX`] of BtlBw.
    pub fn aggregation_cwnd(&self) -> u64 {
        if !self.cfg.ack_aggregation || self.phase == BdpPhase::Startup {
            return 0;
        }
        let cap = (self.btlbw_bps() as u128 * EXTRA_ACKED_MAX as u128 / 8 / SEC as u128) as u64;
        self.extra_acked[0].max(self.extra_acked[1]).min(cap)
    }

    /// Linux BBR's `bbr_update_ack_aggregation`: in the current epoch, the bytes
    /// acknowledged beyond what BtlBw delivers; an epoch ends when the ACKs fall behind
    /// that pace.
    fn update_ack_aggregation(&mut self, now: Time, bytes: u64, round_start: bool) {
        if round_start {
            self.extra_acked_rounds += 1;
            if self.extra_acked_rounds >= EXTRA_ACKED_WINDOW_ROUNDS {
                self.extra_acked_rounds = 0;
                self.extra_acked_idx ^= 1;
                self.extra_acked[self.extra_acked_idx] = 0;
            }
        }
        let epoch = now.saturating_sub(self.ack_epoch_start);
        let mut expected = (self.btlbw_bps() as u128 * epoch as u128 / 8 / SEC as u128).min(u64::MAX as u128) as u64;
        if self.ack_epoch_acked <= expected || self.ack_epoch_acked + bytes >= ACK_EPOCH_RESET_BYTES {
            self.ack_epoch_acked = 0;
            self.ack_epoch_start = now;
            expected = 0;
        }
        self.ack_epoch_acked += bytes;
        let extra = (self.ack_epoch_acked - expected).min(self.cwnd_bytes());
        let slot = &mut self.extra_acked[self.extra_acked_idx];
        *slot = (*slot).max(extra);
    }

    /// A packet leaves; `inflight` is the bytes in flight before it. Keep the result with
    /// the packet and hand it back to [`Self::on_ack`].
    pub fn on_send(&mut self, now: Time, inflight: u64) -> SendState {
        if inflight == 0 {
            // Restarting from idle: the idle time must not dilute the next samples.
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        SendState {
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
            sent_at: now,
            app_limited: self.app_limited_until > self.delivered,
        }
    }

    /// The sender ran out of data with `inflight` bytes out: samples until those are
    /// delivered measure the application, not the path.
    pub fn on_app_limited(&mut self, inflight: u64) {
        self.app_limited_until = (self.delivered + inflight).max(1);
    }

    /// `bytes` were acknowledged. `sent` is the packet's [`SendState`] when the ACK is
    /// unambiguously for that transmission (else no rate sample); `rtt` likewise.
    /// `inflight` is the bytes still in flight after this ACK.
    pub fn on_ack(&mut self, now: Time, bytes: u64, sent: Option<SendState>, rtt: Option<Time>, inflight: u64) {
        self.delivered += bytes;
        // BBR's Startup window: grows by what is delivered while below the target (or
        // while the first window is not delivered yet); it never shrinks in Startup.
        if self.phase == BdpPhase::Startup
            && (self.startup_cwnd < self.target_cwnd() || self.delivered < self.cfg.initial_cwnd_bytes)
        {
            self.startup_cwnd = self.startup_cwnd.saturating_add(bytes);
        }
        self.delivered_time = now;
        if let Some(rtt) = rtt {
            self.on_rtt(now, rtt);
        }
        let Some(s) = sent else { return };
        self.first_sent_time = s.sent_at;

        let round_start = s.delivered >= self.next_round_delivered;
        if round_start {
            self.next_round_delivered = self.delivered;
            self.round += 1;
        }
        let interval = (s.sent_at - s.first_sent_time).max(now.saturating_sub(s.delivered_time));
        if interval > 0 {
            let bps = ((self.delivered - s.delivered) as u128 * 8 * SEC as u128 / interval as u128) as u64;
            if !s.app_limited || bps >= self.btlbw_bps() || self.btlbw.is_empty() {
                self.on_bw(bps);
            }
            if self.cfg.ack_aggregation {
                self.update_ack_aggregation(now, bytes, round_start);
            }
        }
        self.update_phase(now, round_start, inflight);
    }

    fn on_rtt(&mut self, now: Time, rtt: Time) {
        let rtt = rtt.max(1);
        match self.rtprop {
            Some((r, at)) if rtt > r && now < at.saturating_add(self.cfg.rtprop_window) => {}
            _ => self.rtprop = Some((rtt, now)),
        }
    }

    fn on_bw(&mut self, bps: u64) {
        let round = self.round;
        while self.btlbw.back().is_some_and(|&(_, b)| b <= bps) {
            self.btlbw.pop_back();
        }
        self.btlbw.push_back((round, bps));
        let window = self.cfg.btlbw_window_rounds.max(1);
        while self.btlbw.front().is_some_and(|&(r, _)| r + window <= round) {
            self.btlbw.pop_front();
        }
    }

    fn update_phase(&mut self, now: Time, round_start: bool, inflight: u64) {
        if self.phase == BdpPhase::Startup && round_start {
            let bw = self.btlbw_bps();
            if bw as f64 >= self.full_bw as f64 * 1.25 {
                self.full_bw = bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                if self.full_bw_rounds >= 3 {
                    self.phase = BdpPhase::Drain;
                }
            }
        }
        if self.phase == BdpPhase::Drain && inflight <= self.bdp_bytes() {
            self.phase = BdpPhase::ProbeBw;
            self.cycle_index = 0;
            self.cycle_stamp = now;
        }
        if self.phase == BdpPhase::ProbeBw && now.saturating_sub(self.cycle_stamp) > self.rtprop() {
            self.cycle_index = (self.cycle_index + 1) % PROBE_BW_GAINS.len();
            self.cycle_stamp = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{serialization, MS, US};

    /// Drive the controller over a fluid bottleneck of `bps` with round-trip `rtt`:
    /// the ACK of a packet returns at `max(sent + rtt, previous ACK + serialization)`.
    fn run_bottleneck(cc: &mut BdpCc, bps: u64, rtt: Time, duration: Time) {
        run_bottleneck_acking(cc, bps, rtt, duration, 0);
    }

    /// The same, with the ACKs held back to the next multiple of `batch` (a receiver that
    /// reads and acknowledges once per `batch`; 0: at once).
    fn run_bottleneck_acking(cc: &mut BdpCc, bps: u64, rtt: Time, duration: Time, batch: Time) {
        let pkt = 1500u32;
        let ser = serialization(pkt, bps);
        let mut inflight: VecDeque<(Time, SendState)> = VecDeque::new(); // (ack time, state)
        let (mut now, mut next_send, mut last_ack) = (0, 0, 0);
        while now < duration {
            // deliver ACKs due
            while inflight.front().is_some_and(|&(t, _)| t <= now) {
                let (t, s) = inflight.pop_front().unwrap();
                let left = inflight.len() as u64 * pkt as u64;
                cc.on_ack(t, pkt as u64, Some(s), Some(t - s.sent_at), left);
            }
            let bytes_out = inflight.len() as u64 * pkt as u64;
            if now >= next_send && bytes_out + pkt as u64 <= cc.cwnd_bytes() {
                let s = cc.on_send(now, bytes_out);
                let ack = (now + rtt).max(last_ack + ser);
                last_ack = ack;
                let ack = if batch > 0 { ack.div_ceil(batch) * batch } else { ack };
                inflight.push_back((ack, s));
                next_send = now + serialization(pkt, cc.pacing_bps());
            }
            now += ser / 4;
        }
    }

    #[test]
    fn converges_to_bottleneck_and_leaves_startup() {
        let (bps, rtt) = (10_000_000_000, 20 * US);
        let mut cc = BdpCc::new(BdpConfig::default(), 100 * US, 100_000_000_000);
        assert_eq!((cc.btlbw_bps(), cc.rtprop()), (100_000_000_000, 100 * US), "initial estimates");
        run_bottleneck(&mut cc, bps, rtt, 5 * MS);
        assert!(cc.measured());
        let bw = cc.btlbw_bps() as f64 / bps as f64;
        assert!((0.95..=1.02).contains(&bw), "btlbw {} vs {bps}", cc.btlbw_bps());
        assert!(cc.rtprop() >= rtt && cc.rtprop() <= rtt + 2 * serialization(1500, bps), "{}", cc.rtprop());
        assert_eq!(cc.phase(), BdpPhase::ProbeBw);
        // cwnd ~ 2 BDP: bounded queueing, not the unbounded growth of loss-based control
        let bdp = cc.bdp_bytes() as f64;
        assert!((cc.cwnd_bytes() as f64 - 2.0 * bdp).abs() <= 0.3 * bdp, "{} vs bdp {bdp}", cc.cwnd_bytes());
    }

    #[test]
    fn a_window_covers_acks_that_come_in_bursts() {
        // 1 Gbit/s, 20 µs RTT, ACKs once per 250 µs: 2 × BDP (5 KB, the 6 KB floor) lets
        // 4 packets out per burst, under a fifth of the link; the aggregation allowance
        // covers the burst interval's worth.
        let (bps, rtt, batch) = (1_000_000_000, 20 * US, 250 * US);
        let goodput = |ack_aggregation: bool, batch: Time| {
            let cfg = BdpConfig { ack_aggregation, ..BdpConfig::default() };
            let mut cc = BdpCc::warm(cfg, rtt, bps, 0);
            run_bottleneck_acking(&mut cc, bps, rtt, 40 * MS, batch);
            (cc.delivered as f64 * 8.0 / 0.040 / bps as f64, cc.aggregation_cwnd())
        };
        let (without, none) = goodput(false, batch);
        let (with, extra) = goodput(true, batch);
        assert_eq!(none, 0);
        assert!(without < 0.3, "{without}");
        assert!(with > 0.8, "{with} of the link, allowance {extra} B");
        // ACKs clocked at the bottleneck: next to no allowance, the link as full as before
        let (smooth, small) = goodput(true, 0);
        assert!(smooth > 0.9 && small <= 3 * 1500, "{smooth}, {small} B");
    }

    #[test]
    fn max_filter_forgets_after_window_and_min_filter_expires() {
        let cfg = BdpConfig { btlbw_window_rounds: 3, rtprop_window: MS, ..BdpConfig::default() };
        let mut cc = BdpCc::new(cfg, 50 * US, 1);
        cc.on_bw(1000);
        cc.round = 1;
        cc.on_bw(500);
        assert_eq!(cc.btlbw_bps(), 1000);
        cc.round = 3;
        cc.on_bw(400);
        assert_eq!(cc.btlbw_bps(), 500, "round-0 sample left the 3-round window");
        cc.on_rtt(0, 30 * US);
        cc.on_rtt(US, 40 * US);
        assert_eq!(cc.rtprop(), 30 * US, "larger sample ignored within the window");
        cc.on_rtt(2 * MS, 40 * US);
        assert_eq!(cc.rtprop(), 40 * US, "window expired: newest sample adopted");
    }

    #[test]
    fn app_limited_samples_only_raise_the_estimate() {
        let mut cc = BdpCc::new(BdpConfig::default(), 10 * US, 1);
        cc.on_bw(1_000_000);
        cc.on_app_limited(3000);
        let s = cc.on_send(0, 3000);
        assert!(s.app_limited);
        cc.on_ack(100 * US, 1500, Some(s), None, 0); // 1500 B in 100 us: 120 Mbit/s
        assert_eq!(cc.btlbw_bps(), 120_000_000, "an app-limited sample above the max counts");
        let s = cc.on_send(100 * US, 1500);
        cc.on_ack(10 * MS, 1500, Some(s), None, 0);
        assert_eq!(cc.btlbw_bps(), 120_000_000, "a low app-limited sample is ignored");
    }

    #[test]
    fn warm_start_skips_startup() {
        let cc = BdpCc::warm(BdpConfig::default(), 20 * US, 10_000_000_000, 0);
        assert_eq!(cc.phase(), BdpPhase::ProbeBw);
        assert!(cc.measured());
        assert_eq!(cc.bdp_bytes(), 25_000);
        assert_eq!(cc.cwnd_bytes(), 50_000);
        assert_eq!(cc.pacing_bps(), 12_500_000_000, "opens with the probing phase (gain 1.25)");
    }
}
