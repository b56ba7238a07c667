//! CUBIC (RFC 9438), Linux's default congestion control, in units of segments.
//!
//! After a congestion event the window follows `W_cubic(t) = C (t - K)^3 + W_max` (eq. 1),
//! `K = cbrt((W_max - cwnd_epoch) / C)` (eq. 2), aiming one RTT ahead (section 4.2) and
//! never below the Reno-friendly estimate `W_est` (eq. 4, section 4.3); a loss sets
//! `ssthresh = beta * cwnd` with fast convergence (section 4.7). Slow start is the
//! sender's (HyStart++ is not modelled).

use crate::time::Time;

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
}

impl Cubic {
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
        let alpha = if self.w_est >= self.w_max { 1.0 } else { ALPHA };
        self.w_est += alpha * acked / cwnd;
        if self.window_at(t) < self.w_est {
            self.w_est.max(cwnd)
        } else {
            cwnd + (target - cwnd) / cwnd * acked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

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
}
