//! Pauses: a host's NIC or a link stops transmitting for a while and keeps what it holds.
//!
//! Node pauses (`[pauses]`, rat.md §4.1) draw `k` hosts every `d` from their own seeded
//! generator, so switching them on leaves the main generator's draws (spraying, loss)
//! unchanged. A host paused with `hold = "data"` keeps its ready senders aside (still
//! marked ready, so their pacing never arms a wake-up) and its NIC serves only receivers;
//! with `hold = "all"` its NIC port is stopped like a paused link. A paused port
//! (`failures` with `pause_us`) dequeues nothing until it resumes; its buffer still
//! admits and drops as usual.
//!
//! Event `Pause(i)`: 0 draws the next set, 1 releases the current set (when a set is
//! paused for less than the period), `2 + j` resumes the ports of failure `j`.

use super::*;
use crate::scenario::{PauseHold, PausesCfg};

pub(super) const PAUSE_DRAW: u32 = 0;
pub(super) const PAUSE_RELEASE: u32 = 1;
pub(super) const PAUSE_RESUME_FAILURE: u32 = 2;

/// Salt of the pause generator's seed (ASCII "pauses").
const PAUSE_SEED_SALT: u64 = 0x7061_7573_6573;

pub(super) struct NodePauses {
    rng: Xoshiro256PlusPlus,
    candidates: Vec<u32>,
    k: usize,
    period: Time,
    duration: Time,
    stop: Time,
    hold: PauseHold,
    /// The set paused now.
    current: Vec<u32>,
    /// Per host: paused with `hold = "data"`, and its senders kept aside as (class, ep).
    pub(super) data_paused: Vec<bool>,
    pub(super) held: Vec<Vec<(u8, u32)>>,
    /// Every set drawn, as (time, hosts): the record a test or a plot reads.
    pub(super) log: Vec<(Time, Vec<u32>)>,
}

impl NodePauses {
    pub fn new(cfg: &PausesCfg, seed: u64, hosts: u32) -> Option<NodePauses> {
        if cfg.hosts == 0 {
            return None;
        }
        let period = from_us(cfg.period_us);
        Some(NodePauses {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ PAUSE_SEED_SALT),
            candidates: cfg.among.clone().unwrap_or_else(|| (0..hosts).collect()),
            k: cfg.hosts as usize,
            period,
            duration: cfg.duration_us.map_or(period, from_us),
            stop: cfg.stop_us.map_or(Time::MAX, from_us),
            hold: cfg.hold,
            current: Vec::new(),
            data_paused: vec![false; hosts as usize],
            held: vec![Vec::new(); hosts as usize],
            log: Vec::new(),
        })
    }

    pub fn first_draw(cfg: &PausesCfg) -> Time {
        from_us(cfg.start_us)
    }

    /// k distinct candidates, uniformly (a partial Fisher-Yates shuffle).
    fn draw(&mut self) -> Vec<u32> {
        let n = self.candidates.len();
        for i in 0..self.k {
            let j = self.rng.gen_range(i..n);
            self.candidates.swap(i, j);
        }
        let mut set = self.candidates[..self.k].to_vec();
        set.sort_unstable();
        set
    }
}

impl Simulation {
    pub(super) fn pause_event(&mut self, i: u32) {
        match i {
            PAUSE_DRAW => self.pause_draw(),
            PAUSE_RELEASE => self.release_paused_hosts(),
            j => self.resume_failure(j - PAUSE_RESUME_FAILURE),
        }
    }

    fn pause_draw(&mut self) {
        self.release_paused_hosts();
        let now = self.now;
        let Some(np) = self.pauses.as_mut() else {
            return;
        };
        if now >= np.stop {
            return;
        }
        let set = np.draw();
        np.log.push((now, set.clone()));
        np.current = set.clone();
        let (hold, period, duration) = (np.hold, np.period, np.duration);
        for &h in &set {
            match hold {
                PauseHold::Data => np.data_paused[h as usize] = true,
                PauseHold::All => {}
            }
        }
        if hold == PauseHold::All {
            for &h in &set {
                let nic = self.fabric.node_ports[h as usize][0];
                self.fabric.ports[nic as usize].paused += 1;
            }
        }
        if duration < period {
            self.events.push(now + duration, Target::Pause(PAUSE_RELEASE));
        }
        self.events.push(now + period, Target::Pause(PAUSE_DRAW));
    }

    /// Let the current set send again (a no-op if it was already released).
    fn release_paused_hosts(&mut self) {
        let Some(np) = self.pauses.as_mut() else {
            return;
        };
        let set = std::mem::take(&mut np.current);
        let hold = np.hold;
        for &h in &set {
            match hold {
                PauseHold::Data => {
                    let np = self.pauses.as_mut().expect("pauses are on");
                    np.data_paused[h as usize] = false;
                    for (class, ep) in std::mem::take(&mut np.held[h as usize]) {
                        self.ready.push_back(h, class, ep);
                    }
                    self.pull_nic(h);
                }
                PauseHold::All => {
                    let nic = self.fabric.node_ports[h as usize][0];
                    self.resume_port(nic);
                }
            }
        }
    }

    /// Whether `host`'s NIC must keep `ep` aside instead of asking it for a packet.
    #[inline]
    pub(super) fn holds_sender(&self, host: u32, ep: u32) -> bool {
        ep.is_multiple_of(2) && self.pauses.as_ref().is_some_and(|np| np.data_paused[host as usize])
    }

    #[cold]
    #[inline(never)]
    pub(super) fn hold_sender(&mut self, host: u32, class: u8, ep: u32) {
        self.pauses.as_mut().expect("pauses are on").held[host as usize].push((class, ep));
    }

    /// A paused failure's ports (links or a node's links) stop transmitting.
    #[cold]
    pub(super) fn pause_ports(&mut self, failure: u32, pause: Time) {
        for &port in &self.failures[failure as usize] {
            self.fabric.ports[port as usize].paused += 1;
        }
        self.events.push(self.now + pause, Target::Pause(PAUSE_RESUME_FAILURE + failure));
    }

    fn resume_failure(&mut self, failure: u32) {
        for port in self.failures[failure as usize].clone() {
            self.resume_port(port);
        }
    }

    /// Undo one pause of `port`; once none is left, serve what waited.
    fn resume_port(&mut self, port: PortId) {
        let pr = &mut self.fabric.ports[port as usize];
        pr.paused -= 1;
        if pr.paused > 0 || !pr.up || pr.wake_pending {
            return;
        }
        if !pr.queue.is_empty() {
            if self.now >= pr.busy_until {
                self.start_tx(port);
            } else {
                pr.wake_pending = true;
                self.events.push(pr.busy_until, Target::TxDone(port));
            }
        } else if self.topo.nodes[pr.from as usize].kind == NodeKind::Host {
            let host = pr.from;
            self.pull_nic(host);
        }
    }

    /// Every set of paused hosts drawn so far, as (time in ns, hosts).
    pub fn pause_log(&self) -> Vec<(u64, Vec<u32>)> {
        self.pauses.as_ref().map_or_else(Vec::new, |np| np.log.iter().map(|(t, s)| (t / NS, s.clone())).collect())
    }
}
