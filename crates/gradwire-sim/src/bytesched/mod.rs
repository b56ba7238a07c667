//! A data-parallel training job whose gradients go through ByteScheduler's scheduler
//! (`gradwire_core::sched`), simulated at flow level so that a tuner can afford thousands of
//! iterations (one ResNet50 iteration on 8 workers is ~10^3 partition transfers; at packet
//! level it would be ~10^6 packets).
//!
//! Each worker computes forward layer by layer, front to back; layer `i`'s forward in
//! iteration `k` waits until layer `i`'s update of iteration `k-1` has arrived. Backward
//! runs back to front and posts each layer's gradient to the scheduler the moment it is
//! computed. The scheduler cuts it into partitions of `S_p`, and starts them front layer
//! first while the bytes in flight stay within the credit `S_c`; each started partition
//! costs the worker's communication thread a fixed overhead, then moves, and its credit
//! returns a round trip (`partition_latency_us`) after its bytes have arrived:
//!
//! - PS (one server per worker host): pushed to its server (striped over all servers above
//!   `ps_split_bytes`), aggregated once every worker's push of it is in, pulled back. Its
//!   credit is for the push only: by default its own push's arrival, or, with
//!   `ps_credit: aggregated` (MXNet's `dist_sync` semantics), every worker's push of it.
//!   (Holding the credit until the pull deadlocks: workers whose windows hold different
//!   partitions each wait for the others' pushes of their own, which the others' full
//!   windows never start; `aggregated` can too, only when windows diverge that far.)
//! - Ring: one scheduler for the job (all-reduce needs every worker), a partition is posted
//!   once every worker has its gradient, then all-reduced in 2(N-1) lock-step ring steps of
//!   1/N of it each; its credit returns when the last step completes.
//!
//! `⟨S_p, S_c⟩` changes between iterations ([`Job::set_sched`]) without stopping the job.
//! Links are host NICs shared max-min fairly ([`fluid`]); conditions change when an
//! iteration starts (host rates, other jobs joining and leaving) or per worker and
//! iteration (slowed compute). Deterministic: no randomness at all.

mod config;
pub mod fluid;
#[cfg(test)]
mod tests;

pub use config::{
    BackgroundJob, JobCfg, Pattern, PsCredit, RateChange, SchedCfg, Shaping, Slowdown, DEFAULT_LATENCY_US,
    DEFAULT_OVERHEAD_US,
};

use crate::models::{self, ModelProfile};
use fluid::{Network, Tag};
use gradwire_core::collective;
use gradwire_core::sched::{Partition, PartitionId, Scheduler};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// What one iteration measured, when every worker has finished its backward pass.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IterationStats {
    pub iteration: u32,
    /// Simulated seconds since the job started.
    pub end_s: f64,
    /// Since the previous iteration's end (since the start for iteration 0).
    pub duration_s: f64,
    /// Samples of all workers per second of this iteration.
    pub samples_per_s: f64,
    /// `⟨S_p, S_c⟩` this iteration's gradients were scheduled with (None: unscheduled).
    pub partition_bytes: Option<u64>,
    pub credit_bytes: Option<u64>,
    /// Partitions started for this iteration's gradients so far.
    pub partitions: u64,
    /// This job's bytes sent / received by each worker host during the iteration, Gbit/s.
    pub up_gbps: Vec<f64>,
    pub down_gbps: Vec<f64>,
    /// Each worker host's NIC rate during the iteration.
    pub link_gbps: Vec<f64>,
    /// What one more flow would get on each worker's uplink beside the other jobs' flows:
    /// the bandwidth a probe measures (the meta-network's B_u and B_d).
    pub avail_gbps: Vec<f64>,
    /// Per layer in backward order, per worker: the backward time, ms.
    pub backward_ms: Vec<Vec<f64>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Forward(u32),
    Blocked(u32),
    Backward(u32),
    /// Stopped by [`Job::drain`].
    Halted,
}

struct Worker {
    iteration: u32,
    phase: Phase,
    /// Per layer: the last iteration whose update has arrived (-1: the initial weights).
    updated: Vec<i64>,
    /// Per layer: bytes of its pending update still to arrive.
    awaiting: Vec<u64>,
}

struct Sched {
    s: Scheduler,
    /// The iteration whose configuration it holds.
    iteration: i64,
    /// The communication thread is paying a partition's overhead.
    launching: bool,
}

