//! RAT, the resilient allreduce tree (rat.md §3, Algorithm 1): allreduce trees shaped like
//! the network. In each tree every region of every level (rack, then pod, ...) has one
//! aggregator; ranks send their gradient to their rack's aggregator, a rack aggregator
//! sends the rack's sum to its pod's aggregator (one of the pod's rack aggregators), and so
//! on up to the tree's root; the total comes back down the same way. So each region's sum
//! crosses the region's boundary once up and once down: cross-region traffic is the
//! minimum, `2 (regions - 1) · bytes` at every level, and the dependency chain is
//! `2 (levels + 1)` transfers long whatever the number of ranks (rat.md Table 1).
//!
//! As in rat.md §4.1 there is one tree per rank, rooted at that rank, each carrying an even
//! share of the buffer. Algorithm 1 picks aggregators at random; here they are picked
//! deterministically to spread the load: a tree's root aggregates every region it is in,
//! and any other region takes the candidate (a rack's members, a pod's rack aggregators)
//! that has received the fewest transfers so far (ties: lowest rank).

use super::gen::{split_even, tree_allreduce, Builder};
use super::{CollectiveOptions, RackMap, Rank, Schedule};
use std::collections::BTreeMap;

/// The parent of every rank in each of the `world` RAT trees (tree `t` is rooted at rank
/// `t`; the root's parent is `None`).
pub fn rat_trees(map: &RackMap) -> Vec<Vec<Option<Rank>>> {
    let world = map.world() as usize;
    let levels = map.levels();
    // dense region index per level and rank, members per region, child regions per region
    let mut dense: Vec<Vec<usize>> = Vec::with_capacity(levels);
    let mut members: Vec<Vec<Vec<Rank>>> = Vec::with_capacity(levels);
    for l in 0..levels {
        let mut ids = BTreeMap::new();
        let idx: Vec<usize> = map
            .level(l)
            .iter()
            .map(|&g| {
                let n = ids.len();
                *ids.entry(g).or_insert(n)
            })
            .collect();
        let mut m = vec![Vec::new(); ids.len()];
        for (r, &g) in idx.iter().enumerate() {
            m[g].push(r as Rank);
        }
        dense.push(idx);
        members.push(m);
    }
    let children: Vec<Vec<Vec<usize>>> = (0..levels)
        .map(|l| {
            let mut c = vec![Vec::new(); members[l].len()];
            if l > 0 {
                for r in 0..world {
                    c[dense[l][r]].push(dense[l - 1][r]);
                }
                for v in &mut c {
                    v.sort_unstable();
                    v.dedup();
                }
            }
            c
        })
        .collect();

    let mut load = vec![0u64; world];
    let mut trees = Vec::with_capacity(world);
    for root in 0..world {
        let mut agg: Vec<Vec<Rank>> = Vec::with_capacity(levels);
        let mut taken = vec![0u64; world]; // roles in this tree, to break ties within it
        for l in 0..levels {
            let a: Vec<Rank> = (0..members[l].len())
                .map(|g| {
                    if dense[l][root] == g {
                        return root as Rank;
                    }
                    let cands: Vec<Rank> = if l == 0 {
                        members[0][g].clone()
                    } else {
                        children[l][g].iter().map(|&c| agg[l - 1][c]).collect()
                    };
                    let pick = *cands
                        .iter()
                        .min_by_key(|&&r| (load[r as usize] + taken[r as usize], r))
                        .expect("regions are not empty");
                    taken[pick as usize] += 1;
                    pick
                })
                .collect();
            agg.push(a);
        }
        let parent: Vec<Option<Rank>> = (0..world)
            .map(|u| {
                (0..levels)
                    .map(|l| agg[l][dense[l][u]])
                    .find(|&a| a as usize != u)
                    .or((u != root).then_some(root as Rank))
            })
            .collect();
        for p in parent.iter().flatten() {
            load[*p as usize] += 1;
        }
        trees.push(parent);
    }
    trees
}

