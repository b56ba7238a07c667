//! DNN training traffic: one iteration's gradient synchronization, with each layer's
//! transfers starting when backward propagation makes its gradient ready.
//!
//! - `ps` (dlcp.md §5.2.1): each tensor goes to a random server, tensors above
//!   `split_bytes` are split evenly over all servers (the core's `collective::ps_shards`); workers push, and a server pulls a
//!   tensor part back to every worker once all workers' pushes of it are in.
//! - `ring`: layers fused into buckets of at least `bucket_bytes` (in backward order, as
//!   DDP does), each bucket ring-allreduced by the core's `collective::ring`: reduce-scatter
//!   and all-gather, 2(N-1) steps; a worker's step waits for the chunk it receives in the
//!   previous step.

use super::{ps_placement, Workload};
use crate::models::ModelProfile;
use crate::scenario::{DnnPattern, Scenario};
use crate::topology::Topology;
use gradwire_core::collective::{self, CollectiveOptions};
use gradwire_core::time::{Time, SEC};
use rand::Rng;

/// A group of consecutive layers synchronized together.
struct Bucket {
    bytes: u64,
    /// When the bucket's last-computed (front-most) layer is ready, after backward starts.
    ready: Time,
    /// Front-most layer: the one the whole bucket's priority follows.
    front_layer: u32,
}

fn buckets(model: &ModelProfile, bucket_bytes: u64) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    let mut open: Option<Bucket> = None;
    for layer in model.layers.iter().rev() {
        let ready = (layer.ready_offset_s * SEC as f64).round() as Time;
        let b = open.get_or_insert(Bucket { bytes: 0, ready, front_layer: layer.index });
        b.bytes += layer.bytes;
        b.ready = b.ready.max(ready);
        b.front_layer = b.front_layer.min(layer.index);
        if b.bytes >= bucket_bytes.max(1) {
            out.extend(open.take());
        }
    }
    out.extend(open);
    out
}

pub fn build(
    out: &mut Workload,
    s: &Scenario,
    topo: &Topology,
    model: &ModelProfile,
    start: Time,
    rng: &mut impl Rng,
    keep: &dyn Fn(u32, bool, usize) -> bool,
) {
    let w = &s.workload;
    let (workers, servers) = ps_placement(s, topo);
    let plan = Plan {
        layers: model.layers.len() as u32,
        buckets: buckets(model, w.bucket_bytes),
        forward: (model.forward_time_s * SEC as f64).round() as Time,
        compute: w.compute,
        start,
    };
    // flows of worker i that its iteration barrier gates, and flows that finish its iteration
    let mut done_prev: Vec<Vec<u32>> = Vec::new();
    for k in 0..w.iterations {
        let mut first: Vec<Vec<u32>> = vec![Vec::new(); workers.len()];
        let mut done: Vec<Vec<u32>> = vec![Vec::new(); workers.len()];
        match w.pattern {
            DnnPattern::Ps => plan.ps(out, k, &workers, &servers, w.split_bytes, rng, keep, &mut first, &mut done),
            DnnPattern::Ring => plan.ring(out, k, &workers, &mut first, &mut done),
        }
        if k > 0 {
            // worker i computes iteration k once it holds all of iteration k-1's results
            for (i, gated) in first.iter().enumerate() {
                out.barrier(&done_prev[i], gated);
            }
        }
        done_prev = done;
    }
}

struct Plan {
    layers: u32,
    buckets: Vec<Bucket>,
    forward: Time,
    compute: bool,
    start: Time,
}

impl Plan {
    /// A flow of bucket `b` in iteration `k`: iteration 0 starts at an absolute time, later
    /// ones a compute delay after their worker's iteration barrier releases them.
    #[allow(clippy::too_many_arguments)] // one flow's every coordinate; a struct would only rename them
    fn flow(&self, out: &mut Workload, k: u32, b: &Bucket, src: u32, dst: u32, bytes: u64, first: bool) -> u32 {
        let ready = if self.compute { b.ready } else { 0 };
        let (start, delay) = match (k, first) {
            (0, _) => (self.start + ready, 0),
            (_, true) => (0, self.forward + ready),
            (_, false) => (0, 0),
        };
        let f = out.tagged_flow(src, dst, bytes, start, b.front_layer, self.layers);
        let spec = &mut out.flows[f as usize];
        spec.iteration = k;
        spec.gate_delay = delay;
        f
    }

