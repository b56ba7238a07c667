//! Topology-agnostic k-ary tree allreduce: ranks in heap order under root 0 (the parent of
//! rank `i > 0` is `(i - 1) / arity`), partial sums reduced up, the total broadcast down.
//! The buffer is cut into `pipeline_chunks` pieces, each its own reduce + broadcast, so a
//! rank forwards piece 0 while piece 1 is still coming up.

use super::gen::{split_even, tree_allreduce, Builder};
use super::{CollectiveOptions, Rank, Schedule};

/// Parent of each rank in the heap-ordered `arity`-ary tree rooted at rank 0.
pub fn heap_parents(world: u32, arity: u32) -> Vec<Option<Rank>> {
    assert!(arity >= 1, "tree arity must be at least 1");
    (0..world).map(|i| (i > 0).then(|| (i - 1) / arity)).collect()
}

/// # Panics
/// If `arity` or `pipeline_chunks` is 0, `elem_bytes` is 0 or does not divide `bytes`,
/// or on bad options.
pub fn tree(
    world: u32,
    bytes: u64,
    elem_bytes: u32,
    arity: u32,
    pipeline_chunks: u32,
    opts: &CollectiveOptions,
) -> Schedule {
    assert!(pipeline_chunks >= 1, "pipeline_chunks must be at least 1");
    let mut b = Builder::new("tree", world, bytes, elem_bytes, opts);
    if world < 2 {
        return b.finish();
    }
    let parents = heap_parents(world, arity);
    for piece in split_even(bytes, elem_bytes, pipeline_chunks) {
        tree_allreduce(&mut b, &parents, 0, piece);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::testutil::check_allreduce;
    use crate::collective::Op;

    #[test]
    fn binary_tree_of_seven_reduces_in_two_hops_and_broadcasts_in_two() {
        let s = tree(7, 28, 4, 2, 1, &CollectiveOptions::default());
        assert_eq!(s.transfers.len(), 12);
        assert_eq!(s.dependency_depth(), 4);
        // leaves 3, 4 feed rank 1, which then reduces into 0
        let up1 = s.transfers.iter().position(|t| t.src == 1 && t.op == Op::Reduce).unwrap();
        let from = |ids: &[u32]| ids.iter().map(|&d| s.transfers[d as usize].src).collect::<Vec<_>>();
        assert_eq!(from(&s.transfers[up1].after), vec![3, 4]);
        // the root broadcasts after both children's sums
        let down = s.transfers.iter().filter(|t| t.src == 0 && t.op == Op::Copy).collect::<Vec<_>>();
        assert_eq!(down.len(), 2);
        assert_eq!(from(&down[0].after), vec![1, 2]);
    }

    #[test]
    fn pipeline_chunks_flow_independently() {
        let s = tree(5, 40, 4, 2, 3, &CollectiveOptions::default());
        // 4 edges x 2 directions x 3 pieces; depth does not grow with pieces
        assert_eq!(s.transfers.len(), 24);
        assert_eq!(s.dependency_depth(), tree(5, 40, 4, 2, 1, &CollectiveOptions::default()).dependency_depth());
        let pieces: std::collections::BTreeSet<_> = s.transfers.iter().map(|t| (t.range.start, t.range.end)).collect();
        assert_eq!(pieces.into_iter().collect::<Vec<_>>(), vec![(0, 16), (16, 28), (28, 40)]);
    }

    #[test]
    fn every_arity_and_chunking_is_correct() {
        for world in 1..=9 {
            for arity in 1..=4 {
                for chunks in [1, 2, 5] {
                    check_allreduce(&tree(world, 4 * 11, 4, arity, chunks, &CollectiveOptions::default()), &[]);
                }
            }
        }
    }
}
