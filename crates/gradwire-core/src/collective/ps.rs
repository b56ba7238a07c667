//! Parameter server (dlcp.md §5.2.1, rat.md §2.3): the buffer is cut into one shard per
//! server; every worker pushes (adds) its part of each shard into that shard's server, and
//! the server pulls (copies) the total back to every worker once every push into the shard
//! is in. A worker colocated with a server sends nothing for its own shard.
//!
//! A server that is not also a worker must start from a **zeroed buffer**: its shard is the
//! sum of whatever it holds and the pushes. The runtime zeroes such servers (their own
//! contents are not part of the result).

use super::gen::{split_even, Builder};
use super::{CollectiveOptions, Op, Rank, Schedule, TransferId};
use std::fmt;
use std::ops::Range;

/// Which ranks are workers (contribute and receive the sum) and which hold shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PsLayout {
    /// Ranks that contribute a gradient and receive the sum.
    pub workers: Vec<Rank>,
    /// Server `j` holds shard `j` of the buffer.
    pub servers: Vec<Rank>,
}

/// A layout, rack map or topology string that cannot be used, with a message that says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LayoutError {}

impl PsLayout {
    /// Every rank of `world` a worker, `servers` of them also servers, spread evenly:
    /// server `j` is rank `j * world / servers` (the simulator's PS placement).
    ///
    /// # Panics
    /// If `servers` is 0 or more than `world`.
    pub fn colocated(world: u32, servers: u32) -> PsLayout {
        assert!(servers >= 1 && servers <= world, "need 1..={world} colocated servers (got {servers})");
        PsLayout {
            workers: (0..world).collect(),
            servers: (0..servers).map(|j| (j as u64 * world as u64 / servers as u64) as Rank).collect(),
        }
    }

    /// Ranks in `0..world`, no rank listed twice in a role, at least one worker and one server.
    pub fn check(&self, world: u32) -> Result<(), LayoutError> {
        for (role, ranks) in [("worker", &self.workers), ("server", &self.servers)] {
            if ranks.is_empty() {
                return Err(LayoutError(format!("PS layout has no {role}s")));
            }
            let mut seen = std::collections::BTreeSet::new();
            for &r in ranks.iter() {
                if r >= world {
                    return Err(LayoutError(format!("PS {role} rank {r} is outside the world of {world}")));
                }
                if !seen.insert(r) {
                    return Err(LayoutError(format!("PS {role} rank {r} is listed twice")));
                }
            }
        }
        Ok(())
    }

    /// Servers that are not workers: their buffers must start zeroed.
    pub fn dedicated_servers(&self) -> impl Iterator<Item = Rank> + '_ {
        self.servers.iter().copied().filter(|s| !self.workers.contains(s))
    }
}

/// How a PS cuts a tensor of `bytes` over `servers` servers: above `split_bytes`, one even
/// shard per server (server `j` the `j`-th, as [`split_even`] cuts); otherwise the whole
/// tensor on the server `pick` names (called only then: a random or dealt choice, whatever
/// the caller's policy). Empty shards are left out. Every PS in gradwire cuts with this:
/// [`ps`], the simulator's `ps` and DNN PS workloads and ByteScheduler's flow-level job.
///
/// # Panics
/// If `servers` or `elem_bytes` is 0 or `elem_bytes` does not divide `bytes`.
pub fn ps_shards(
    bytes: u64,
    elem_bytes: u32,
    servers: u32,
    split_bytes: u64,
    pick: impl FnOnce() -> u32,
) -> Vec<(u32, Range<u64>)> {
    let shards: Vec<(u32, Range<u64>)> = if bytes > split_bytes {
        split_even(bytes, elem_bytes, servers).into_iter().enumerate().map(|(j, r)| (j as u32, r)).collect()
    } else {
        vec![(pick(), 0..bytes)]
    };
    shards.into_iter().filter(|(_, r)| !r.is_empty()).collect()
}

