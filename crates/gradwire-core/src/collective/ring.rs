//! Ring allreduce (rat.md §2.3): reduce-scatter then all-gather around ranks `0 → 1 → … →
//! world-1 → 0`, the buffer cut into `world` chunks.
//!
//! Step `s` of reduce-scatter: rank `i` adds chunk `(i - s) mod n` into rank `i + 1`, after
//! receiving that chunk in step `s - 1`. After `n - 1` steps rank `i` holds the total of chunk
//! `i + 1`; all-gather step `s` copies chunk `(i + 1 - s) mod n` on, after receiving it. Each
//! chunk is one chain of `2(n - 1)` dependent transfers (rat.md Table 1).

use super::gen::{split_even, Builder};
use super::{CollectiveOptions, Op, Schedule, TransferId};

/// # Panics
/// If `elem_bytes` is 0 or does not divide `bytes`, or on bad options.
pub fn ring(world: u32, bytes: u64, elem_bytes: u32, opts: &CollectiveOptions) -> Schedule {
    let mut b = Builder::new("ring", world, bytes, elem_bytes, opts);
    if world < 2 {
        return b.finish();
    }
    let n = world as u64;
    let chunks = split_even(bytes, elem_bytes, world);
    let chunk = |c: u64| chunks[(c % n) as usize].clone();
    // into[i]: the transfer rank i received in the previous step (None: empty chunk).
    let mut into: Vec<Option<TransferId>> = vec![None; world as usize];
    for step in 0..2 * (n - 1) {
        let mut next = vec![None; world as usize];
        for i in 0..n {
            // reduce-scatter sends chunk i - s, all-gather chunk i + 1 - s', s' = s - (n - 1)
            let (c, op) = if step < n - 1 { (i + n - step, Op::Reduce) } else { (i + 1 + 2 * n - 1 - step, Op::Copy) };
            let range = chunk(c);
            if range.is_empty() {
                continue;
            }
            let after = into[i as usize].into_iter().collect();
            next[((i + 1) % n) as usize] = Some(b.push(i as u32, ((i + 1) % n) as u32, range, op, after));
        }
        into = next;
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::testutil::check_allreduce;

    #[test]
    fn ring_of_four_has_six_steps_per_rank() {
        let s = ring(4, 64, 4, &CollectiveOptions::default());
        assert_eq!(s.transfers.len(), 4 * 6);
        assert_eq!(s.sends_of(2).count(), 6);
        assert_eq!(s.dependency_depth(), 6);
        // reduce-scatter first, with the reduce loss bound; all-gather copies
        assert!(s.transfers[..12].iter().all(|t| t.op == Op::Reduce));
        assert!(s.transfers[12..].iter().all(|t| t.op == Op::Copy));
        // rank 1's second step forwards what rank 0 sent it in the first
        assert_eq!(s.transfers[5].src, 1);
        assert_eq!(s.transfers[5].after, vec![0]);
        assert_eq!(s.transfers[5].range, s.transfers[0].range);
    }

    #[test]
    fn small_and_trivial_rings_are_correct() {
        for world in 1..=9 {
            for bytes in [0, 4, 12, 36, 100] {
                check_allreduce(&ring(world, bytes, 4, &CollectiveOptions::default()), &[]);
            }
        }
    }

    #[test]
    fn loss_bounds_follow_the_phase() {
        let o = CollectiveOptions { reduce_loss_bound: 0.1, broadcast_loss_bound: 0.01, priority: 3 };
        let s = ring(3, 24, 4, &o);
        for t in &s.transfers {
            assert_eq!(t.loss_bound, if t.op == Op::Reduce { 0.1 } else { 0.01 });
            assert_eq!(t.priority, 3);
        }
    }
}
