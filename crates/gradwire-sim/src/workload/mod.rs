//! Workloads expand into flows and barriers. A barrier counts finished flows and starts
//! its dependants when the count reaches zero: a PS server's pulls wait on one barrier
//! fed by every push to it, instead of one edge per (push, pull) pair.

pub mod collective;
pub mod dnn;

use crate::models;
use crate::scenario::{Scenario, ScenarioError, WorkloadKind};
use crate::topology::Topology;
use gradwire_core::collective::{ps_shards, split_even};
use gradwire_core::time::{from_us, Time};
use rand::Rng;

/// One flow of a workload. 56 bytes: a datacenter-scale workload has millions, kept for
/// the whole run (the barriers a flow feeds are in [`Workload::feeds`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    /// Earliest start; a flow gated by a barrier starts at max(start, barrier release).
    pub start: Time,
    /// A gated flow starts this long after its barrier releases it (compute time).
    pub gate_delay: Time,
    /// Barrier this flow waits for, if any.
    pub gate: Option<u32>,
    /// DNN layer the data belongs to (0 = input side) and the model's layer count, for
    /// layer-priority tagging; (0, 1) for non-DNN traffic.
    pub layer: u32,
    pub layers: u32,
    /// Training iteration the flow belongs to (0 outside DNN workloads).
    pub iteration: u32,
    /// A PS pull (server to worker): loss-tolerant transports use the pull bound.
    pub pull: bool,
    /// A PS push or pull of one shard of a tensor split over every server (its worker
    /// sends the other shards at the same time; `crate::fast` weighs it so).
    pub spread: bool,
}

const _: () = assert!(std::mem::size_of::<FlowSpec>() == 56);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Barrier {
    pub waiting_for: u32,
    pub releases: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    pub flows: Vec<FlowSpec>,
    pub barriers: Vec<Barrier>,
    /// ddlgen: the burst flows (PCN announces each before it starts).
    pub bursts: Vec<u32>,
    /// The barriers each flow's completion counts toward, flow by flow (CSR): flow f's are
    /// `feed_list[feed_start[f]..feed_start[f + 1]]`, in the order they were added.
    feed_start: Vec<u32>,
    feed_list: Vec<u32>,
    /// While building: (flow, barrier) in the order added; `index_feeds` files them.
    edges: Vec<(u32, u32)>,
    /// Thinned by [`build_for`]: flow `i` is the whole job's flow `job_ids[i]`; empty when
    /// no flow was left out (each flow is its own).
    job_ids: Vec<u32>,
    /// While building: the whole job's flows left out so far.
    left_out: u32,
}

impl Workload {
    /// Barriers flow `f`'s completion counts toward.
    #[inline]
    pub fn feeds(&self, f: u32) -> &[u32] {
        match (self.feed_start.get(f as usize), self.feed_start.get(f as usize + 1)) {
            (Some(&a), Some(&b)) => &self.feed_list[a as usize..b as usize],
            _ => &[],
        }
    }

