//! Broadcast from one root down a k-ary tree, pipelined in chunks.
//!
//! Ranks are relabelled so the root is node 0 of a heap-ordered tree; each chunk flows
//! down independently, a node forwarding a chunk as soon as it holds it.

use super::gen::split_even;
use super::{CollectiveOptions, Op, Rank, Schedule, Transfer, TransferId};

/// # Panics
/// If `root >= world`, `arity` or `chunks` is 0, or `bytes` is not a multiple of `elem_bytes`.
pub fn broadcast(
    world: u32,
    root: Rank,
    bytes: u64,
    elem_bytes: u32,
    arity: u32,
    chunks: u32,
    opts: &CollectiveOptions,
) -> Schedule {
    assert!(root < world.max(1), "broadcast: root {root} is outside the world of {world}");
    assert!(arity > 0, "broadcast: arity must be positive");
    let rank_of = |node: u32| (node + root) % world;
    let mut transfers: Vec<Transfer> = Vec::new();
    for range in split_even(bytes, elem_bytes, chunks) {
        if range.is_empty() {
            continue;
        }
        // into[node]: the transfer that brought this chunk to `node` (none for the root).
        let mut into: Vec<Option<TransferId>> = vec![None; world as usize];
        for node in 1..world {
            let parent = (node - 1) / arity;
            let id = transfers.len() as TransferId;
            transfers.push(Transfer {
                src: rank_of(parent),
                dst: rank_of(node),
                range: range.clone(),
                op: Op::Copy,
                after: into[parent as usize].into_iter().collect(),
                loss_bound: opts.broadcast_loss_bound,
                priority: opts.priority,
            });
            into[node as usize] = Some(id);
        }
    }
    Schedule { name: "broadcast".into(), world, bytes, elem_bytes, transfers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{execute_in_memory, RankExec};

    #[test]
    fn every_rank_ends_with_the_roots_buffer() {
        for world in 1..=9 {
            for root in 0..world {
                for (arity, chunks) in [(1, 1), (2, 3), (4, 2)] {
                    let s = broadcast(world, root, 40, 4, arity, chunks, &CollectiveOptions::default());
                    s.validate().unwrap();
                    let mut bufs: Vec<Vec<f32>> =
                        (0..world).map(|r| (0..10).map(|i| (r * 100 + i) as f32).collect()).collect();
                    let want = bufs[root as usize].clone();
                    execute_in_memory(&s, &mut bufs);
                    assert!(bufs.iter().all(|b| *b == want), "world {world} root {root}");
                    // Every non-root rank receives each chunk exactly once.
                    for r in 0..world {
                        let n = s.receives_of(r).count();
                        assert_eq!(n, if r == root { 0 } else { chunks.min(10) as usize });
                        let _ = RankExec::new(&s, r);
                    }
                }
            }
        }
    }
}