enum Ev {
    Compute(u32),
    Launched(usize, Partition),
    /// A worker learns that its push of a partition has arrived: the credit returns.
    Acked(u32, PartitionId),
    /// A ring all-reduce moves on to its next step.
    RingStep(u64),
    /// A PS server has processed a push (`ps_server_overhead_us`).
    Served(Tag),
}

struct Timed {
    t: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    /// Earliest first (BinaryHeap is a max-heap), ties in scheduling order.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// One ring all-reduce of a partition in progress.
struct RingOp {
    id: PartitionId,
    tensor: u64,
    len: u64,
    step: u32,
    left: u32,
}

/// Bytes pushed and pulled (PS) or all-reduced (ring) for each worker, local ones included:
/// the conservation a test checks against the model's size × iterations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub pushed: Vec<u64>,
    pub pulled: Vec<u64>,
    pub reduced: u64,
}

pub struct Job {
    cfg: JobCfg,
    model: ModelProfile,
    n: u32,
    layers: u32,
    batch: u32,
    sched: SchedCfg,
    now: f64,
    seq: u64,
    events: BinaryHeap<Timed>,
    net: Network,
    workers: Vec<Worker>,
    scheds: Vec<Sched>,
    /// PS: (worker, tensor, offset) → (partition, pieces not yet acknowledged).
    ps_parts: HashMap<(u32, u64, u64), (PartitionId, u32)>,
    /// PS: (tensor, offset, server) → pushes received.
    pushes_in: HashMap<(u64, u64, u32), u32>,
    /// PS: when each server's thread is free again.
    server_free: Vec<f64>,
    /// Ring: tensor → workers that have its gradient.
    ring_ready: HashMap<u64, u32>,
    rings: HashMap<u64, RingOp>,
    next_ring: u64,
    bg_active: Vec<bool>,
    finished: Vec<u32>,
    completed: u32,
    cfg_used: Vec<SchedCfg>,
    launches: Vec<u64>,
    halt_at: Option<u32>,
    /// First partition number of each layer, by partition size (see `server_of`).
    bases: HashMap<u64, Vec<u64>>,
    stats: Vec<IterationStats>,
    moved: Moved,
}

impl Job {
    pub fn new(cfg: JobCfg) -> Result<Job, String> {
        cfg.validate()?;
        let model = models::load(&cfg.model).map_err(|e| format!("model: {}", e.message))?;
        let (c, o) = cfg.sched.to_core()?;
        let n = cfg.workers;
        let layers = model.layers.len() as u32;
        let n_scheds = match cfg.pattern {
            Pattern::Ps => n as usize,
            Pattern::Ring => 1,
        };
        let mut job = Job {
            n,
            layers,
            batch: cfg.batch_size.unwrap_or(model.batch_size),
            sched: cfg.sched,
            now: 0.0,
            seq: 0,
            events: BinaryHeap::new(),
            net: Network::new(n as usize, cfg.host_gbps, (cfg.shaping == Shaping::Egress).then_some(cfg.port_gbps)),
            workers: (0..n)
                .map(|_| Worker {
                    iteration: 0,
                    phase: Phase::Blocked(0),
                    updated: vec![-1; layers as usize],
                    awaiting: vec![0; layers as usize],
                })
                .collect(),
            scheds: (0..n_scheds)
                .map(|_| Sched { s: Scheduler::new(c, o).expect("validated"), iteration: -1, launching: false })
                .collect(),
            ps_parts: HashMap::new(),
            pushes_in: HashMap::new(),
            server_free: vec![0.0; n as usize],
            ring_ready: HashMap::new(),
            rings: HashMap::new(),
            next_ring: 0,
            bg_active: vec![false; cfg.background.len()],
            finished: Vec::new(),
            completed: 0,
            cfg_used: Vec::new(),
            launches: Vec::new(),
            halt_at: None,
            bases: HashMap::new(),
            stats: Vec::new(),
            moved: Moved { pushed: vec![0; n as usize], pulled: vec![0; n as usize], reduced: 0 },
            model,
            cfg,
        };
        job.iteration_starts(0);
        for w in 0..n {
            job.try_forward(w, 0);
        }
        Ok(job)
    }

    /// The scheduler configuration for iterations whose gradients are not posted yet.
    pub fn set_sched(&mut self, sched: SchedCfg) -> Result<(), String> {
        sched.to_core().map_err(|e| format!("sched: {e}"))?;
        self.sched = sched;
        Ok(())
    }

