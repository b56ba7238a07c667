//! DLCP's minimal rate control (DLCP §3.2.1, Figure 7).
//!
//! Loss tolerance means the rate only has to avoid congestion collapse, not to be fair or
//! lossless: start at line rate; every period compare the measured send rate with `delta`
//! times the receive rate the receiver reported; if larger, halve (and enter congestion
//! avoidance), otherwise add `additive_increase_frac` of line rate, capped at line rate. A
//! retransmission request resets to line rate ("line rate start").

/// The two states of [`MinimalRate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RatePhase {
    /// At line rate (at the start, and after a retransmission request), until a period
    /// finds congestion.
    LineRateStart,
    /// After congestion was seen: halve on congestion, add a step otherwise.
    CongestionAvoidance,
}

/// DLCP's sending-rate controller (see the module docs); the sender paces at
/// [`Self::rate_bps`] and calls [`Self::on_period`] once per period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinimalRate {
    phase: RatePhase,
    rate_bps: u64,
    line_rate_bps: u64,
    min_rate_bps: u64,
    delta: f64,
    increase_bps: u64,
}

impl MinimalRate {
    /// Start at `line_rate_bps` (bit/s) in [`RatePhase::LineRateStart`]. Congestion is
    /// a send rate above `delta` × the reported receive rate; each increase adds
    /// `additive_increase_frac` × line rate. `min_rate_bps` keeps repeated halving from
    /// stalling the flow entirely.
    pub fn new(line_rate_bps: u64, delta: f64, additive_increase_frac: f64, min_rate_bps: u64) -> Self {
        let line = line_rate_bps.max(1);
        MinimalRate {
            phase: RatePhase::LineRateStart,
            rate_bps: line,
            line_rate_bps: line,
            min_rate_bps: min_rate_bps.clamp(1, line),
            delta,
            increase_bps: ((line as f64 * additive_increase_frac) as u64).max(1),
        }
    }

    /// Start at `rate_bps` (clamped to `[min_rate_bps, line_rate_bps]`) instead of line
    /// rate; below line rate in [`RatePhase::CongestionAvoidance`], so the rate also grows
    /// additively from there (a deviation: dlcp.md starts at line rate).
    pub fn starting_at(mut self, rate_bps: u64) -> Self {
        self.rate_bps = rate_bps.clamp(self.min_rate_bps, self.line_rate_bps);
        if self.rate_bps < self.line_rate_bps {
            self.phase = RatePhase::CongestionAvoidance;
        }
        self
    }

    /// Current sending rate, bit/s, in `[min_rate_bps, line_rate_bps]`.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// The floor repeated halving stops at, bit/s.
    pub fn min_rate_bps(&self) -> u64 {
        self.min_rate_bps
    }

    /// The current phase.
    pub fn phase(&self) -> RatePhase {
        self.phase
    }

    /// End of a period in which the sender sent at `send_bps` and the receiver last
    /// reported receiving at `recv_bps`.
    pub fn on_period(&mut self, send_bps: u64, recv_bps: u64) {
        if send_bps as f64 > self.delta * recv_bps as f64 {
            self.phase = RatePhase::CongestionAvoidance;
            self.rate_bps = (self.rate_bps / 2).max(self.min_rate_bps);
        } else if self.phase == RatePhase::CongestionAvoidance {
            self.rate_bps = (self.rate_bps + self.increase_bps).min(self.line_rate_bps);
        }
    }

    /// Hold the rate at or below `max_bps` (clamped to `[min_rate_bps, line_rate_bps]`),
    /// e.g. a receiver's fair share; a capped rate is in congestion avoidance, so it
    /// grows additively again once the cap rises.
    pub fn cap(&mut self, max_bps: u64) {
        let max = max_bps.clamp(self.min_rate_bps, self.line_rate_bps);
        if self.rate_bps > max {
            self.rate_bps = max;
            self.phase = RatePhase::CongestionAvoidance;
        }
    }

    /// The receiver asked for a retransmission: resend at line rate.
    pub fn on_retransmit_request(&mut self) {
        self.phase = RatePhase::LineRateStart;
        self.rate_bps = self.line_rate_bps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_congestion_then_increases_additively_to_line_rate() {
        let mut c = MinimalRate::new(100_000, 2.0, 0.05, 1_000);
        assert_eq!((c.rate_bps(), c.phase()), (100_000, RatePhase::LineRateStart));
        c.on_period(100_000, 60_000); // 100k <= 2 * 60k: fine, stay at line rate
        assert_eq!((c.rate_bps(), c.phase()), (100_000, RatePhase::LineRateStart));
        c.on_period(100_000, 40_000); // 100k > 80k: halve
        assert_eq!((c.rate_bps(), c.phase()), (50_000, RatePhase::CongestionAvoidance));
        c.on_period(50_000, 20_000);
        assert_eq!(c.rate_bps(), 25_000);
        c.on_period(25_000, 20_000);
        assert_eq!(c.rate_bps(), 30_000); // + 5% of line rate
        for _ in 0..30 {
            c.on_period(0, 0);
        }
        assert_eq!(c.rate_bps(), 100_000); // capped
        for _ in 0..30 {
            c.on_period(100_000, 0);
        }
        assert_eq!(c.rate_bps(), 1_000); // floored
        c.on_retransmit_request();
        assert_eq!((c.rate_bps(), c.phase()), (100_000, RatePhase::LineRateStart));
    }

    #[test]
    fn a_cap_holds_the_rate_and_leaves_it_free_to_grow_when_raised() {
        let mut c = MinimalRate::new(100_000, 2.0, 0.05, 1_000);
        c.cap(200_000); // above line rate: nothing to do
        assert_eq!((c.rate_bps(), c.phase()), (100_000, RatePhase::LineRateStart));
        c.cap(25_000);
        assert_eq!((c.rate_bps(), c.phase()), (25_000, RatePhase::CongestionAvoidance));
        c.on_period(25_000, 25_000);
        c.cap(25_000); // the increase is capped too
        assert_eq!(c.rate_bps(), 25_000);
        c.on_period(25_000, 25_000); // cap raised: grows additively from there
        assert_eq!(c.rate_bps(), 30_000);
        c.cap(0);
        assert_eq!(c.rate_bps(), 1_000, "never below the floor");
    }
}
