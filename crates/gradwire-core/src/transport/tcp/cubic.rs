//! CUBIC (RFC 9438), Linux's default congestion control, in units of segments.
//!
//! After a congestion event the window follows `W_cubic(t) = C (t - K)^3 + W_max` (eq. 1),
//! `K = cbrt((W_max - cwnd_epoch) / C)` (eq. 2), aiming one RTT ahead (section 4.2) and
//! never below the Reno-friendly estimate `W_est` (eq. 4, section 4.3); a loss sets
//! `ssthresh = beta * cwnd` with fast convergence (section 4.7). Slow start is the
//! sender's; with [`HyStart`] on, Linux's hybrid slow start ends it early. A timeout
//! forgets `W_max` (section 4.8: the first epoch after it starts with `K = 0` from the
//! window it starts at; Linux's `cubictcp_state` resets the whole state on `TCP_CA_Loss`).

use crate::time::{Time, MS, SEC, US};

/// RFC 9438's constants: `C` in segments / s^3, the multiplicative decrease `beta`.
pub const C: f64 = 0.4;
/// Multiplicative decrease factor.
pub const BETA: f64 = 0.7;
/// The Reno-friendly region's additive increase (eq. 4): 3 (1 - beta) / (1 + beta).
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// One flow's CUBIC state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cubic {
    /// The window before the last reduction, segments.
    w_max: f64,
    /// `w_max` of the reduction before (fast convergence).
    w_last_max: f64,
    /// When the current congestion-avoidance epoch began.
    epoch: Option<Time>,
    k: f64,
    /// The Reno-friendly estimate, segments.
    w_est: f64,
    /// Linux's hybrid slow start, when on.
    pub hystart: Option<HyStart>,
    /// Linux's `bictcp_update` instead of RFC 9438 where they differ ([`Cubic::new`]).
    linux: bool,
}

impl Cubic {
    /// A flow's CUBIC at `now`, with Linux's HyStart if `hystart`. `linux`: grow as
    /// `tcp_cubic.c`'s `bictcp_update` does where it departs from RFC 9438: the
    /// Reno-friendly estimate keeps `alpha = 3 (1 - beta) / (1 + beta)` past `W_max`
    /// (`beta_scale`; the RFC's section 4.3 raises it to 1 there), and with no reduction
    /// yet (none, or a timeout since) the window grows at least 5 % a round trip
    /// (`cnt` at most 20).
    pub fn new(now: Time, hystart: bool, linux: bool) -> Self {
        Cubic { hystart: hystart.then(|| HyStart::new(now, 0)), linux, ..Cubic::default() }
    }

    /// `W_cubic(t)` of the current epoch, `t` seconds into it (eq. 1).
    pub fn window_at(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.w_max
    }

    /// A congestion event with the window at `cwnd` segments: the new ssthresh (segments;
    /// the caller keeps it at least 2). Section 4.6-4.7.
    pub fn on_congestion(&mut self, cwnd: f64) -> f64 {
        self.w_max = if cwnd < self.w_last_max { cwnd * (1.0 + BETA) / 2.0 } else { cwnd };
        self.w_last_max = self.w_max;
        self.epoch = None;
        cwnd * BETA
    }

    /// A retransmission timeout, after [`Cubic::on_congestion`] gave its ssthresh: `W_max`
    /// and the fast-convergence memory are forgotten (RFC 9438 4.8; Linux's `bictcp_reset`
    /// on `TCP_CA_Loss`), and HyStart starts over with the round beginning at `now`,
    /// `snd_nxt` its end.
    pub fn on_timeout(&mut self, now: Time, snd_nxt: u64) {
        self.w_max = 0.0;
        self.w_last_max = 0.0;
        self.epoch = None;
        if let Some(h) = &mut self.hystart {
            *h = HyStart::new(now, snd_nxt);
        }
    }

    /// Whether delay samples are being discarded: the first second of a congestion
    /// avoidance epoch (Linux's `cubictcp_acked`: "Discard delay samples right after fast
    /// recovery").
    pub fn discards_delay_at(&self, now: Time) -> bool {
        self.epoch.is_some_and(|e| now.saturating_sub(e) < SEC)
    }

