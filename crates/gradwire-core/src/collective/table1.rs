//! Every generator against every other: correctness for many worlds and sizes (and random
//! ones), and rat.md Table 1's two columns — cross-region traffic and dependent steps —
//! checked against closed forms computed here, not measured numbers.
//!
//! The cross-region lower bound: for any one element, every region must get the other
//! regions' contributions and give its own. Counting messages that cross a region boundary
//! (a message carries one value, possibly a partial sum), the regions must form a graph in
//! which information flows from every region to every other, which takes at least
//! `2 (r - 1)` one-way messages among `r` regions (r - 1 to gather into some region,
//! r - 1 to spread the result back out). Over a buffer of `B` bytes: `2 (r - 1) B`.

use super::testutil::{check_allreduce, check_allreduce_among};
use super::*;
use proptest::prelude::*;

const O: CollectiveOptions = CollectiveOptions { reduce_loss_bound: 0.0, broadcast_loss_bound: 0.0, priority: 1 };

fn min_cross(regions: u32, bytes: u64) -> u64 {
    2 * (regions as u64 - 1) * bytes
}

/// Ranks `0..world` in racks of `k` consecutive ranks.
fn contiguous(world: u32, k: u32) -> RackMap {
    RackMap::from_racks((0..world).map(|r| r / k).collect())
}

fn cross(s: &Schedule, map: &RackMap, level: usize) -> u64 {
    s.bytes_between_regions(|a, b| map.same_region(level, a, b))
}

#[test]
fn every_algorithm_sums_for_worlds_2_to_9_and_uneven_sizes() {
    for world in 2..=9u32 {
        // fewer elements than ranks, a remainder, and an even split
        for elems in [1, world + 3, 7 * world + world / 2, 12 * world] {
            let bytes = 4 * elems as u64;
            check_allreduce(&ring(world, bytes, 4, &O), &[]);
            check_allreduce(&tree(world, bytes, 4, 2, 1, &O), &[]);
            check_allreduce(&tree(world, bytes, 4, 3, 4, &O), &[]);
            check_allreduce(&ps(&PsLayout::colocated(world, world.div_ceil(2)), world, bytes, 4, &O), &[]);
            let dedicated = PsLayout { workers: (0..world - 1).collect(), servers: vec![world - 1] };
            check_allreduce_among(&ps(&dedicated, world, bytes, 4, &O), &dedicated.workers, &[world - 1]);
            check_allreduce(&rat(&contiguous(world, 2), bytes, 4, &O), &[]);
            let pods =
                RackMap::new(vec![(0..world).map(|r| r / 2).collect(), (0..world).map(|r| r / 4).collect()]).unwrap();
            check_allreduce(&rat(&pods, bytes, 4, &O), &[]);
        }
    }
}

