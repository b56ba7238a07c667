//! One run on several cores (`threads = N`): conservative parallel simulation in windows.
//!
//! The network is split into N parts by pod (fat-tree; cores round-robin) or by rack
//! (leaf-spine; spines round-robin), each a whole [`Simulation`] of its own nodes on its own
//! thread, as ns-3's distributed mode runs one process per part. A packet put on a link to
//! another part reaches it no sooner than one link delay `L` later, so every part may run
//! the window `[t, t + L)` (`t` the earliest event anywhere) without hearing from the
//! others; at the window's end the parts swap what crossed (packets, with their arrival
//! time, and "sender closed" notes) at a barrier. A flow's sender lives in its source's
//! part, its receiver in its destination's, made when the flow's first packet arrives.
//!
//! A run is a pure function of its scenario and `threads`: each part orders its events as
//! a single run does, takes in the others' messages in a fixed order and draws from its
//! own generator. It is not the single-threaded run's output: ties between events, random
//! draws and the end (the window in which the last flow finishes, not the event) differ,
//! within packet level's seed-to-seed spread (docs/performance.md).
//!
//! `Simulation::step` runs it in steps, as a single run: part 0 (the `Simulation` stepped)
//! runs on the caller's thread, the other parts on threads of their own (`Crew`); a step
//! ends at a window's first barrier, where every part stops and parks until the next step,
//! so the windows, and the run, are the same however it is stepped.
//!
//! Transports keep what they share per host (persistent connections, carried rates and
//! thresholds, DLCP's pair counts) in that host's part. Refused by name where a part would
//! need another's state between windows: PCN, pauses, failures, FIFO NICs, barriers whose
//! flows finish in one part and release in another, and links without delay. Sampled
//! ports are sampled by the part that serializes on them.

use super::eps::Retired;
use super::*;
use gradwire_core::transport::Endpoint;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// What one part hands another at a window's end.
pub(super) enum Msg {
    /// A packet put on `port`, whose far end is in the receiving part, arriving at `arrives`.
    Packet { arrives: Time, port: PortId, packet: Packet },
    /// Flow `.0`'s sender is gone and none of its packets is left in the sending part; the
    /// receiver may retire once none is left in its own.
    SenderClosed(u32),
}

/// A part's view of the split.
pub(super) struct Part {
    rank: u8,
    /// Every node's part.
    owner: Vec<u8>,
    /// Per port: its far end is in another part.
    cut: Vec<bool>,
    lookahead: Time,
    /// Messages for each part (its own entry unused), handed over at the window's end.
    outbox: Vec<Vec<Msg>>,
    /// Flows whose sender is in another part, in a bit each: their receiver was made here /
    /// they finished here. Their finish times are logged in `finishes`; their start and
    /// counters are the sender's part's, so they take no per-flow record here (which would
    /// put most of the workload's records in both parts).
    opened: Vec<u64>,
    finished: Vec<u64>,
    finishes: Vec<(u32, Time)>,
    /// Every part's finished flows and events, as of the last window (part 0's progress).
    all_done: u64,
    all_events: u64,
    /// Windows run and time spent at the barrier (`GRADWIRE_PAR_STATS`).
    windows: u64,
    waited: std::time::Duration,
}

fn bit(bits: &[u64], i: u32) -> bool {
    bits[i as usize / 64] & 1 << (i % 64) != 0
}

fn set(bits: &mut [u64], i: u32) {
    bits[i as usize / 64] |= 1 << (i % 64);
}

impl Part {
    #[inline]
    pub fn is_cut(&self, port: PortId) -> bool {
        self.cut[port as usize]
    }

    #[inline]
    pub fn owns(&self, node: NodeId) -> bool {
        self.owner[node as usize] == self.rank
    }

    /// Every part's finished flows and processed events, as of the last window.
    pub fn progress(&self) -> (u64, u64) {
        (self.all_done, self.all_events)
    }

    /// Flow `f`, whose sender is elsewhere, had its receiver made here.
    pub fn opened(&self, f: u32) -> bool {
        bit(&self.opened, f)
    }

    /// Flow `f`, whose sender is elsewhere, finished at `at`; false if it had already.
    pub fn finish_remote(&mut self, f: u32, at: Time) -> bool {
        if bit(&self.finished, f) {
            return false;
        }
        set(&mut self.finished, f);
        self.finishes.push((f, at));
        true
    }
}

