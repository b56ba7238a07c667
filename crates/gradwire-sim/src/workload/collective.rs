//! `kind = "collective"`: an allreduce schedule from `gradwire_core::collective` (ring,
//! tree, RAT, PS) run as flows — the same schedules the socket runtime executes.
//!
//! Rank `i` runs on host `i` (racks fill in order). Every transfer becomes one flow of its
//! byte count; a transfer with dependencies waits on a barrier of its own fed by them.
//! Copies (broadcast / all-gather / pull) are flagged as pulls, so loss-tolerant transports
//! give them `transport.pull_loss_bound` (LTP: fully reliable) and reductions
//! `transport.loss_bound`. With `iterations > 1`, a rank starts iteration k+1 only when all
//! of its transfers of iteration k are done.

use super::Workload;
use crate::scenario::{Scenario, ScenarioError, TopologyKind, WorkloadKind};
use crate::topology::Topology;
use gradwire_core::collective::{
    self, Algorithm, CollectiveOptions, Layout, Op, PsLayout, RackMap, Rank, Schedule, TransferId,
};
use gradwire_core::time::Time;
use gradwire_core::transport::ConfigError;

/// Refuse schedules that would not fit in memory comfortably.
const MAX_FLOWS: u64 = 4_000_000;

/// Workers (ranks that contribute): `workload.workers`, 0 meaning every host left after
/// dedicated PS servers.
fn workers(s: &Scenario) -> u32 {
    let w = &s.workload;
    match w.workers {
        0 => s.host_count().saturating_sub(dedicated_servers(s)),
        n => n,
    }
}

fn dedicated_servers(s: &Scenario) -> u32 {
    let w = &s.workload;
    if w.algorithm == Some(Algorithm::Ps) && !w.colocated {
        w.servers
    } else {
        0
    }
}

/// Ranks of the job: the workers, then dedicated PS servers. Rank `i` is host `i`.
pub fn world(s: &Scenario) -> u32 {
    workers(s) + dedicated_servers(s)
}

/// For each rank, its rack (and, on a fat-tree, its pod): RAT's regions.
pub fn rack_map(s: &Scenario, topo: &Topology) -> RackMap {
    let hosts = 0..world(s);
    let racks: Vec<u32> = hosts.clone().map(|h| topo.rack_of(h)).collect();
    match s.topology.kind {
        TopologyKind::LeafSpine => RackMap::from_racks(racks),
        TopologyKind::FatTree => {
            let per_pod = s.topology.k * s.topology.k / 4;
            RackMap::new(vec![racks, hosts.map(|h| h / per_pod).collect()]).expect("fat-tree racks nest in pods")
        }
    }
}

/// The PS layout: colocated servers spread over the workers, or dedicated ones after them.
pub fn ps_layout(s: &Scenario) -> PsLayout {
    let (n, servers) = (workers(s), s.workload.servers);
    if s.workload.colocated {
        PsLayout::colocated(n, servers)
    } else {
        PsLayout { workers: (0..n).collect(), servers: (n..n + servers).collect() }
    }
}

/// The schedule a (validated) collective scenario runs, ranks numbered as hosts.
pub fn schedule(s: &Scenario, topo: &Topology) -> Schedule {
    let w = &s.workload;
    let opts = CollectiveOptions {
        reduce_loss_bound: s.transport.loss_bound,
        broadcast_loss_bound: s.transport.pull_loss_bound,
        priority: s.transport.priority.min(7),
    };
    let layout = Layout {
        rack_map: (w.algorithm == Some(Algorithm::Rat)).then(|| rack_map(s, topo)),
        ps: (w.algorithm == Some(Algorithm::Ps)).then(|| ps_layout(s)),
        ..layout(s)
    };
    collective::build(w.algorithm.expect("validated"), &layout, w.bytes, w.elem_bytes, &opts).expect("validated")
}

/// The job without its rack map and PS layout (which need the topology, or checks first).
fn layout(s: &Scenario) -> Layout {
    let w = &s.workload;
    Layout { tree_arity: w.tree_arity, pipeline_chunks: w.pipeline_chunks, ..Layout::new(world(s)) }
}

/// A core parameter's error under the scenario's key.
fn refuse(e: ConfigError) -> ScenarioError {
    ScenarioError::new(format!("workload.{}", e.field), e.message)
}