    /// A new epoch begins with the next ACK (the window restarted after idle).
    pub fn restart_epoch(&mut self) {
        self.epoch = None;
    }

    /// The window after an ACK of `acked` segments in congestion avoidance, from `cwnd`
    /// segments, at `now`, with smoothed RTT `rtt` (section 4.2-4.4).
    pub fn on_ack(&mut self, now: Time, cwnd: f64, acked: f64, rtt: Time) -> f64 {
        let start = *self.epoch.get_or_insert_with(|| {
            // A new epoch (eq. 2): with no reduction yet, W_max is where it starts.
            if cwnd < self.w_max {
                self.k = ((self.w_max - cwnd) / C).cbrt();
            } else {
                self.k = 0.0;
                self.w_max = cwnd;
            }
            self.w_est = cwnd;
            now
        });
        let t = now.saturating_sub(start) as f64 * 1e-12;
        let target = self.window_at(t + rtt as f64 * 1e-12).clamp(cwnd, 1.5 * cwnd);
        // Reno-friendly region (eq. 4): alpha per window, 1 once past W_max.
        let alpha = if self.w_est >= self.w_max && !self.linux { 1.0 } else { ALPHA };
        self.w_est += alpha * acked / cwnd;
        let grown =
            if self.window_at(t) < self.w_est { self.w_est.max(cwnd) } else { cwnd + (target - cwnd) / cwnd * acked };
        if self.linux && self.w_last_max == 0.0 {
            grown.max(cwnd + acked / 20.0)
        } else {
            grown
        }
    }
}

/// Linux 6.x's HyStart (`tcp_cubic.c`, `hystart_detect = 3`, the module's defaults): slow
/// start ends, ssthresh set to cwnd, once cwnd is at least 16 segments and either a round's
/// ACKs, each within 2 ms of the last, span more than half the minimum RTT plus an ACK
/// delay allowance (ACK train), or the smallest RTT of a round's samples after its first 8
/// exceeds the minimum by an eighth of it, clamped to 4-16 ms (delay). A round ends when
/// `snd_una` passes the `snd_nxt` it began with.
#[derive(Clone, Copy, Debug)]
pub struct HyStart {
    found: bool,
    delay_min: Option<Time>,
    round_start: Time,
    last_ack: Time,
    end_seq: u64,
    curr_rtt: Time,
    samples: u8,
}

/// `hystart_low_window`: the window (segments) below which HyStart does not look.
pub const HYSTART_LOW_WINDOW: u64 = 16;
/// `hystart_ack_delta_us`: ACKs closer than this form a train.
const ACK_DELTA: Time = 2 * MS;
/// `HYSTART_MIN_SAMPLES`: RTT samples a round takes before the delay rule looks.
const MIN_SAMPLES: u8 = 8;
/// `sk_gso_max_size` (`GSO_LEGACY_MAX_SIZE`): `hystart_ack_delay` allows four of these at
/// the pacing rate.
const GSO_MAX_BYTES: f64 = 65_536.0;

/// What the sender knows when an ACK brings an RTT sample, for [`HyStart::on_ack`].
#[derive(Clone, Copy, Debug)]
pub struct AckSample {
    /// When the ACK arrived.
    pub now: Time,
    /// RTT of the most recently sent segment this ACK covers.
    pub rtt: Time,
    /// The cumulative ACK point after this ACK, bytes.
    pub snd_una: u64,
    /// The highest byte sent so far, plus one.
    pub snd_nxt: u64,
    /// The window, segments.
    pub cwnd: u64,
    /// Segments outstanding.
    pub packets_out: u64,
    /// The segment size, bytes.
    pub mss: u64,
    /// The smoothed RTT, once there is one.
    pub srtt: Option<Time>,
    /// Whether cwnd is below half of ssthresh (Linux paces at 200 % of cwnd / srtt there,
    /// else 120 %).
    pub below_half_ssthresh: bool,
}

