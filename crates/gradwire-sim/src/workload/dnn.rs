//! DNN training traffic: one iteration's gradient synchronization, with each layer's
//! transfers starting when backward propagation makes its gradient ready.
//!
//! - `ps` (dlcp.md §5.2.1): each tensor goes to a random server, tensors above
//!   `split_bytes` are split evenly over all servers; workers push, and a server pulls a
//!   tensor part back to every worker once all workers' pushes of it are in.
//! - `ring`: layers fused into buckets of at least `bucket_bytes` (in backward order, as
//!   DDP does), each bucket ring-allreduced (reduce-scatter + all-gather, 2(N-1) steps; a
//!   worker's step waits for the chunk it receives in the previous step).

use super::{round_robin_host, Workload};
use crate::models::ModelProfile;
use crate::scenario::{DnnPattern, Scenario};
use crate::topology::Topology;
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

pub fn build(out: &mut Workload, s: &Scenario, topo: &Topology, model: &ModelProfile, start: Time, rng: &mut impl Rng) {
    let w = &s.workload;
    let layers = model.layers.len() as u32;
    let workers: Vec<u32> = (0..w.workers).map(|i| round_robin_host(topo, i)).collect();
    let bucket_list = buckets(model, w.bucket_bytes);
    let ready_at = |b: &Bucket| start + if w.compute { b.ready } else { 0 };
    match w.pattern {
        DnnPattern::Ps => {
            let servers: Vec<u32> = (0..w.servers)
                .map(|j| {
                    if w.colocated {
                        workers[(j as u64 * w.workers as u64 / w.servers as u64) as usize]
                    } else {
                        round_robin_host(topo, w.workers + j)
                    }
                })
                .collect();
            for b in &bucket_list {
                let parts: Vec<(u32, u64)> = if b.bytes > w.split_bytes {
                    let n = servers.len() as u64;
                    servers.iter().enumerate().map(|(j, &srv)| (srv, b.bytes / n + ((j as u64) < b.bytes % n) as u64)).collect()
                } else {
                    vec![(servers[rng.gen_range(0..servers.len())], b.bytes)]
                };
                for (srv, bytes) in parts {
                    let remote = workers.iter().copied().filter(|&wk| wk != srv);
                    let pushes: Vec<u32> =
                        remote.clone().map(|wk| out.tagged_flow(wk, srv, bytes, ready_at(b), b.front_layer, layers)).collect();
                    let pulls: Vec<u32> =
                        remote.map(|wk| {
                            let f = out.tagged_flow(srv, wk, bytes, ready_at(b), b.front_layer, layers);
                            out.mark_pull(f)
                        }).collect();
                    out.barrier(&pushes, &pulls);
                }
            }
        }
        DnnPattern::Ring => {
            let n = workers.len();
            if n < 2 {
                return;
            }
            for b in &bucket_list {
                let chunk = b.bytes.div_ceil(n as u64);
                // prev[i]: the flow into worker i in the previous step
                let mut prev: Vec<Option<u32>> = vec![None; n];
                for _step in 0..2 * (n - 1) {
                    let cur: Vec<u32> = (0..n)
                        .map(|i| out.tagged_flow(workers[i], workers[(i + 1) % n], chunk, ready_at(b), b.front_layer, layers))
                        .collect();
                    for i in 0..n {
                        if let Some(p) = prev[i] {
                            out.barrier(&[p], &[cur[i]]);
                        }
                    }
                    for i in 0..n {
                        prev[(i + 1) % n] = Some(cur[i]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

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