pub(crate) fn validate(s: &Scenario) -> Result<(), ScenarioError> {
    let w = &s.workload;
    debug_assert_eq!(w.kind, WorkloadKind::Collective);
    let Some(algorithm) = w.algorithm else {
        return Err(ScenarioError::new(
            "workload.algorithm",
            "must be set for kind = \"collective\": \"ring\", \"tree\", \"rat\" or \"ps\"",
        ));
    };
    collective::check_buffer(w.bytes, w.elem_bytes).map_err(refuse)?;
    if w.bytes == 0 {
        return Err(ScenarioError::new("workload.bytes", "must be greater than 0 (got 0)"));
    }
    if w.iterations == 0 {
        return Err(ScenarioError::new("workload.iterations", "must be greater than 0 (got 0)"));
    }
    let hosts = s.host_count();
    if algorithm == Algorithm::Ps && w.servers == 0 {
        return Err(ScenarioError::new("workload.servers", "must be greater than 0 for algorithm = \"ps\" (got 0)"));
    }
    if w.workers + dedicated_servers(s) > hosts {
        return Err(ScenarioError::new(
            "workload.workers",
            format!("{} ranks (one per host) but the topology has {hosts} hosts", w.workers + dedicated_servers(s)),
        ));
    }
    let n = workers(s);
    if n < 2 {
        return Err(ScenarioError::new("workload.workers", format!("a collective needs at least 2 workers (got {n})")));
    }
    let pairs = world(s) as u64 * (world(s) as u64 - 1);
    let flows = match algorithm {
        Algorithm::Ring | Algorithm::Rat => 2 * pairs,
        Algorithm::Tree => {
            layout(s).validate().map_err(refuse)?;
            2 * (world(s) as u64 - 1) * w.pipeline_chunks as u64
        }
        Algorithm::Ps => {
            if w.colocated && w.servers > n {
                return Err(ScenarioError::new(
                    "workload.servers",
                    format!("colocated servers ({}) cannot outnumber workers ({n})", w.servers),
                ));
            }
            2 * n as u64 * w.servers as u64
        }
    };
    if flows * w.iterations as u64 > MAX_FLOWS {
        return Err(ScenarioError::new(
            "workload.workers",
            format!(
                "about {} flows ({flows} per iteration): more than the {MAX_FLOWS} a run may have",
                flows * w.iterations as u64
            ),
        ));
    }
    Ok(())
}

/// Per rank: its transfers (sent or received) that none of its own sends waits for — when
/// they are all done, so is the rank's part of the collective.
fn rank_sinks(sch: &Schedule) -> Vec<Vec<TransferId>> {
    // awaited[i] = (by its sender, by its receiver): deps are transfers of the waiting
    // transfer's sender, so only the two ends of a transfer can wait for it
    let mut awaited = vec![(false, false); sch.transfers.len()];
    for t in &sch.transfers {
        for &d in &t.after {
            let dep = &sch.transfers[d as usize];
            let a = &mut awaited[d as usize];
            a.0 |= dep.src == t.src;
            a.1 |= dep.dst == t.src;
        }
    }
    let mut sinks = vec![Vec::new(); sch.world as usize];
    for (i, (t, &(by_src, by_dst))) in sch.transfers.iter().zip(&awaited).enumerate() {
        if !by_src {
            sinks[t.src as usize].push(i as TransferId);
        }
        if !by_dst {
            sinks[t.dst as usize].push(i as TransferId);
        }
    }
    sinks
}