impl HyStart {
    /// `bictcp_hystart_reset` at `now` with `snd_nxt` the round's end.
    pub fn new(now: Time, snd_nxt: u64) -> Self {
        HyStart {
            found: false,
            delay_min: None,
            round_start: now,
            last_ack: now,
            end_seq: snd_nxt,
            curr_rtt: Time::MAX,
            samples: 0,
        }
    }

    fn new_round(&mut self, now: Time, snd_nxt: u64) {
        let (found, delay_min) = (self.found, self.delay_min);
        *self = HyStart { found, delay_min, ..HyStart::new(now, snd_nxt) };
    }

    /// `cubictcp_acked` for an ACK with an RTT sample (the caller skips samples in
    /// [`Cubic::discards_delay_at`]'s second): `true` when slow start should end here.
    /// `in_slow_start` is cwnd < ssthresh.
    pub fn on_ack(&mut self, a: AckSample, in_slow_start: bool) -> bool {
        let delay = a.rtt.max(US);
        let delay_min = *self.delay_min.get_or_insert(delay);
        let delay_min = delay_min.min(delay);
        self.delay_min = Some(delay_min);
        if self.found || !in_slow_start {
            return false;
        }
        if a.snd_una > self.end_seq {
            self.new_round(a.now, a.snd_nxt);
        }
        if a.cwnd < HYSTART_LOW_WINDOW {
            return false;
        }
        if a.now.saturating_sub(self.last_ack) <= ACK_DELTA {
            self.last_ack = a.now;
            // no fq here (`SK_PACING_NONE`): half of the minimum RTT plus the allowance
            let threshold = (delay_min + ack_delay(&a)) / 2;
            if a.now.saturating_sub(self.round_start) > threshold {
                self.found = true;
            }
        }
        self.curr_rtt = self.curr_rtt.min(delay);
        if self.samples < MIN_SAMPLES {
            self.samples += 1;
        } else if self.curr_rtt > delay_min + (delay_min / 8).clamp(4 * MS, 16 * MS) {
            self.found = true;
        }
        self.found
    }
}