    #[allow(clippy::too_many_arguments)]
    fn ps(
        &self,
        out: &mut Workload,
        k: u32,
        workers: &[u32],
        servers: &[u32],
        split_bytes: u64,
        rng: &mut impl Rng,
        keep: &dyn Fn(u32, bool, usize) -> bool,
        first: &mut [Vec<u32>],
        done: &mut [Vec<u32>],
    ) {
        let n = servers.len() as u32;
        for b in &self.buckets {
            let shards = collective::ps_shards(b.bytes, 1, n, split_bytes, || rng.gen_range(0..servers.len()) as u32);
            let spread = shards.len() > 1;
            for (j, shard) in shards {
                let (srv, bytes) = (servers[j as usize], shard.end - shard.start);
                let mut pushes = Vec::new();
                let mut pulls = Vec::new();
                for (i, &wk) in workers.iter().enumerate().filter(|(_, &wk)| wk != srv) {
                    if !keep(srv, spread, i) {
                        out.leave_out(2); // its push and its pull
                        continue;
                    }
                    let push = self.flow(out, k, b, wk, srv, bytes, true);
                    out.mark_spread(push, spread);
                    first[i].push(push);
                    pushes.push(push);
                    let pull = self.flow(out, k, b, srv, wk, bytes, false);
                    out.mark_spread(pull, spread);
                    out.mark_pull(pull);
                    done[i].push(pull);
                    pulls.push(pull);
                }
                if !pushes.is_empty() {
                    out.barrier(&pushes, &pulls);
                }
            }
        }
    }

    /// Each bucket ring-allreduced by the core's generator (`collective::ring`, the schedule
    /// the runtime executes), every chunk `bytes / n` rounded up (a bucket's elements are
    /// not known here): rank `i` is worker `i`, a step waits for the chunk received in the
    /// step before.
    fn ring(&self, out: &mut Workload, k: u32, workers: &[u32], first: &mut [Vec<u32>], done: &mut [Vec<u32>]) {
        let n = workers.len();
        if n < 2 {
            return;
        }
        for b in &self.buckets {
            let chunk = b.bytes.div_ceil(n as u64);
            let schedule = collective::ring(n as u32, chunk * n as u64, 1, &CollectiveOptions::default());
            // flows[t]: transfer t's flow; last[i]: the last flow into worker i
            let mut flows: Vec<u32> = Vec::with_capacity(schedule.transfers.len());
            let mut last: Vec<Option<u32>> = vec![None; n];
            for t in &schedule.transfers {
                let (src, dst) = (t.src as usize, t.dst as usize);
                let f = self.flow(out, k, b, workers[src], workers[dst], t.bytes(), t.after.is_empty());
                match t.after[..] {
                    [] => first[src].push(f),
                    [p] => out.barrier(&[flows[p as usize]], &[f]),
                    _ => unreachable!("a ring step waits for one chunk"),
                }
                flows.push(f);
                last[dst] = Some(f);
            }
            for (i, l) in last.into_iter().enumerate() {
                done[i].extend(l);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

    #[test]
    fn iterations_chain_through_worker_barriers() {
        use crate::scenario::load;
        let text = "[topology]\nleaves = 2\nhosts_per_leaf = 4\nspines = 2\nuplinks_per_leaf = 2\n\
                    [workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\nworkers = 4\nservers = 1\niterations = 3\n";
        let s = &load(text, &[]).unwrap()[0].scenario;
        let topo = Topology::build(&s.topology);
        let mut rng = <rand_xoshiro::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(1);
        let wl = crate::workload::build(s, &topo, &mut rng).unwrap();
        let per_iter = wl.flows.iter().filter(|f| f.iteration == 0).count();
        assert_eq!(wl.flows.len(), 3 * per_iter);
        // later iterations' pushes are gated and wait forward + backward-readiness after release
        let pushes_1: Vec<_> = wl.flows.iter().filter(|f| f.iteration == 1 && !f.pull).collect();
        assert!(pushes_1.iter().all(|f| f.gate.is_some() && f.gate_delay > 0));
        // 3 remote workers x 41 layers, each pushed and pulled, per iteration
        assert_eq!(per_iter, 2 * 3 * 41);
    }

    #[test]
    fn buckets_cover_the_model_in_backward_order() {
        let m = models::load("resnet50").unwrap();
        let per_layer = buckets(&m, 0);
        assert_eq!(per_layer.len(), m.layers.len());
        assert_eq!(per_layer[0].front_layer, m.layers.len() as u32 - 1, "last layer first");
        let fused = buckets(&m, 25 << 20);
        assert!(fused.len() < 8, "{}", fused.len());
        assert_eq!(fused.iter().map(|b| b.bytes).sum::<u64>(), m.total_bytes);
        assert!(fused.windows(2).all(|w| w[0].ready <= w[1].ready));
    }
}
