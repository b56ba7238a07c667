//! `GRADWIRE_TRACE`: the engine's state on stderr every 10 s, and a line per call, per
//! started send and per finished transfer (with `unix=`, the wall clock all ranks share).

use gradwire_core::time::Time;

use super::Engine;

/// Time between two dumps of the engine's state.
const PERIOD: Time = 10_000_000_000;

pub(super) struct Tracer {
    /// `GRADWIRE_TRACE` is set.
    on: bool,
    next_dump: Time,
    /// Turns run, and turns that found nothing to do.
    turns: u64,
    idle_turns: u64,
}

/// Seconds since the Unix epoch: the one clock every rank's lines share (a rank's `t=` is
/// since its own start), so a transfer's start at its sender and its end at its receiver
/// can be compared.
pub(super) fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Tracer {
    pub(super) fn from_env() -> Self {
        Tracer { on: std::env::var_os("GRADWIRE_TRACE").is_some(), next_dump: 0, turns: 0, idle_turns: 0 }
    }

    pub(super) fn on(&self) -> bool {
        self.on
    }

    pub(super) fn count_turn(&mut self, busy: bool) {
        self.turns += 1;
        self.idle_turns += !busy as u64;
    }

    /// True (and the next dump scheduled) if tracing and a dump is due at `now`.
    fn dump_due(&mut self, now: Time) -> bool {
        if !self.on || now < self.next_dump {
            return false;
        }
        self.next_dump = now + PERIOD;
        true
    }
}

impl Engine {
    /// Dumps the engine's state if one is due.
    pub(super) fn trace(&mut self, now: Time) {
        if !self.tracer.dump_due(now) {
            return;
        }
        eprintln!(
            "t={:.3}ms rank {} turns {} idle {} wakes {} (data socket {}) counters {:?}",
            now as f64 / 1e9,
            self.rank,
            self.tracer.turns,
            self.tracer.idle_turns,
            self.wait.wakes,
            self.wait.rx_wakes,
            self.local
        );
        if let Some(job) = &self.job {
            eprintln!(
                "t={:.3}ms rank {} call {} transfers done={} peers unverified={:?}",
                now as f64 / 1e9,
                self.rank,
                job.call,
                job.exec.is_complete(),
                job.unverified
            );
        }
        for (flow, s) in &self.slots {
            let rate = s.ep.pacing_rate_bps();
            eprintln!(
                "t={:.3}ms rank {} flow {flow:#x} peer {} recv={} fin={} closed={} rate={:.2}G stats={:?} next={:?}",
                now as f64 / 1e9,
                self.rank,
                s.peer,
                s.ep.is_receiver(),
                s.finished,
                s.ep.is_closed(),
                rate as f64 / 1e9,
                s.ep.stats(),
                s.ep.poll_timeout().map(|t| t as f64 / 1e9)
            );
        }
    }
}
