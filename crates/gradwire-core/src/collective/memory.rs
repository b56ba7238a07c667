//! A reference executor: runs a schedule on in-memory `f32` buffers, one transfer at a
//! time, in a topological order of the dependencies. Tests use it to check what a schedule
//! computes; it says nothing about timing.

use super::{Op, Schedule};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Runs every transfer of `schedule` on `buffers` (one per rank, one `f32` per element of
/// `elem_bytes` bytes, whatever `elem_bytes` is): a transfer reads the sender's range and
/// adds it to (`Reduce`) or writes it over (`Copy`) the receiver's range. Transfers run one
/// at a time, the lowest ready id first, each after all its dependencies.
///
/// # Panics
/// If the schedule is invalid, or `buffers` is not `world` buffers of
/// `bytes / elem_bytes` elements.
pub fn execute_in_memory(schedule: &Schedule, buffers: &mut [Vec<f32>]) {
    if let Err(e) = schedule.validate() {
        panic!("execute_in_memory: invalid schedule {}: {e}", schedule.name);
    }
    let e = schedule.elem_bytes as u64;
    let elems = (schedule.bytes / e) as usize;
    assert_eq!(buffers.len(), schedule.world as usize, "one buffer per rank");
    for (r, b) in buffers.iter().enumerate() {
        assert_eq!(b.len(), elems, "rank {r}'s buffer must hold {elems} elements");
    }
    let n = schedule.transfers.len();
    let mut indegree: Vec<usize> = schedule.transfers.iter().map(|t| t.after.len()).collect();
    let mut dependants = vec![Vec::new(); n];
    for (i, t) in schedule.transfers.iter().enumerate() {
        for &d in &t.after {
            dependants[d as usize].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..n).filter(|&i| indegree[i] == 0).map(Reverse).collect();
    let mut scratch = Vec::new();
    while let Some(Reverse(i)) = ready.pop() {
        let t = &schedule.transfers[i];
        let (lo, hi) = ((t.range.start / e) as usize, (t.range.end / e) as usize);
        scratch.clear();
        scratch.extend_from_slice(&buffers[t.src as usize][lo..hi]);
        let dst = &mut buffers[t.dst as usize][lo..hi];
        match t.op {
            Op::Reduce => dst.iter_mut().zip(&scratch).for_each(|(d, s)| *d += s),
            Op::Copy => dst.copy_from_slice(&scratch),
        }
        for &j in &dependants[i] {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(Reverse(j));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Transfer;

    #[test]
    fn reduce_adds_and_copy_overwrites_in_dependency_order() {
        let t = |src, dst, range, op, after| Transfer { src, dst, range, op, after, loss_bound: 0.0, priority: 1 };
        // transfer 0 (listed first) must run after transfer 1
        let s = Schedule {
            name: "x".into(),
            world: 2,
            bytes: 8,
            elem_bytes: 4,
            transfers: vec![t(1, 0, 0..8, Op::Copy, vec![1]), t(0, 1, 4..8, Op::Reduce, vec![])],
        };
        let mut b = vec![vec![1.0, 2.0], vec![10.0, 20.0]];
        execute_in_memory(&s, &mut b);
        assert_eq!(b, vec![vec![10.0, 22.0], vec![10.0, 22.0]]);
    }
}