    pub fn sched(&self) -> SchedCfg {
        self.sched
    }

    /// Iterations completed so far.
    pub fn completed(&self) -> u32 {
        self.completed
    }

    pub fn now_s(&self) -> f64 {
        self.now
    }

    pub fn config(&self) -> &JobCfg {
        &self.cfg
    }

    /// Run until `iterations` more iterations have completed; returns their stats.
    pub fn run(&mut self, iterations: u32) -> Result<&[IterationStats], String> {
        let from = self.stats.len();
        let target = self.completed + iterations;
        while self.completed < target {
            if !self.step() {
                return Err(format!("the job stalled at iteration {} (t = {} s)", self.completed, self.now));
            }
        }
        Ok(&self.stats[from..])
    }

    /// Start no further iteration and let every pending transfer finish.
    pub fn drain(&mut self) {
        self.halt_at = Some(self.completed);
        for w in 0..self.n {
            if let Phase::Blocked(_) = self.workers[w as usize].phase {
                self.workers[w as usize].phase = Phase::Halted;
            }
        }
        while self.step() {}
    }

    pub fn stats(&self) -> &[IterationStats] {
        &self.stats
    }

    pub fn moved(&self) -> &Moved {
        &self.moved
    }

    /// Every scheduler idle, every worker's update of every layer in.
    pub fn settled(&self) -> bool {
        self.scheds.iter().all(|s| s.s.is_idle())
            && self.workers.iter().all(|w| w.awaiting.iter().all(|&a| a == 0))
            && self.ps_parts.is_empty()
            && self.pushes_in.is_empty()
            && self.rings.is_empty()
            && !self.net.busy()
    }

    /// Advance to the next event or flow completion; false when nothing is left to do.
    fn step(&mut self) -> bool {
        let tf = self.net.next_finish().map(|d| self.now + d);
        let te = self.events.peek().map(|e| e.t);
        let t = match (tf, te) {
            (None, None) => return false,
            (Some(a), None) | (None, Some(a)) => a,
            (Some(a), Some(b)) => a.min(b),
        };
        let done = self.net.advance((t - self.now).max(0.0));
        self.now = self.now.max(t);
        for tag in done {
            self.flow_done(tag);
        }
        while self.events.peek().is_some_and(|e| e.t <= self.now) {
            let e = self.events.pop().expect("peeked");
            match e.ev {
                Ev::Compute(w) => self.computed(w),
                Ev::Launched(s, p) => self.launched(s, p),
                Ev::Acked(w, id) => {
                    self.scheds[w as usize].s.complete(id).expect("in flight");
                    self.pump(w as usize);
                }
                Ev::RingStep(id) => self.ring_step(id),
                Ev::Served(tag) => self.served(tag),
            }
        }
        true
    }

    fn at(&mut self, dt: f64, ev: Ev) {
        self.seq += 1;
        self.events.push(Timed { t: self.now + dt, seq: self.seq, ev });
    }

    /// How much slower worker `w` computes in iteration `k`: its slowdowns times the compute
    /// factor of every other job on its GPU then.
    fn slowdown(&self, w: u32, k: u32) -> f64 {
        let own: f64 = self
            .cfg
            .slowdowns
            .iter()
            .filter(|s| s.worker == w && s.from_iteration <= k && s.to_iteration.is_none_or(|e| k < e))
            .map(|s| s.factor)
            .product();
        let shared: f64 = self
            .cfg
            .background
            .iter()
            .filter(|b| b.join_iteration <= k && b.leave_iteration.is_none_or(|e| k < e))
            .filter(|b| b.workers.as_ref().is_none_or(|ws| ws.contains(&w)))
            .map(|b| b.compute_factor)
            .product();
        own * shared
    }

    fn compute(&mut self, w: u32, seconds: f64) {
        let f = self.slowdown(w, self.workers[w as usize].iteration);
        self.at(seconds * f, Ev::Compute(w));
    }

    fn try_forward(&mut self, w: u32, layer: u32) {
        let wk = &mut self.workers[w as usize];
        if self.halt_at.is_some_and(|h| wk.iteration >= h) {
            wk.phase = Phase::Halted;
            return;
        }
        if wk.updated[layer as usize] + 1 >= wk.iteration as i64 {
            wk.phase = Phase::Forward(layer);
            let t = self.model.layers[layer as usize].fwd_time_s;
            self.compute(w, t);
        } else {
            wk.phase = Phase::Blocked(layer);
        }
    }