    /// File the edges `barrier` recorded by flow (a stable counting sort, so each flow's
    /// barriers keep the order they were added in), and drop the building slack.
    fn index_feeds(&mut self) {
        let n = self.flows.len();
        let mut start = vec![0u32; n + 1];
        for &(f, _) in &self.edges {
            start[f as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut next = start.clone();
        let mut list = vec![0u32; self.edges.len()];
        for &(f, b) in &self.edges {
            list[next[f as usize] as usize] = b;
            next[f as usize] += 1;
        }
        self.edges = Vec::new();
        self.feed_start = start;
        self.feed_list = list;
        self.flows.shrink_to_fit();
        self.job_ids.shrink_to_fit();
    }

    /// The whole job's index of flow `f` (itself unless the workload was thinned).
    #[inline]
    pub fn job_id(&self, f: u32) -> u32 {
        self.job_ids.get(f as usize).copied().unwrap_or(f)
    }

    /// The next `n` flows of the whole job are left out (`build_for`).
    fn leave_out(&mut self, n: u32) {
        if n > 0 && self.left_out == 0 {
            self.job_ids = (0..self.flows.len() as u32).collect();
        }
        self.left_out += n;
    }

    fn flow(&mut self, src: u32, dst: u32, bytes: u64, start: Time) -> u32 {
        self.tagged_flow(src, dst, bytes, start, 0, 1)
    }

    fn tagged_flow(&mut self, src: u32, dst: u32, bytes: u64, start: Time, layer: u32, layers: u32) -> u32 {
        if self.left_out > 0 {
            self.job_ids.push(self.flows.len() as u32 + self.left_out);
        }
        self.flows.push(FlowSpec {
            src,
            dst,
            bytes,
            start,
            gate_delay: 0,
            gate: None,
            layer,
            layers,
            iteration: 0,
            pull: false,
            spread: false,
        });
        (self.flows.len() - 1) as u32
    }

    fn mark_pull(&mut self, f: u32) -> u32 {
        self.flows[f as usize].pull = true;
        f
    }

    fn mark_spread(&mut self, f: u32, spread: bool) -> u32 {
        self.flows[f as usize].spread = spread;
        f
    }

    /// A barrier released when every flow in `after` finishes, gating every flow in `then`.
    fn barrier(&mut self, after: &[u32], then: &[u32]) {
        let id = self.barriers.len() as u32;
        self.edges.extend(after.iter().map(|&f| (f, id)));
        for &f in then {
            self.flows[f as usize].gate = Some(id);
        }
        self.barriers.push(Barrier { waiting_for: after.len() as u32, releases: then.to_vec() });
    }
}

/// PS placement: worker `i` (and the rest of the round-robin order) is spread over racks.
pub fn round_robin_host(topo: &Topology, i: u32) -> u32 {
    (i % topo.racks) * topo.hosts_per_rack + i / topo.racks
}

pub fn build(s: &Scenario, topo: &Topology, rng: &mut impl Rng) -> Result<Workload, ScenarioError> {
    build_for(s, topo, rng, &|_, _, _| true)
}

/// The workload with only the PS flows `keep` accepts (`crate::fast`), asked with each
/// shard's server, whether its tensor is split over every server, and the worker's index
/// in the job's worker list: their flows, in the
/// order, and with the random draws, of the whole job's. A job thinned after it was built
/// would first hold every flow: 42 GB at 10 000 hosts.
pub fn build_for(
    s: &Scenario,
    topo: &Topology,
    rng: &mut impl Rng,
    keep: &dyn Fn(u32, bool, usize) -> bool,
) -> Result<Workload, ScenarioError> {
    let w = &s.workload;
    let start = from_us(w.start_us);
    let n = topo.hosts;
    let mut out = Workload::default();
    match w.kind {
        WorkloadKind::Flows => {
            for f in &w.flows {
                out.flow(f.src, f.dst, f.bytes, from_us(f.start_us));
            }
            for (i, f) in w.flows.iter().enumerate() {
                if !f.after.is_empty() {
                    out.barrier(&f.after, &[i as u32]);
                }
            }
        }
        WorkloadKind::Incast => {
            let senders: Vec<u32> = match (&w.sender_list, w.senders) {
                (Some(list), _) => list.clone(),
                (None, Some(c)) => (1..=c).map(|k| (w.receiver + k) % n).collect(),
                (None, None) => Vec::new(),
            };
            for src in senders {
                out.flow(src, w.receiver, w.flow_bytes, start);
            }
        }
        WorkloadKind::Permutation => {
            // Sattolo's shuffle: a single cycle, so nobody sends to itself.
            let mut perm: Vec<u32> = (0..n).collect();
            for i in (1..n as usize).rev() {
                let j = rng.gen_range(0..i);
                perm.swap(i, j);
            }
            for (src, &dst) in perm.iter().enumerate() {
                out.flow(src as u32, dst, w.flow_bytes, start);
            }
        }
        WorkloadKind::AllToAll => {
            let hosts: Vec<u32> = w.hosts.clone().unwrap_or_else(|| (0..n).collect());
            for &a in &hosts {
                for &b in &hosts {
                    if a != b {
                        out.flow(a, b, w.flow_bytes, start);
                    }
                }
            }
        }
        WorkloadKind::Ps => ps(&mut out, s, topo, start, keep),
        WorkloadKind::Dnn => dnn::build(&mut out, s, topo, &models::load(&w.model)?, start, rng, keep),
        WorkloadKind::Collective => collective::build(&mut out, s, topo, start),
        WorkloadKind::Ddlgen => ddlgen(&mut out, s, start, rng),
    }
    if w.start_jitter_us > 0.0 {
        jitter_starts(&mut out, w.start_jitter_us, s.seed);
    }
    out.index_feeds();
    Ok(out)
}

/// Delay every flow that no barrier gates by a uniform draw in [0, `jitter_us`), from a
/// generator of its own (seeded by the scenario's seed), so that a run without jitter
/// draws nothing and one with it leaves every other draw of the run as it was.
fn jitter_starts(out: &mut Workload, jitter_us: f64, seed: u64) {
    use rand::SeedableRng;
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5741_5254_4a49_5454);
    for f in out.flows.iter_mut().filter(|f| f.gate.is_none()) {
        f.start += from_us(rng.gen_range(0.0..jitter_us));
    }
}

/// pcn.md §4's DDLgen: iteration k's bursts start `idle_us` (plus a seeded jitter below
/// `idle_jitter_us`) after all of iteration k-1's have arrived; the background flows (`flows`, flow ids after the bursts) start at their
/// own times. Each burst is one flow, iteration k in its `iteration` column.
fn ddlgen(out: &mut Workload, s: &Scenario, start: Time, rng: &mut impl Rng) {
    let w = &s.workload;
    let workers = w.sender_list.as_deref().unwrap_or_default();
    let mut prev: Vec<u32> = Vec::new();
    for k in 0..w.iterations {
        let burst: Vec<u32> = workers.iter().map(|&h| out.flow(h, w.receiver, w.flow_bytes, start)).collect();
        let jitter = if w.idle_jitter_us > 0.0 { rng.gen_range(0.0..w.idle_jitter_us) } else { 0.0 };
        for &f in &burst {
            out.flows[f as usize].iteration = k;
            out.flows[f as usize].gate_delay = from_us(w.idle_us + jitter);
        }
        if !prev.is_empty() {
            out.barrier(&prev, &burst);
        }
        out.bursts.extend(&burst);
        prev = burst;
    }
    for f in &w.flows {
        out.flow(f.src, f.dst, f.bytes, from_us(f.start_us));
    }
}

/// Hosts of the PS workers and servers: workers round-robin over racks; a colocated server
/// `j` on worker `j * workers / servers`, otherwise on the next hosts in the same order.
pub fn ps_placement(s: &Scenario, topo: &Topology) -> (Vec<u32>, Vec<u32>) {
    let w = &s.workload;
    let workers: Vec<u32> = (0..w.workers).map(|i| round_robin_host(topo, i)).collect();
    let servers = (0..w.servers)
        .map(|j| {
            if w.colocated {
                workers[(j as u64 * w.workers as u64 / w.servers as u64) as usize]
            } else {
                round_robin_host(topo, w.workers + j)
            }
        })
        .collect();
    (workers, servers)
}

/// Workers push their part of each server's shard (the core's [`ps_shards`],
/// every tensor split) to it; a server that has every push sends its shard of `pull_bytes`
/// back to every worker. Local (same-host) parts skip the network.
fn ps(out: &mut Workload, s: &Scenario, topo: &Topology, start: Time, keep: &dyn Fn(u32, bool, usize) -> bool) {
    let w = &s.workload;
    let (workers, servers) = ps_placement(s, topo);
    let n = servers.len() as u32;
    let pull_shards = split_even(w.pull_bytes.unwrap_or(w.push_bytes), 1, n);
    let shards = ps_shards(w.push_bytes, 1, n, 0, || 0);
    let spread = shards.len() > 1;
    for (j, push) in shards {
        let (srv, pull) = (servers[j as usize], pull_shards[j as usize].end - pull_shards[j as usize].start);
        let others = || workers.iter().copied().enumerate().filter(move |&(_, wk)| wk != srv);
        let mut pushes = Vec::new();
        for (i, wk) in others() {
            if !keep(srv, spread, i) {
                out.leave_out(1);
                continue;
            }
            let f = out.flow(wk, srv, push.end - push.start, start);
            pushes.push(out.mark_spread(f, spread));
        }
        let mut pulls = Vec::new();
        for (i, wk) in others().filter(|_| pull > 0) {
            if !keep(srv, spread, i) {
                out.leave_out(1);
                continue;
            }
            let f = out.flow(srv, wk, pull, start);
            out.mark_spread(f, spread);
            pulls.push(out.mark_pull(f));
        }
        if !pushes.is_empty() {
            out.barrier(&pushes, &pulls);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::load;
    use crate::topology::Topology;
    use gradwire_core::time::from_us;
    use rand::SeedableRng;

    fn ps_flows(extra: &[&str]) -> Vec<super::FlowSpec> {
        let text = "[topology]\nleaves = 2\nhosts_per_leaf = 4\nspines = 2\nuplinks_per_leaf = 2\n\
                    [workload]\nkind = \"ps\"\nworkers = 8\nservers = 2\npush_bytes = 100000\nstart_us = 5.0\n";
        let sets: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let s = &load(text, &sets).unwrap()[0].scenario;
        let topo = Topology::build(&s.topology);
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(s.seed);
        super::build(s, &topo, &mut rng).unwrap().flows
    }

    #[test]
    fn start_jitter_delays_ungated_flows_only_within_its_bound_and_by_seed() {
        let plain = ps_flows(&[]);
        assert_eq!(plain, ps_flows(&["workload.start_jitter_us=0.0"]), "no jitter draws nothing");
        let jittered = ps_flows(&["workload.start_jitter_us=2.0"]);
        assert_eq!(jittered, ps_flows(&["workload.start_jitter_us=2.0"]), "deterministic for a seed");
        assert_ne!(jittered, ps_flows(&["workload.start_jitter_us=2.0", "seed=2"]));
        let mut moved = 0;
        for (p, j) in plain.iter().zip(&jittered) {
            if p.gate.is_some() {
                assert_eq!(p, j, "a pull waits for its barrier as before");
                continue;
            }
            assert!(j.start >= p.start && j.start < p.start + from_us(2.0), "{} -> {}", p.start, j.start);
            moved += (j.start != p.start) as usize;
            assert_eq!((p.src, p.dst, p.bytes), (j.src, j.dst, j.bytes));
        }
        assert!(moved > 10, "{moved} pushes moved");
        assert!(
            load("[workload]\nkind = \"incast\"\nflow_bytes = 1\nsenders = 1\nstart_jitter_us = -1.0\n", &[]).is_err()
        );
    }
}