/// Every node's part, `parts` of them.
pub fn node_parts(s: &Scenario, topo: &Topology, parts: u32) -> Vec<u8> {
    let hosts = topo.hosts;
    let t = &s.topology;
    let group = |n: u32| -> u32 {
        match t.kind {
            crate::scenario::TopologyKind::FatTree => {
                let half = t.k / 2;
                let (edge0, agg0, core0) = (hosts, hosts + t.k * half, hosts + 2 * t.k * half);
                if n < edge0 {
                    n / (half * half)
                } else if n < agg0 {
                    (n - edge0) / half
                } else if n < core0 {
                    (n - agg0) / half
                } else {
                    n - core0
                }
            }
            crate::scenario::TopologyKind::LeafSpine => {
                if n < hosts {
                    n / t.hosts_per_leaf
                } else {
                    n - hosts - if n < hosts + t.leaves { 0 } else { t.leaves }
                }
            }
        }
    };
    (0..topo.nodes.len() as u32).map(|n| (group(n) % parts) as u8).collect()
}

/// Whether `s` can run on `s.threads` parts; the reason by key if not.
pub(super) fn check(s: &Scenario, topo: &Topology, wl: &Workload) -> Result<(), ScenarioError> {
    let n = s.threads;
    let refuse = |why: String| Err(ScenarioError::new("threads", format!("threads = {n} {why}; use threads = 1")));
    let unsupported = [
        (s.pcn.enabled, "pcn.enabled"),
        (s.pauses.hosts > 0, "pauses"),
        (!s.failures.is_empty(), "failures"),
        (s.host.nic == crate::scenario::NicDiscipline::Fifo, "host.nic = \"fifo\""),
        (s.host.nic == crate::scenario::NicDiscipline::FlowQueues, "host.nic = \"flow_queues\""),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(on, _)| *on) {
        return refuse(format!("does not run with {what} yet"));
    }
    if topo.links.iter().any(|l| l.delay == 0) {
        return refuse(
            "needs links with a delay (topology.link_delay_ns > 0): a part runs one link delay ahead of the others"
                .into(),
        );
    }
    // a barrier's flows must finish in the part where the flows it releases start
    let owner = node_parts(s, topo, n);
    let mut at: Vec<Option<u8>> = vec![None; wl.barriers.len()];
    for (f, spec) in wl.flows.iter().enumerate() {
        for &b in wl.feeds(f as u32) {
            let part = owner[spec.dst as usize];
            if *at[b as usize].get_or_insert(part) != part {
                return refuse(format!(
                    "cannot split this workload: barrier {b} waits for flows that finish in different parts"
                ));
            }
        }
    }
    for (b, barrier) in wl.barriers.iter().enumerate() {
        let Some(part) = at[b] else { continue };
        if barrier.releases.iter().any(|&g| owner[wl.flows[g as usize].src as usize] != part) {
            return refuse(format!("cannot split this workload: barrier {b} releases flows from another part than the one its flows finish in"));
        }
    }
    Ok(())
}

/// A barrier that spins before it yields: a window is a fraction of a millisecond of
/// work, and a blocked thread's wake-up (tens of microseconds) would be a good part of it.
struct SpinBarrier {
    parts: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(parts: usize) -> Self {
        SpinBarrier { parts, arrived: AtomicUsize::new(0), generation: AtomicUsize::new(0) }
    }