    fn computed(&mut self, w: u32) {
        let last = self.layers - 1;
        match self.workers[w as usize].phase {
            Phase::Forward(i) if i < last => self.try_forward(w, i + 1),
            Phase::Forward(_) => self.backward(w, last),
            Phase::Backward(i) => {
                self.post(w, i);
                if i > 0 {
                    self.backward(w, i - 1);
                } else {
                    self.finished_backward(w);
                    self.workers[w as usize].iteration += 1;
                    self.try_forward(w, 0);
                }
            }
            Phase::Blocked(_) | Phase::Halted => unreachable!("no compute is scheduled while {w} waits"),
        }
    }

    fn backward(&mut self, w: u32, layer: u32) {
        self.workers[w as usize].phase = Phase::Backward(layer);
        let t = self.model.layers[layer as usize].bwd_time_s;
        self.compute(w, t);
    }

    /// Worker `w` has layer `layer`'s gradient of its current iteration.
    fn post(&mut self, w: u32, layer: u32) {
        let k = self.workers[w as usize].iteration;
        let bytes = self.model.layers[layer as usize].bytes;
        if bytes == 0 {
            self.updated(w, layer, k);
            return;
        }
        self.workers[w as usize].awaiting[layer as usize] = bytes;
        let tensor = k as u64 * self.layers as u64 + layer as u64;
        let s = match self.cfg.pattern {
            Pattern::Ps => w as usize,
            Pattern::Ring => {
                let ready = self.ring_ready.entry(tensor).or_insert(0);
                *ready += 1;
                if *ready < self.n {
                    return;
                }
                self.ring_ready.remove(&tensor);
                0
            }
        };
        self.configure_for(s, k);
        self.scheds[s].s.post(tensor, layer, bytes).expect("bytes > 0");
        self.pump(s);
    }

    /// The first post of iteration `k` to scheduler `s` applies the configuration in force.
    fn configure_for(&mut self, s: usize, k: u32) {
        if self.cfg_used.len() <= k as usize {
            self.cfg_used.push(self.sched);
        }
        let sc = &mut self.scheds[s];
        if sc.iteration >= k as i64 {
            return;
        }
        sc.iteration = k as i64;
        let (c, o) = self.sched.to_core().expect("validated by set_sched");
        if o != sc.s.order() && sc.s.is_idle() {
            sc.s = Scheduler::new(c, o).expect("validated");
        } else {
            sc.s.reconfigure(c).expect("validated");
        }
    }

    /// Start the next partition if the window admits one and the thread is free.
    fn pump(&mut self, s: usize) {
        if self.scheds[s].launching {
            return;
        }
        if let Some(p) = self.scheds[s].s.poll_start() {
            self.scheds[s].launching = true;
            let k = (p.tensor / self.layers as u64) as usize;
            if self.launches.len() <= k {
                self.launches.resize(k + 1, 0);
            }
            self.launches[k] += 1;
            self.at(self.cfg.partition_overhead_us * 1e-6, Ev::Launched(s, p));
        }
    }

    fn launched(&mut self, s: usize, p: Partition) {
        self.scheds[s].launching = false;
        match self.cfg.pattern {
            Pattern::Ps => self.push(s as u32, p),
            Pattern::Ring => self.ring_start(p),
        }
        self.pump(s);
    }

    fn push(&mut self, w: u32, p: Partition) {
        let (n, split) = (self.n, self.cfg.ps_split_bytes);
        let pieces: Vec<(u32, u64)> = collective::ps_shards(p.len, 1, n, split, || self.server_of(&p))
            .into_iter()
            .map(|(server, r)| (server, r.end - r.start))
            .collect();
        self.ps_parts.insert((w, p.tensor, p.offset), (p.id, pieces.len() as u32));
        for (server, bytes) in pieces {
            let tag = Tag::Push { worker: w, server, tensor: p.tensor, offset: p.offset, bytes };
            if server == w {
                self.flow_done(tag);
            } else {
                self.net.add(tag, [Some(self.net.up(w)), Some(self.net.down(server))], bytes as f64);
            }
        }
    }