/// `hystart_ack_delay`: four GSO packets at the pacing rate (`tcp_update_pacing_rate`:
/// mss · max(cwnd, packets out) / srtt at 200 % or 120 %), at most 1 ms; none before an
/// RTT estimate.
fn ack_delay(a: &AckSample) -> Time {
    let Some(srtt) = a.srtt.filter(|&s| s > 0) else { return 0 };
    let ratio = if a.below_half_ssthresh { 2.0 } else { 1.2 };
    let bytes_per_ps = (a.mss * a.cwnd.max(a.packets_out)) as f64 * ratio / srtt as f64;
    ((GSO_MAX_BYTES * 4.0 / bytes_per_ps) as Time).min(MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_follows_rfc_9438s_curve() {
        let mut c = Cubic::default();
        let ssthresh = c.on_congestion(100.0);
        assert!((ssthresh - 70.0).abs() < 1e-9, "beta = 0.7");
        // cwnd_epoch = 70: K = cbrt(30 / 0.4) = 4.217 s, and W_cubic(K) = W_max.
        c.on_ack(0, 70.0, 1.0, 0);
        assert!((c.k - (30.0f64 / 0.4).cbrt()).abs() < 1e-9);
        assert!((c.window_at(0.0) - 70.0).abs() < 1e-9);
        assert!((c.window_at(c.k) - 100.0).abs() < 1e-9);
        assert!((c.window_at(c.k + 2.0) - (100.0 + 0.4 * 8.0)).abs() < 1e-9);
        // Fast convergence: a loss below the last W_max remembers less.
        c.on_congestion(90.0);
        assert!((c.w_max - 90.0 * 1.7 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn growth_is_concave_then_convex_and_reno_friendly_at_short_rtts() {
        let mut c = Cubic::default();
        let mut cwnd = c.on_congestion(100.0);
        let rtt = 100 * MS;
        let mut now = 0;
        let mut trace = Vec::new();
        for _ in 0..200 {
            // One RTT's worth of ACKs, one segment each.
            for _ in 0..cwnd as u64 {
                cwnd = c.on_ack(now, cwnd, 1.0, rtt);
            }
            now += rtt;
            trace.push(cwnd);
        }
        let k_rtts = (c.k / 0.1) as usize;
        let d = |i: usize| trace[i + 1] - trace[i];
        assert!(d(1) > d(k_rtts - 5), "concave: growth slows towards W_max");
        assert!(d(k_rtts + 10) > d(k_rtts + 2), "convex: growth speeds up past it");
        assert!(trace[k_rtts] > 95.0 && trace[k_rtts] < 108.0, "near W_max at K: {}", trace[k_rtts]);
        // At a datacenter RTT the Reno-friendly estimate leads (about 0.53 segments per RTT).
        let mut c = Cubic::default();
        let mut cwnd = c.on_congestion(100.0);
        for i in 0..10 * 70 {
            cwnd = c.on_ack(i * 10_000_000, cwnd, 1.0, 10_000_000);
        }
        assert!((cwnd - (70.0 + 10.0 * ALPHA)).abs() < 1.0, "{cwnd}");
    }

    /// An ACK at `now` (ms) with RTT `rtt` (ms), after `una` bytes, with `cwnd` segments.
    fn ack(now: f64, rtt: f64, una: u64, cwnd: u64) -> AckSample {
        let ms = |x: f64| (x * MS as f64) as Time;
        AckSample {
            now: ms(now),
            rtt: ms(rtt),
            snd_una: una,
            snd_nxt: una + 1_000_000,
            cwnd,
            packets_out: cwnd,
            mss: 1460,
            srtt: None,
            below_half_ssthresh: true,
        }
    }

    #[test]
    fn hystart_ends_slow_start_when_a_rounds_ack_train_spans_half_the_min_rtt() {
        // First ACK (10 ms RTT) starts a round at 100 ms, then ACKs 1 ms apart: with no
        // srtt, no ACK-delay allowance, the threshold is 5 ms; the ACK at 106 ms is past it.
        let mut h = HyStart::new(0, 0);
        assert!(!h.on_ack(ack(100.0, 10.0, 1, 20), true));
        for t in 101..=105 {
            assert!(!h.on_ack(ack(t as f64, 10.0, 2, 20), true), "{t} ms");
        }
        assert!(h.on_ack(ack(106.0, 10.0, 2, 20), true));
        // ACKs further apart than 2 ms are no train; below 16 segments it does not look.
        for (gap, cwnd) in [(3.0, 20), (1.0, 15)] {
            let mut h = HyStart::new(0, 0);
            h.on_ack(ack(100.0, 10.0, 1, cwnd), true);
            let fired = (1..=20).any(|i| h.on_ack(ack(100.0 + gap * i as f64, 10.0, 2, cwnd), true));
            assert!(!fired, "gap {gap} ms, cwnd {cwnd}");
        }
        // The allowance: four 64 KB packets at twice cwnd / srtt, at most 1 ms.
        let a = AckSample { srtt: Some(10 * MS), ..ack(0.0, 10.0, 0, 20) };
        assert_eq!(ack_delay(&a), MS, "20 x 1460 B per 10 ms, doubled: 45 ms for 256 KB, capped");
        let a = AckSample { srtt: Some(20 * US), ..ack(0.0, 0.02, 0, 100) };
        let want = 65_536.0 * 4.0 / (1460.0 * 100.0 * 2.0 / 20e-6) * 1e12;
        assert!((ack_delay(&a) as f64 - want).abs() < 2.0, "{} ps against {want}", ack_delay(&a));
    }

    #[test]
    fn hystart_ends_slow_start_when_a_rounds_rtt_rises_by_an_eighth_of_the_minimum() {
        // ACKs 3 ms apart (no train). Minimum 40 ms: the rise must exceed 5 ms (40 / 8,
        // within 4-16 ms), measured after 8 samples of the round on the round's smallest.
        for (rtt, fires) in [(45.5, true), (44.5, false)] {
            let mut h = HyStart::new(0, 0);
            assert!(!h.on_ack(ack(100.0, 40.0, 1, 20), true));
            let mut fired_at = None;
            for i in 1..=12 {
                if h.on_ack(ack(100.0 + 3.0 * i as f64, rtt, 2_000_000, 20), true) {
                    fired_at = Some(i);
                    break;
                }
            }
            // the next round (una past the first's end) fires on its 9th sample
            assert_eq!(fired_at.filter(|_| fires), fires.then_some(9), "rtt {rtt}");
            assert_eq!(fired_at.is_some(), fires, "rtt {rtt}");
        }
        // the 4 ms floor: minimum 10 ms, 13.9 ms is not enough, 14.1 is, on the 9th sample
        let mut h = HyStart::new(0, 0);
        h.on_ack(ack(100.0, 10.0, 1, 20), true);
        let fired: Vec<bool> =
            (1..=9).map(|i| h.on_ack(ack(100.0 + 3.0 * i as f64, 14.1, 2_000_000, 20), true)).collect();
        assert_eq!(fired.iter().position(|&f| f), Some(8), "{fired:?}");
        // outside slow start, or once found, it only tracks the minimum
        let mut h = HyStart::new(0, 0);
        assert!(!h.on_ack(ack(100.0, 10.0, 1, 20), false));
        assert_eq!(h.delay_min, Some(10 * MS));
    }

    #[test]
    fn a_timeout_forgets_w_max_and_starts_hystart_over() {
        let mut c = Cubic::new(0, true, false);
        c.on_congestion(100.0);
        c.on_timeout(5 * MS, 7_300);
        // the first epoch after it: K = 0 from the window it starts with
        c.on_ack(6 * MS, 10.0, 1.0, MS);
        assert_eq!((c.k, c.w_max), (0.0, 10.0));
        let h = c.hystart.unwrap();
        assert_eq!((h.found, h.delay_min, h.round_start, h.end_seq), (false, None, 5 * MS, 7_300));
    }

    /// The window after one round trip of single-segment ACKs from `cwnd`, at 10 ms RTT,
    /// `rounds` round trips into the epoch.
    fn one_round(c: &mut Cubic, cwnd: f64, rounds: u64) -> f64 {
        let mut w = cwnd;
        for _ in 0..cwnd as u64 {
            w = c.on_ack(rounds * 10 * MS, w, 1.0, 10 * MS);
        }
        w
    }

    #[test]
    fn linux_keeps_the_reno_friendly_alpha_past_w_max_where_rfc_9438_raises_it_to_1() {
        // a loss at 100 segments, then the window back above W_max (85 with fast
        // convergence after a second loss below the first): at 10 ms RTT the cubic curve is
        // flat, so the Reno-friendly estimate sets the pace
        for (linux, per_rtt) in [(false, 1.0), (true, ALPHA)] {
            let mut c = Cubic::new(0, false, linux);
            c.on_congestion(120.0);
            c.on_congestion(100.0);
            assert!((c.w_max - 85.0).abs() < 1e-9);
            let mut w = 90.0;
            c.on_ack(0, w, 1.0, 10 * MS); // the epoch starts above W_max: K = 0
            let w0 = w;
            for r in 1..=10 {
                w = one_round(&mut c, w, r);
            }
            let grown = (w - w0) / 10.0;
            assert!((grown - per_rtt).abs() < 0.05, "linux {linux}: {grown} segments a round trip, want {per_rtt}");
        }
    }

    #[test]
    fn linux_grows_at_least_5_percent_a_round_trip_with_no_reduction_yet() {
        // no loss yet (slow start ended by HyStart, or a timeout since): Linux's `cnt` of at
        // most 20, 5 % of 100 segments a round trip; RFC 9438's Reno-friendly 1 segment
        for (linux, want) in [(true, 5.0), (false, 1.0)] {
            let mut c = Cubic::new(0, false, linux);
            let w = one_round(&mut c, 100.0, 1);
            assert!((w - 100.0 - want).abs() < 0.3, "linux {linux}: +{}", w - 100.0);
        }
        // after a timeout as well (W_max forgotten), but not after a fast recovery
        let mut c = Cubic::new(0, false, true);
        c.on_congestion(140.0);
        c.on_timeout(0, 0);
        assert!(one_round(&mut c, 100.0, 1) > 104.7);
        let mut c = Cubic::new(0, false, true);
        c.on_congestion(140.0);
        assert!(one_round(&mut c, 100.0, 1) < 101.0);
    }
}