    /// Waits for every part; panics if one of them failed (it will never arrive).
    fn wait(&self, failed: &AtomicBool) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parts {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if failed.load(Ordering::Relaxed) {
                panic!("another part of the parallel run failed");
            }
            // more parts than free cores: let the late one run
            if spins < SPINS {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// About 20-50 µs of spinning before a waiting part yields its core.
const SPINS: u32 = 2_000;

/// What the parts share: the barrier, each part's mail from each other part, and what the
/// decision to go on reads.
struct Exchange {
    barrier: SpinBarrier,
    /// `mail[to][from]`: one slot per pair, so a part takes its mail in a fixed order.
    mail: Vec<Vec<Mutex<Vec<Msg>>>>,
    next: Vec<AtomicU64>,
    done: Vec<AtomicU64>,
    events: Vec<AtomicU64>,
    /// A part panicked: the others stop waiting for it.
    failed: AtomicBool,
    /// Set by part 0, to the round it runs in, before a window's first barrier: every
    /// part stops there (a `step` ends), to go on from there when resumed. Never cleared:
    /// a part slow to read it must still see it after part 0 has resumed the next round.
    pause: AtomicU64,
    /// Where stopped parts wait for the next `step` (or for the run to be dropped).
    gate: Mutex<Gate>,
    wake: Condvar,
}

struct Gate {
    /// Resumptions so far.
    round: u64,
    /// The run was dropped midway: parked parts end.
    abort: bool,
}

impl Exchange {
    fn new(n: usize) -> Self {
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect();
        Exchange {
            barrier: SpinBarrier::new(n),
            mail: (0..n).map(|_| (0..n).map(|_| Mutex::new(Vec::new())).collect()).collect(),
            next: zeros(),
            done: zeros(),
            events: zeros(),
            failed: AtomicBool::new(false),
            pause: AtomicU64::new(0),
            gate: Mutex::new(Gate { round: 0, abort: false }),
            wake: Condvar::new(),
        }
    }

    fn wait(&self) {
        self.barrier.wait(&self.failed)
    }

    /// Waits until resumed after resumption `seen`; false if the run was dropped instead.
    fn park(&self, seen: &mut u64) -> bool {
        let gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        let gate = self.wake.wait_while(gate, |g| g.round == *seen && !g.abort).unwrap_or_else(|e| e.into_inner());
        *seen = gate.round;
        !gate.abort
    }

    /// Resumes the parked parts; returns the round they now run (from 1).
    fn resume(&self) -> u64 {
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        gate.round += 1;
        self.wake.notify_all();
        gate.round
    }

    /// Runs one part's work; if it panics, the other parts are told before it unwinds.
    fn guard<T>(&self, work: impl FnOnce() -> T) -> T {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|e| {
            self.failed.store(true, Ordering::Relaxed);
            std::panic::resume_unwind(e)
        })
    }
}

/// A parallel run between `step`s: the parts other than 0, each on its own thread,
/// parked at a window's first barrier until part 0 (the `Simulation` stepped) resumes
/// them. Dropping it midway ends their threads.
pub(super) struct Crew {
    ex: Arc<Exchange>,
    owner: Vec<u8>,
    /// Each part's thread; it returns the part at the run's end (`None` if dropped).
    workers: Vec<JoinHandle<Option<Simulation>>>,
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.ex.gate.lock().unwrap_or_else(|e| e.into_inner()).abort = true;
        self.ex.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Simulation {
    /// Runs the scenario on `threads` parts, one thread each, until part 0 has processed
    /// about `max_events / threads` events (every part stops at the same window, so how
    /// a run is stepped does not change it) or the run is over; then gathers the parts'
    /// results into `self` (part 0), which reads as a single run's. True once over.
    pub(super) fn step_parallel(&mut self, max_events: u64) -> bool {
        let t0 = Instant::now();
        let n = self.scenario.threads as usize;
        let crew = match self.crew.take() {
            Some(crew) => crew,
            None => self.start_crew(n),
        };
        let round = crew.ex.resume();
        // at least one event: a pause set before the round's first window would race a
        // part still reading the last round's
        let budget = self.events_processed + (max_events / n as u64).max(1);
        let ex = &crew.ex;
        let over =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ex.guard(|| self.run_part(ex, round, budget))));
        self.wall += t0.elapsed();
        match over {
            Ok(false) => {
                self.crew = Some(crew);
                false
            }
            Ok(true) => {
                let mut crew = crew;
                let others = std::mem::take(&mut crew.workers)
                    .into_iter()
                    .map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)).expect("not dropped"))
                    .collect();
                self.gather(others, &crew.owner);
                self.finished = true;
                true
            }
            // a part's own panic, rather than part 0's "another part failed"
            Err(ours) => {
                let mut crew = crew;
                let theirs = crew.workers.drain(..).find_map(|w| w.join().err());
                std::panic::resume_unwind(theirs.unwrap_or(ours))
            }
        }
    }

    /// Splits the network: this `Simulation` becomes part 0, and parts 1.. are built (on
    /// the shared workload), each on its own thread, which then waits to be resumed.
    fn start_crew(&mut self, n: usize) -> Box<Crew> {
        let owner = node_parts(&self.scenario, &self.topo, n as u32);
        let ex = Arc::new(Exchange::new(n));
        let workers = (1..n)
            .map(|rank| {
                let (ex, owner, scenario, workload) =
                    (ex.clone(), owner.clone(), self.scenario.clone(), self.workload.clone());
                std::thread::spawn(move || {
                    ex.clone().guard(|| {
                        let mut part =
                            Simulation::build(&scenario, Some(workload)).expect("the scenario was accepted once");
                        part.make_part(rank as u8, &owner);
                        let mut round = 0;
                        while ex.park(&mut round) {
                            if part.run_part(&ex, round, u64::MAX) {
                                return Some(part);
                            }
                        }
                        None
                    })
                })
            })
            .collect();
        self.make_part(0, &owner);
        Box::new(Crew { ex, owner, workers })
    }

    fn make_part(&mut self, rank: u8, owner: &[u8]) {
        let ports = &self.fabric.ports;
        let cut: Vec<bool> = ports.iter().map(|p| owner[p.from as usize] != owner[p.to as usize]).collect();
        let lookahead = ports.iter().zip(&cut).filter(|(_, &c)| c).map(|(p, _)| p.delay).min().unwrap_or(Time::MAX);
        let flows = &self.workload.flows;
        self.starts.retain(|&f| owner[flows[f as usize].src as usize] == rank);
        self.starts.shrink_to_fit();
        // records of the flows sent from here only (a receiver here logs its finish)
        debug_assert!(self.flows_done == 0, "a part is made before any flow starts");
        self.flows = Chunked::subset(flows.len(), |f| owner[flows[f as usize].src as usize] == rank);
        // each part its own stream (the workload was drawn from the scenario's seed)
        self.rng = Xoshiro256PlusPlus::seed_from_u64(
            self.scenario.seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(rank as u64 + 1),
        );
        let parts = owner.iter().copied().max().unwrap_or(0) as usize + 1;
        self.part = Some(Box::new(Part {
            rank,
            owner: owner.to_vec(),
            cut,
            lookahead,
            outbox: (0..parts).map(|_| Vec::new()).collect(),
            opened: vec![0; flows.len().div_ceil(64)],
            finished: vec![0; flows.len().div_ceil(64)],
            finishes: Vec::new(),
            all_done: 0,
            all_events: 0,
            windows: 0,
            waited: std::time::Duration::ZERO,
        }));
    }

    /// This part's windows until every flow is done, nothing is left anywhere, or the stop
    /// (true), or until part 0 asks every part to stop, once its events reach `pause_at`
    /// (false); `round` counts the resumptions (see `Exchange::pause`). With
    /// `GRADWIRE_PAR_STATS` set, a part prints its windows and its time waiting for the
    /// others at the end.
    fn run_part(&mut self, ex: &Exchange, round: u64, pause_at: u64) -> bool {
        let t0 = Instant::now();
        let (rank, lookahead) = self.part.as_ref().map(|p| (p.rank as usize, p.lookahead)).expect("a part");
        let total = self.flows.len() as u64;
        let mut waited = std::time::Duration::ZERO;
        let over = loop {
            ex.next[rank].store(self.events.peek_time().unwrap_or(Time::MAX), Ordering::Relaxed);
            ex.done[rank].store(self.flows_done, Ordering::Relaxed);
            ex.events[rank].store(self.events_processed, Ordering::Relaxed);
            if rank == 0 && self.events_processed >= pause_at {
                ex.pause.store(round, Ordering::Relaxed);
            }
            let w0 = Instant::now();
            ex.wait();
            waited += w0.elapsed();
            let done: u64 = ex.done.iter().map(|d| d.load(Ordering::Relaxed)).sum();
            let first = ex.next.iter().map(|t| t.load(Ordering::Relaxed)).min().unwrap_or(Time::MAX);
            let part = self.part.as_mut().expect("a part");
            part.all_done = done;
            part.all_events = ex.events.iter().map(|e| e.load(Ordering::Relaxed)).sum();
            if done == total || first == Time::MAX {
                break true;
            }
            if first > self.stop {
                self.now = self.stop;
                break true;
            }
            if ex.pause.load(Ordering::Relaxed) == round {
                break false;
            }
            part.windows += 1;
            self.run_window(first.saturating_add(lookahead));
            self.post(ex, rank);
            let w0 = Instant::now();
            ex.wait();
            waited += w0.elapsed();
            self.collect(ex, rank);
        };
        if rank != 0 {
            self.wall += t0.elapsed();
        }
        let part = self.part.as_mut().expect("a part");
        part.waited += waited;
        if over && std::env::var_os("GRADWIRE_PAR_STATS").is_some() {
            eprintln!(
                "part {rank}: {} windows, {:.1} s, waited {:.1} s, {} events, exported {}",
                part.windows,
                self.wall.as_secs_f64(),
                part.waited.as_secs_f64(),
                self.events_processed,
                self.exported
            );
        }
        over
    }

    /// Every event due before `end` (and not after the stop).
    fn run_window(&mut self, end: Time) {
        while let Some(t) = self.events.peek_time() {
            if t >= end || t > self.stop {
                break;
            }
            let (t, target) = self.events.pop().expect("peeked");
            self.process(t, target);
        }
    }

    fn post(&mut self, ex: &Exchange, rank: usize) {
        let part = self.part.as_mut().expect("a part");
        for (to, msgs) in part.outbox.iter_mut().enumerate() {
            if to != rank && !msgs.is_empty() {
                std::mem::swap(&mut *ex.mail[to][rank].lock().expect("no part panicked"), msgs);
            }
        }
    }

    fn collect(&mut self, ex: &Exchange, rank: usize) {
        for from in 0..ex.mail.len() {
            if from == rank {
                continue;
            }
            let mut msgs = std::mem::take(&mut *ex.mail[rank][from].lock().expect("no part panicked"));
            for m in msgs.drain(..) {
                self.import(m);
            }
            // the emptied buffer goes back for the sender's next `post` to swap its outbox
            // with, so the outbox keeps its capacity from window to window
            *ex.mail[rank][from].lock().expect("no part panicked") = msgs;
        }
    }

    fn import(&mut self, m: Msg) {
        match m {
            Msg::Packet { arrives, port, packet } => {
                let tag = self.imported_tag(&packet);
                let id = self.fabric.packets.alloc(packet, tag);
                let wire = &mut self.fabric.ports[port as usize].wire;
                wire.push_back((arrives, Hdr::of(id, &packet)));
                if wire.len() == 1 {
                    self.events.push(arrives, Target::Arrive(port));
                }
                self.imported += 1;
            }
            Msg::SenderClosed(flow) => {
                if let Some(pair) = self.eps.get_mut(flow) {
                    pair.0[0].endpoint = None;
                }
                self.retire_receiver(flow);
            }
        }
    }

    /// Count an arriving packet into its flow's pair, opening the pair with the receiver
    /// alone when it is the flow's first packet here.
    fn imported_tag(&mut self, p: &Packet) -> u32 {
        let f = p.flow;
        let spec = &self.workload.flows[f as usize];
        let part = self.part.as_ref().expect("a part");
        if p.dst == spec.dst && !part.owns(spec.src) && !part.opened(f) {
            self.open_receiver(f);
        }
        self.flow_packet_sent(f)
    }

    /// Flow `f`, whose sender runs in another part, gets its receiver here, made with its
    /// host's state as a single run makes it; the sender made beside it is thrown away
    /// (what it touched is the state of a host of another part, which nothing here reads).
    /// The sender's slot holds a stand-in that keeps the receiver from retiring until the
    /// sender's part says it closed.
    fn open_receiver(&mut self, f: u32) {
        let spec = self.workload.flows[f as usize].clone();
        let nic = self.fabric.node_ports[spec.src as usize][0];
        let rate = self.fabric.ports[nic as usize].bits_per_sec;
        let (_, receiver) = self.factory.make(f, &spec, rate, self.now, &mut self.hosts);
        set(&mut self.part.as_mut().expect("a part").opened, f);
        // the stand-in does nothing, and while it is there the receiver stays
        self.eps.open(f, spec.src, spec.dst, Box::new(Retired), receiver);
    }

    /// A packet leaves on a cut port: it goes to the far end's part with its arrival time.
    pub(super) fn export(&mut self, port: PortId) {
        let pr = &mut self.fabric.ports[port as usize];
        let (arrives, h) = pr.wire.pop_back().expect("just put on the wire");
        let to = pr.to;
        let (packet, tag) = self.fabric.packets.release(h.id);
        let part = self.part.as_mut().expect("a part");
        part.outbox[part.owner[to as usize] as usize].push(Msg::Packet { arrives, port, packet });
        self.exported += 1;
        if self.flow_packet_gone(tag) {
            self.retire_receiver(packet.flow);
        }
    }

    /// Flow `flow`'s pair was freed here: if its receiver is elsewhere, tell that part.
    pub(super) fn pair_freed(&mut self, flow: u32) {
        let spec = &self.workload.flows[flow as usize];
        let part = self.part.as_mut().expect("a part");
        if part.owns(spec.src) && !part.owns(spec.dst) {
            let to = part.owner[spec.dst as usize] as usize;
            part.outbox[to].push(Msg::SenderClosed(flow));
        }
    }

    /// The other parts' results into this one: counters summed, each port's state from
    /// the part that serialized on it, each flow's start and sender counters from its
    /// source's part and its finish from its destination's.
    fn gather(&mut self, others: Vec<Simulation>, owner: &[u8]) {
        self.flows = std::mem::replace(&mut self.flows, Chunked::new(0)).into_whole(FlowState::default);
        for (i, mut o) in others.into_iter().enumerate() {
            let rank = i as u8 + 1;
            self.counts.sent += o.counts.sent;
            self.counts.delivered += o.counts.delivered;
            self.counts.dropped += o.counts.dropped;
            self.exported += o.exported;
            self.imported += o.imported;
            self.live_elsewhere += o.fabric.packets.live();
            self.strays += o.strays;
            self.late_timeouts += o.late_timeouts;
            self.events_processed += o.events_processed;
            self.flows_done += o.flows_done;
            for (a, b) in self.drops_by_reason.iter_mut().zip(o.drops_by_reason) {
                *a += b;
            }
            self.now = self.now.max(o.now);
            self.queue_samples.append(&mut o.queue_samples);
            self.byte_samples.append(&mut o.byte_samples);
            for (p, port) in o.fabric.ports.iter_mut().enumerate() {
                if owner[port.from as usize] == rank {
                    std::mem::swap(&mut self.fabric.ports[p], port);
                }
            }
            // the flows it sent: start, counters, and the finish of those it also received
            for f in 0..self.flows.len() as u32 {
                if owner[self.workload.flows[f as usize].src as usize] != rank {
                    continue;
                }
                let theirs = o.flow_state(f);
                if theirs.started().is_some() {
                    let stats = o.flow_stats(f);
                    let st = self.flows.get_or_alloc(f, FlowState::default);
                    st.set_started(theirs.started());
                    st.set_stats(stats);
                    if theirs.finished().is_some() {
                        st.set_finished(theirs.finished());
                    }
                }
            }
            // the flows it received from other parts
            for &(f, at) in &o.part.as_ref().expect("a part").finishes {
                self.flows.get_or_alloc(f, FlowState::default).set_finished(Some(at));
            }
        }
        for &(f, at) in &self.part.as_ref().expect("a part").finishes {
            self.flows.get_or_alloc(f, FlowState::default).set_finished(Some(at));
        }
        // samples in a single run's order: by time, then as the ports are listed
        let rank_of = |list: &[PortId], p: PortId| list.iter().position(|&q| q == p).unwrap_or(usize::MAX);
        let (queued, counted) = (self.sampled_ports.clone(), self.counter_ports.clone());
        self.queue_samples.sort_by_key(|q| (q.time_ns, rank_of(&queued, q.port)));
        self.byte_samples.sort_by_key(|&(t, p, _)| (t, rank_of(&counted, p)));
        // receivers here of senders elsewhere: the gathered counters are their flows'
        for f in 0..self.flows.len() as u32 {
            if owner[self.workload.flows[f as usize].src as usize] != 0 {
                if let Some(pair) = self.eps.get_mut(f) {
                    pair.0[0].endpoint = None;
                }
            }
        }
        self.part = None;
    }
}