    /// A partition's PS server when it is not striped: partitions are numbered in forward
    /// order over the whole model with the iteration's `S_p`, and dealt round-robin over the
    /// servers, so every worker sends the same partition to the same server and each server
    /// gets an even share (as ps-lite's even key ranges do). Hashing instead of dealing
    /// left servers idle while others queued and made the speed jump by ±15 % between
    /// neighbouring `S_p`.
    fn server_of(&mut self, p: &Partition) -> u32 {
        let k = (p.tensor / self.layers as u64) as usize;
        let size = self.cfg_used.get(k).and_then(|c| c.partition_bytes).unwrap_or(u64::MAX);
        let model = &self.model;
        let base = self.bases.entry(size).or_insert_with(|| {
            let mut acc = 0;
            model
                .layers
                .iter()
                .map(|l| {
                    let b = acc;
                    acc += l.bytes.div_ceil(size).max(1);
                    b
                })
                .collect()
        });
        ((base[p.layer as usize] + p.offset / size) % self.n as u64) as u32
    }

    fn ring_start(&mut self, p: Partition) {
        let id = self.next_ring;
        self.next_ring += 1;
        self.rings.insert(id, RingOp { id: p.id, tensor: p.tensor, len: p.len, step: 0, left: 0 });
        self.ring_step(id);
    }

    /// Start the ring's next step, or finish it after 2(N-1) steps.
    fn ring_step(&mut self, id: u64) {
        let n = self.n;
        let op = self.rings.get_mut(&id).expect("live ring");
        if op.step >= 2 * (n - 1) {
            let op = self.rings.remove(&id).expect("live ring");
            self.moved.reduced += op.len;
            self.scheds[0].s.complete(op.id).expect("in flight");
            let k = (op.tensor / self.layers as u64) as u32;
            let layer = (op.tensor % self.layers as u64) as u32;
            for w in 0..n {
                self.arrived(w, layer, k, op.len);
            }
            self.pump(0);
            return;
        }
        op.step += 1;
        op.left = n;
        let chunk = op.len as f64 / n as f64;
        for w in 0..n {
            let links = [Some(self.net.up(w)), Some(self.net.down((w + 1) % n))];
            self.net.add(Tag::Ring { ring: id }, links, chunk);
        }
    }

    fn flow_done(&mut self, tag: Tag) {
        match tag {
            Tag::Push { worker, server, tensor, offset, bytes } => {
                self.moved.pushed[worker as usize] += bytes;
                if self.cfg.ps_credit == PsCredit::Push {
                    self.piece_acked(worker, tensor, offset);
                }
                if self.cfg.ps_server_overhead_us > 0.0 {
                    // the server's one thread handles pushes in arrival order
                    let start = self.server_free[server as usize].max(self.now);
                    self.server_free[server as usize] = start + self.cfg.ps_server_overhead_us * 1e-6;
                    self.at(self.server_free[server as usize] - self.now, Ev::Served(tag));
                } else {
                    self.served(tag);
                }
            }
            Tag::Pull { worker, tensor, bytes, .. } => {
                self.moved.pulled[worker as usize] += bytes;
                let k = (tensor / self.layers as u64) as u32;
                let layer = (tensor % self.layers as u64) as u32;
                self.arrived(worker, layer, k, bytes);
            }
            Tag::Ring { ring } => {
                let op = self.rings.get_mut(&ring).expect("live ring");
                op.left -= 1;
                if op.left == 0 {
                    self.at(self.cfg.partition_latency_us * 1e-6, Ev::RingStep(ring));
                }
            }
            Tag::Background { .. } => unreachable!("background flows never finish"),
        }
    }

    /// The server has processed a push: once every worker's is in, the aggregate goes back.
    fn served(&mut self, tag: Tag) {
        if let Tag::Push { server, tensor, offset, bytes, .. } = tag {
            let key = (tensor, offset, server);
            let got = self.pushes_in.entry(key).or_insert(0);
            *got += 1;
            if *got < self.n {
                return;
            }
            self.pushes_in.remove(&key);
            if self.cfg.ps_credit == PsCredit::Aggregated {
                for v in 0..self.n {
                    self.piece_acked(v, tensor, offset);
                }
            }
            for v in 0..self.n {
                let pull = Tag::Pull { worker: v, server, tensor, offset, bytes };
                if v == server {
                    self.flow_done(pull);
                } else {
                    self.net.add(pull, [Some(self.net.up(server)), Some(self.net.down(v))], bytes as f64);
                }
            }
        }
    }