fn rack_map() -> impl Strategy<Value = RackMap> {
    (1u32..=12, 1u32..=5, 1u32..=3).prop_flat_map(|(world, racks, pods)| {
        (
            proptest::collection::vec(0..racks, world as usize),
            proptest::collection::vec(0..pods, racks as usize),
            any::<bool>(),
        )
            .prop_map(|(rack_of, pod_of_rack, two_levels)| {
                let pods: Vec<u32> = rack_of.iter().map(|&r| pod_of_rack[r as usize]).collect();
                if two_levels {
                    RackMap::new(vec![rack_of, pods]).unwrap()
                } else {
                    RackMap::from_racks(rack_of)
                }
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_worlds_sizes_and_racks_all_sum(map in rack_map(), elems in 0u64..80, wide in any::<bool>(),
                                             arity in 1u32..5, chunks in 1u32..5, servers_pick in 0u32..100) {
        let world = map.world();
        let e = if wide { 4 } else { 2 };
        let bytes = elems * e as u64;
        check_allreduce(&ring(world, bytes, e, &O), &[]);
        check_allreduce(&tree(world, bytes, e, arity, chunks, &O), &[]);
        check_allreduce(&ps(&PsLayout::colocated(world, 1 + servers_pick % world), world, bytes, e, &O), &[]);
        let s = rat(&map, bytes, e, &O);
        check_allreduce(&s, &[]);
        // RAT's cross-region traffic is the minimum at every level, for any placement
        for l in 0..map.levels() {
            prop_assert_eq!(cross(&s, &map, l), min_cross(map.regions(l), bytes));
        }
        prop_assert!(s.dependency_depth() <= 2 * (map.levels() as u32 + 1));
    }
}

#[test]
fn rat_is_at_the_cross_region_minimum_ps_and_a_rack_agnostic_tree_are_not() {
    for k in 2..=4u32 {
        for r in 2..=4u32 {
            let w = r * k;
            let bytes = 4 * w as u64 * 5; // every rank's chunk / tree piece the same size
            let map = contiguous(w, k);
            let min = min_cross(r, bytes);
            assert_eq!(cross(&rat(&map, bytes, 4, &O), &map, 0), min, "rat k={k} r={r}");

            // PS with a shard on every rank: each shard's w - k off-rack workers push and pull it
            let p = ps(&PsLayout::colocated(w, w), w, bytes, 4, &O);
            assert_eq!(cross(&p, &map, 0), 2 * (w - k) as u64 * bytes);
            assert_eq!(cross(&p, &map, 0), k as u64 * min, "PS moves k = {k} times the minimum");

            // heap-ordered binary tree: every edge whose ends sit in different racks carries
            // the whole buffer up and down; each rack but the first has >= 2 such edges in
            let crossing = (1..w).filter(|&i| i / k != ((i - 1) / 2) / k).count() as u64;
            assert!(crossing > (r - 1) as u64);
            assert_eq!(cross(&tree(w, bytes, 4, 2, 1, &O), &map, 0), 2 * crossing * bytes);
            assert!(cross(&tree(w, bytes, 4, 2, 3, &O), &map, 0) > min);
        }
    }
}

/// Ring in rank order over rack-contiguous ranks: `r` of its `w` edges cross racks, each
/// carrying `2 (w - 1) / w` of the buffer. That is the minimum only with one rank per rack;
/// otherwise it is `r (w - 1) / (w (r - 1))` times the minimum, which stays below
/// `r / (r - 1) <= 2` however many ranks a rack holds — while PS grows with rack size. Each
/// rack's uplink carries what one rank's NIC does (rat.md's sense of "minimum").
#[test]
fn ring_crosses_each_rack_boundary_once_per_step() {
    for k in 1..=4u32 {
        for r in 2..=4u32 {
            let w = r * k;
            let bytes = 4 * w as u64 * 5;
            let map = contiguous(w, k);
            let s = ring(w, bytes, 4, &O);
            let ring_cross = cross(&s, &map, 0);
            assert_eq!(ring_cross, r as u64 * 2 * (w as u64 - 1) * bytes / w as u64, "k={k} r={r}");
            let min = min_cross(r, bytes);
            if k == 1 {
                assert_eq!(ring_cross, min);
            } else {
                assert!(ring_cross > min);
                assert!(ring_cross * (r as u64 - 1) < min * r as u64, "within r/(r-1) of the minimum");
                let ps_cross = cross(&ps(&PsLayout::colocated(w, w), w, bytes, 4, &O), &map, 0);
                assert!(ring_cross < ps_cross);
            }
            // per rack egress = one rank's egress
            for rack in 0..r {
                let out: u64 =
                    s.transfers.iter().filter(|t| t.src / k == rack && t.dst / k != rack).map(Transfer::bytes).sum();
                let rank0: u64 = s.sends_of(rack * k).map(|i| s.transfers[i as usize].bytes()).sum();
                assert_eq!(out, rank0);
            }
        }
    }
}

/// Table 1, dependent steps: PS 2, ring 2(w - 1), k-ary tree 2 log_k(w) (its height), RAT
/// 2(l + 1) for l oversubscribed levels, whatever the number of racks.
#[test]
fn dependency_chains_follow_table_1() {
    for w in 2..=40u32 {
        let bytes = 4 * w as u64;
        assert_eq!(ring(w, bytes, 4, &O).dependency_depth(), 2 * (w - 1));
        assert_eq!(ps(&PsLayout::colocated(w, 1), w, bytes, 4, &O).dependency_depth(), 2);
        for k in 2..=4u32 {
            // height: levels below the root of a complete k-ary tree of w nodes
            let (mut height, mut full) = (0, 1u32);
            while full < w {
                height += 1;
                full += k.pow(height);
            }
            assert_eq!(tree(w, bytes, 4, k, 2, &O).dependency_depth(), 2 * height, "w={w} k={k}");
        }
    }
    for members in 2..=4u32 {
        for racks in 2..=10u32 {
            let w = racks * members;
            let map = contiguous(w, members);
            let d = rat(&map, 4 * w as u64, 4, &O).dependency_depth();
            assert_eq!(d, 2 * (1 + 1), "one level: constant in the number of racks (w={w})");
            assert!(d < ring(w, 4 * w as u64, 4, &O).dependency_depth());
            if racks % 2 == 0 {
                let pods =
                    RackMap::new(vec![map.level(0).to_vec(), (0..w).map(|r| r / (2 * members)).collect()]).unwrap();
                if pods.regions(1) > 1 {
                    assert_eq!(rat(&pods, 4 * w as u64, 4, &O).dependency_depth(), 2 * (2 + 1));
                }
            }
        }
    }
}

#[test]
fn options_reach_every_transfer() {
    let o = CollectiveOptions { reduce_loss_bound: 0.2, broadcast_loss_bound: 0.05, priority: 6 };
    let map = contiguous(6, 3);
    for s in [
        ring(6, 48, 4, &o),
        tree(6, 48, 4, 2, 2, &o),
        ps(&PsLayout::colocated(6, 2), 6, 48, 4, &o),
        rat(&map, 48, 4, &o),
    ] {
        assert!(s.transfers.iter().any(|t| t.op == Op::Copy) && s.transfers.iter().any(|t| t.op == Op::Reduce));
        for t in &s.transfers {
            assert_eq!(t.loss_bound, if t.op == Op::Reduce { 0.2 } else { 0.05 }, "{}", s.name);
            assert_eq!(t.priority, 6);
        }
    }
    assert_eq!(
        CollectiveOptions::default(),
        CollectiveOptions { reduce_loss_bound: 0.0, broadcast_loss_bound: 0.0, priority: 1 }
    );
}