/// The stand-in, in a sender's part, for its receiver in another part (and, in the
/// receiver's part, for the sender: see `open_receiver`).
pub(super) fn receiver_elsewhere() -> Box<dyn Endpoint> {
    Box::new(Retired)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(n: usize) -> Exchange {
        Exchange::new(n)
    }

    #[test]
    fn the_barrier_lets_parts_through_together_window_after_window() {
        let ex = exchange(3);
        let count = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for round in 0..200 {
                        count.fetch_add(1, Ordering::Relaxed);
                        ex.wait();
                        // nobody is a round ahead: every part arrived before any left
                        assert_eq!(count.load(Ordering::Relaxed), 3 * (round + 1));
                        ex.wait();
                    }
                });
            }
        });
        assert_eq!(count.into_inner(), 600);
    }

    #[test]
    fn a_part_that_panics_stops_the_others_instead_of_leaving_them_waiting() {
        let ex = exchange(2);
        let outcomes = std::thread::scope(|s| {
            let failing = s.spawn(|| ex.guard(|| panic!("a bug in one part")));
            let waiting = s.spawn(|| ex.guard(|| ex.wait()));
            [failing.join().is_err(), waiting.join().is_err()]
        });
        assert_eq!(outcomes, [true, true], "both parts ended, the waiting one by a panic");
    }
}