    /// One piece of worker `w`'s partition at (`tensor`, `offset`) is acknowledged: after
    /// the last piece, the credit returns a round trip later.
    fn piece_acked(&mut self, w: u32, tensor: u64, offset: u64) {
        let part = (w, tensor, offset);
        let entry = self.ps_parts.get_mut(&part).expect("a push of a started partition");
        entry.1 -= 1;
        if entry.1 == 0 {
            let (id, _) = self.ps_parts.remove(&part).expect("present");
            self.at(self.cfg.partition_latency_us * 1e-6, Ev::Acked(w, id));
        }
    }

    /// `bytes` of layer `layer`'s update of iteration `k` reached worker `w`.
    fn arrived(&mut self, w: u32, layer: u32, k: u32, bytes: u64) {
        let left = &mut self.workers[w as usize].awaiting[layer as usize];
        *left -= bytes;
        if *left == 0 {
            self.updated(w, layer, k);
        }
    }

    fn updated(&mut self, w: u32, layer: u32, k: u32) {
        let wk = &mut self.workers[w as usize];
        wk.updated[layer as usize] = k as i64;
        if wk.phase == Phase::Blocked(layer) {
            self.try_forward(w, layer);
        }
    }

    fn finished_backward(&mut self, w: u32) {
        let k = self.workers[w as usize].iteration as usize;
        if self.finished.len() <= k {
            self.finished.resize(k + 1, 0);
        }
        self.finished[k] += 1;
        if self.finished[k] == self.n {
            debug_assert_eq!(k as u32, self.completed, "iterations end in order");
            self.record(k as u32);
            self.completed = k as u32 + 1;
            self.iteration_starts(self.completed);
        }
    }

    fn record(&mut self, k: u32) {
        let start = self.stats.last().map_or(0.0, |s| s.end_s);
        let duration = self.now - start;
        let used = self.cfg_used.get(k as usize).copied().unwrap_or(self.sched);
        let (up, down): (Vec<f64>, Vec<f64>) = (0..self.n)
            .map(|w| {
                let g = |l| self.net.carried[l] * 8.0 / duration.max(1e-12) / 1e9;
                (g(self.net.up(w)), g(self.net.down(w)))
            })
            .unzip();
        let backward_ms = (0..self.layers as usize)
            .rev()
            .map(|l| (0..self.n).map(|w| self.model.layers[l].bwd_time_s * self.slowdown(w, k) * 1e3).collect())
            .collect();
        self.stats.push(IterationStats {
            iteration: k,
            end_s: self.now,
            duration_s: duration,
            samples_per_s: (self.n * self.batch) as f64 / duration,
            partition_bytes: used.partition_bytes,
            credit_bytes: used.partition_bytes.map(|p| used.credit_bytes.unwrap_or(p)),
            partitions: self.launches.get(k as usize).copied().unwrap_or(0),
            up_gbps: up,
            down_gbps: down,
            link_gbps: (0..self.n).map(|w| self.net.gbps(self.net.up(w))).collect(),
            avail_gbps: (0..self.n).map(|w| self.net.probe_gbps(self.net.up(w))).collect(),
            backward_ms,
        });
        self.net.carried.iter_mut().for_each(|c| *c = 0.0);
    }

    /// Conditions that change when iteration `k` starts: host rates, other jobs.
    fn iteration_starts(&mut self, k: u32) {
        let hosts = |list: &Option<Vec<u32>>, n: u32| list.clone().unwrap_or_else(|| (0..n).collect::<Vec<_>>());
        for r in self.cfg.rate_changes.clone().iter().filter(|r| r.iteration == k) {
            for h in hosts(&r.workers, self.n) {
                self.net.set_rate(h, r.gbps);
            }
        }
        for (j, b) in self.cfg.background.clone().iter().enumerate() {
            let active = b.join_iteration <= k && b.leave_iteration.is_none_or(|e| k < e);
            if active == self.bg_active[j] {
                continue;
            }
            self.bg_active[j] = active;
            if !active {
                self.net.remove_background(j as u32);
                continue;
            }
            for h in hosts(&b.workers, self.n) {
                for _ in 0..b.flows {
                    let tag = Tag::Background { job: j as u32 };
                    self.net.add(tag, [Some(self.net.up(h)), None], f64::INFINITY);
                    self.net.add(tag, [Some(self.net.down(h)), None], f64::INFINITY);
                }
            }
        }
    }
}