/// Every tensor split over all servers ([`ps_shards`] with no `split_bytes`); the pushes
/// into a shard, then its pulls, each pull waiting for all of the shard's pushes.
///
/// # Panics
/// If the layout fails [`PsLayout::check`], `elem_bytes` is 0 or does not divide `bytes`,
/// or on bad options.
pub fn ps(layout: &PsLayout, world: u32, bytes: u64, elem_bytes: u32, opts: &CollectiveOptions) -> Schedule {
    if let Err(e) = layout.check(world) {
        panic!("ps: {e}");
    }
    let mut b = Builder::new("ps", world, bytes, elem_bytes, opts);
    for (j, shard) in ps_shards(bytes, elem_bytes, layout.servers.len() as u32, 0, || 0) {
        let server = layout.servers[j as usize];
        let others = || layout.workers.iter().copied().filter(move |&w| w != server);
        let pushes: Vec<TransferId> =
            others().map(|w| b.push(w, server, shard.clone(), Op::Reduce, Vec::new())).collect();
        for w in others() {
            b.push(server, w, shard.clone(), Op::Copy, pushes.clone());
        }
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::testutil::{check_allreduce, check_allreduce_among};

    #[test]
    fn colocated_servers_skip_their_own_shard() {
        let l = PsLayout::colocated(4, 2);
        assert_eq!(l.servers, vec![0, 2]);
        let s = ps(&l, 4, 16, 4, &CollectiveOptions::default());
        // per shard: 3 pushes + 3 pulls
        assert_eq!(s.transfers.len(), 12);
        assert_eq!(s.dependency_depth(), 2);
        assert!(s.transfers.iter().all(|t| t.src != t.dst));
        let pull = s.transfers.iter().find(|t| t.op == Op::Copy).unwrap();
        assert_eq!(pull.after.len(), 3);
    }

    #[test]
    fn colocated_and_dedicated_servers_compute_the_sum() {
        for world in 1..=9 {
            for servers in 1..=world {
                check_allreduce(
                    &ps(&PsLayout::colocated(world, servers), world, 4 * 13, 4, &CollectiveOptions::default()),
                    &[],
                );
            }
        }
        // workers 0..4, dedicated servers 4 and 5 (zeroed)
        let l = PsLayout { workers: vec![0, 1, 2, 3], servers: vec![4, 5] };
        assert_eq!(l.dedicated_servers().collect::<Vec<_>>(), vec![4, 5]);
        let s = ps(&l, 6, 40, 4, &CollectiveOptions::default());
        assert_eq!(s.transfers.len(), 2 * (4 + 4));
        check_allreduce_among(&s, &l.workers, &[4, 5]);
        // a mix: server 1 is a worker, server 5 is not
        let l = PsLayout { workers: vec![0, 1, 2], servers: vec![1, 5] };
        check_allreduce_among(&ps(&l, 6, 24, 4, &CollectiveOptions::default()), &l.workers, &[5]);
    }

    #[test]
    fn shards_split_large_tensors_evenly_and_put_small_ones_where_picked() {
        assert_eq!(ps_shards(10, 1, 3, 4, || unreachable!()), vec![(0, 0..4), (1, 4..7), (2, 7..10)]);
        assert_eq!(ps_shards(4, 1, 3, 4, || 2), vec![(2, 0..4)]);
        // element-aligned, and no empty shard
        assert_eq!(ps_shards(8, 4, 3, 0, || 0), vec![(0, 0..4), (1, 4..8)]);
        assert_eq!(ps_shards(0, 4, 3, 0, || 1), vec![]);
    }

    #[test]
    fn bad_layouts_are_explained() {
        let e = PsLayout { workers: vec![0, 1], servers: vec![] }.check(2).unwrap_err();
        assert!(e.to_string().contains("no servers"), "{e}");
        let e = PsLayout { workers: vec![0, 7], servers: vec![0] }.check(4).unwrap_err();
        assert!(e.to_string().contains("rank 7 is outside the world of 4"), "{e}");
        let e = PsLayout { workers: vec![0, 1], servers: vec![1, 1] }.check(4).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
    }
}