pub(super) fn build(out: &mut Workload, s: &Scenario, topo: &Topology, start: Time) {
    let w = &s.workload;
    let sch = schedule(s, topo);
    let sinks = if w.iterations > 1 { rank_sinks(&sch) } else { Vec::new() };
    let n = sch.transfers.len() as u32;
    for k in 0..w.iterations {
        let base = out.flows.len() as u32;
        for t in &sch.transfers {
            let f = out.flow(t.src as Rank, t.dst as Rank, t.bytes(), if k == 0 { start } else { 0 });
            out.flows[f as usize].iteration = k;
            if t.op == Op::Copy {
                out.mark_pull(f);
            }
        }
        for (i, t) in sch.transfers.iter().enumerate() {
            let mut after: Vec<u32> = t.after.iter().map(|&d| base + d).collect();
            if k > 0 {
                after.extend(sinks[t.src as usize].iter().map(|&d| base - n + d));
            }
            if !after.is_empty() {
                out.barrier(&after, &[base + i as u32]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;

    const NET: &str = "[topology]\nleaves = 2\nhosts_per_leaf = 3\nspines = 1\nuplinks_per_leaf = 1\n";

    fn scenario(workload: &str) -> Result<Scenario, ScenarioError> {
        let runs = load(&format!("{NET}[workload]\nkind = \"collective\"\n{workload}"), &[])?;
        Ok(runs[0].scenario.clone())
    }

    fn built(workload: &str) -> (Schedule, Workload) {
        let s = scenario(workload).unwrap_or_else(|e| panic!("{e}"));
        let topo = Topology::build(&s.topology);
        let mut rng = <rand_xoshiro::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(1);
        (schedule(&s, &topo), super::super::build(&s, &topo, &mut rng).unwrap())
    }

    #[test]
    fn every_transfer_is_a_flow_and_every_dependency_a_barrier() {
        let (sch, wl) = built("algorithm = \"ring\"\nbytes = 6000\n");
        assert_eq!(sch.world, 6, "workers = 0: every host");
        assert_eq!(wl.flows.len(), sch.transfers.len());
        for (t, f) in sch.transfers.iter().zip(&wl.flows) {
            assert_eq!((t.src, t.dst, t.bytes(), f.pull), (f.src, f.dst, f.bytes, t.op == Op::Copy));
            match f.gate {
                None => assert!(t.after.is_empty()),
                Some(b) => {
                    let b = &wl.barriers[b as usize];
                    assert_eq!(b.waiting_for as usize, t.after.len());
                }
            }
        }
        let (sch, wl) = built("algorithm = \"rat\"\nbytes = 6000\nworkers = 4\n");
        assert_eq!(sch.world, 4);
        assert_eq!(sch.dependency_depth(), 4);
        assert_eq!(wl.barriers.len(), sch.transfers.iter().filter(|t| !t.after.is_empty()).count());
    }

    #[test]
    fn later_iterations_wait_for_the_sender_s_previous_iteration() {
        let (sch, wl) = built("algorithm = \"ps\"\nservers = 2\nbytes = 4000\niterations = 3\n");
        let n = sch.transfers.len();
        assert_eq!(wl.flows.len(), 3 * n);
        for f in &wl.flows[n..] {
            let b = &wl.barriers[f.gate.expect("every later flow is gated") as usize];
            assert!(b.waiting_for > 0);
        }
        // a push of iteration 1 waits for its worker's pulls of iteration 0
        let push = &wl.flows[n];
        let gate = push.gate.unwrap();
        let fed_by: Vec<usize> = (0..wl.flows.len()).filter(|&i| wl.feeds(i as u32).contains(&gate)).collect();
        assert!(fed_by.iter().all(|&i| i < n && wl.flows[i].iteration == 0));
        assert!(fed_by.iter().any(|&i| wl.flows[i].pull && wl.flows[i].dst == push.src));
    }

    #[test]
    fn fat_tree_racks_nest_in_pods() {
        let text = "[topology]\nkind = \"fat_tree\"\nk = 4\n[workload]\nkind = \"collective\"\nalgorithm = \"rat\"\nbytes = 64000\n";
        let s = &load(text, &[]).unwrap()[0].scenario;
        let topo = Topology::build(&s.topology);
        let map = rack_map(s, &topo);
        assert_eq!((map.world(), map.levels(), map.regions(0), map.regions(1)), (16, 2, 8, 4));
        let sch = schedule(s, &topo);
        assert_eq!(sch.dependency_depth(), 6, "rack, pod, root: 2 (2 + 1)");
        assert_eq!(sch.bytes_between_regions(|a, b| map.same_region(1, a, b)), 2 * 3 * 64000);
    }

    #[test]
    fn dedicated_servers_follow_the_workers() {
        let (sch, _) = built("algorithm = \"ps\"\nservers = 2\ncolocated = false\nworkers = 4\nbytes = 800\n");
        assert_eq!(sch.world, 6);
        assert!(sch.transfers.iter().all(|t| t.op != Op::Reduce || t.dst >= 4));
    }

    #[test]
    fn bad_collectives_name_the_key() {
        let key = |w: &str| scenario(w).and_then(|s| s.validate()).unwrap_err().key;
        assert_eq!(key("bytes = 8\n"), "workload.algorithm");
        assert_eq!(key("algorithm = \"ring\"\n"), "workload.bytes");
        assert_eq!(key("algorithm = \"ring\"\nbytes = 10\n"), "workload.bytes");
        assert_eq!(key("algorithm = \"ring\"\nbytes = 8\nworkers = 7\n"), "workload.workers");
        assert_eq!(key("algorithm = \"ring\"\nbytes = 8\nworkers = 1\n"), "workload.workers");
        assert_eq!(key("algorithm = \"ps\"\nbytes = 8\n"), "workload.servers");
        assert_eq!(
            key("algorithm = \"ps\"\nbytes = 8\nservers = 3\ncolocated = false\nworkers = 4\n"),
            "workload.workers"
        );
        assert_eq!(key("algorithm = \"tree\"\nbytes = 8\ntree_arity = 0\n"), "workload.tree_arity");
        assert_eq!(key("algorithm = \"tree\"\nbytes = 8\npipeline_chunks = 0\n"), "workload.pipeline_chunks");
        assert_eq!(key("algorithm = \"ring\"\nbytes = 8\nelem_bytes = 0\n"), "workload.elem_bytes");
        assert!(scenario("algorithm = \"butterfly\"\nbytes = 8\n").is_err());
    }
}