/// # Panics
/// If `elem_bytes` is 0 or does not divide `bytes`, or on bad options.
pub fn rat(map: &RackMap, bytes: u64, elem_bytes: u32, opts: &CollectiveOptions) -> Schedule {
    let world = map.world();
    let mut b = Builder::new("rat", world, bytes, elem_bytes, opts);
    if world < 2 {
        return b.finish();
    }
    let pieces = split_even(bytes, elem_bytes, world);
    for (root, (parent, piece)) in rat_trees(map).iter().zip(pieces).enumerate() {
        tree_allreduce(&mut b, parent, root as Rank, piece);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::testutil::check_allreduce;
    use crate::collective::Op;

    #[test]
    fn two_racks_of_four_follow_figure_3() {
        // rat.md Figure 3: 8 nodes in 2 racks
        let map = RackMap::from_racks(vec![0, 0, 0, 0, 1, 1, 1, 1]);
        let trees = rat_trees(&map);
        for (root, parent) in trees.iter().enumerate() {
            assert_eq!(parent[root], None);
            // the other rack has one aggregator, the only rank sending across racks
            let cross: Vec<Rank> =
                (0..8).filter(|&u| parent[u as usize].is_some_and(|p| !map.same_region(0, u, p))).collect();
            assert_eq!(cross.len(), 1, "tree {root}: {parent:?}");
            assert_eq!(parent[cross[0] as usize], Some(root as Rank));
            // everyone in the root's rack reports to the root
            for u in 0..8u32 {
                if u as usize != root && map.same_region(0, u, root as Rank) {
                    assert_eq!(parent[u as usize], Some(root as Rank));
                }
            }
        }
        let s = rat(&map, 8 * 4 * 3, 4, &CollectiveOptions::default());
        assert_eq!(s.dependency_depth(), 4);
        // per tree: 7 reduces + 7 copies
        assert_eq!(s.transfers.len(), 8 * 14);
        assert_eq!(s.transfers.iter().filter(|t| t.op == Op::Reduce).count(), 8 * 7);
    }

    #[test]
    fn aggregation_is_spread_over_the_rack() {
        let map = RackMap::from_racks(vec![0, 0, 0, 1, 1, 1, 2, 2, 2]);
        let trees = rat_trees(&map);
        // trees in which each rank has children
        let mut aggregates = [0u32; 9];
        for parent in &trees {
            for u in 0..9u32 {
                if parent.contains(&Some(u)) {
                    aggregates[u as usize] += 1;
                }
            }
        }
        // 6 foreign trees per rack over 3 members, plus its own tree
        assert!(aggregates.iter().all(|&a| a == 3), "{aggregates:?}");
    }

    #[test]
    fn pods_add_one_level() {
        let map = RackMap::parse("0,0,1,1,2,2,3,3;0,0,0,0,1,1,1,1").unwrap();
        let s = rat(&map, 8 * 4, 4, &CollectiveOptions::default());
        assert_eq!(s.dependency_depth(), 6);
        check_allreduce(&s, &[]);
        for parent in rat_trees(&map) {
            // one transfer each way crosses pods per tree
            let cross_pod =
                (0..8u32).filter(|&u| parent[u as usize].is_some_and(|p| !map.same_region(1, u, p))).count();
            assert_eq!(cross_pod, 1);
        }
    }

    #[test]
    fn uneven_racks_and_labels_are_correct() {
        for racks in ["0", "0,1", "7,7,7", "0,1,0,1,2", "3,3,3,3,3,1,9,9", "0,0,1,1,1,1,1,2,2;5,5,5,5,5,5,5,6,6"] {
            let map = RackMap::parse(racks).unwrap();
            for bytes in [0, 4, 8 * 4, 4 * 101] {
                check_allreduce(&rat(&map, bytes, 4, &CollectiveOptions::default()), &[]);
            }
        }
    }
}
