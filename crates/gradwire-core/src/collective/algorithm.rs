//! Which generator builds a collective: one [`Algorithm`], one [`Layout`], one [`build`]
//! for every driver, with the checks their loaders forward.

use super::{ps, rat, ring, tree, CollectiveOptions, PsLayout, RackMap, Schedule};
use crate::transport::spec::named;
use crate::transport::{check_loss_bound, ConfigError};

/// An allreduce algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Reduce-scatter + all-gather around a ring.
    Ring,
    /// k-ary tree rooted at rank 0: reduce up, broadcast down, pipelined in chunks.
    Tree,
    /// rat.md: one aggregator per rack (and coarser region) per tree, a tree per rank.
    Rat,
    /// Parameter server: shards pushed to servers, summed, pulled back.
    Ps,
}

named!(Algorithm "algorithm" { Ring = "ring", Tree = "tree", Rat = "rat", Ps = "ps" });

/// The job a schedule is built for: ranks and the knobs of the generators.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// Ranks, `0..world`.
    pub world: u32,
    /// Children per node of a tree (and of a broadcast).
    pub tree_arity: u32,
    /// Pieces a tree or a broadcast is cut into, so they flow down in a pipeline.
    pub pipeline_chunks: u32,
    /// The rack (and coarser regions) of every rank: RAT needs it.
    pub rack_map: Option<RackMap>,
    /// Parameter servers and workers (`None`: every rank serves one shard).
    pub ps: Option<PsLayout>,
}

impl Layout {
    /// `world` ranks, binary trees in 4 pipelined pieces, no rack map, every rank a server.
    pub fn new(world: u32) -> Layout {
        Layout { world, tree_arity: 2, pipeline_chunks: 4, rack_map: None, ps: None }
    }

    /// The first knob a loader should refuse.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [("tree_arity", self.tree_arity), ("pipeline_chunks", self.pipeline_chunks)] {
            if v == 0 {
                return Err(ConfigError::new(field, "must be greater than 0 (got 0)"));
            }
        }
        if let Some(m) = &self.rack_map {
            if m.world() != self.world {
                let msg = format!("lists {} ranks but the job has {}", m.world(), self.world);
                return Err(ConfigError::new("rack_map", msg));
            }
        }
        if let Some(ps) = &self.ps {
            ps.check(self.world).map_err(|e| ConfigError::new("ps", e.to_string()))?;
        }
        Ok(())
    }

    /// The PS layout schedules use: the given one, or every rank serving one shard.
    pub fn ps_layout(&self) -> PsLayout {
        self.ps.clone().unwrap_or_else(|| PsLayout::colocated(self.world, self.world.max(1)))
    }
}

/// A buffer of `bytes` is whole elements of `elem_bytes` (an empty one is).
pub fn check_buffer(bytes: u64, elem_bytes: u32) -> Result<(), ConfigError> {
    if elem_bytes == 0 {
        return Err(ConfigError::new("elem_bytes", "must be greater than 0 (got 0)"));
    }
    if !bytes.is_multiple_of(elem_bytes as u64) {
        return Err(ConfigError::new(
            "bytes",
            format!("must be a multiple of elem_bytes = {elem_bytes} (got {bytes})"),
        ));
    }
    Ok(())
}

/// The schedule of `algorithm` over a buffer of `bytes` per rank, or the first parameter
/// that stops it.
pub fn build(
    algorithm: Algorithm,
    layout: &Layout,
    bytes: u64,
    elem_bytes: u32,
    opts: &CollectiveOptions,
) -> Result<Schedule, ConfigError> {
    check_buffer(bytes, elem_bytes)?;
    layout.validate()?;
    check_loss_bound("reduce_loss_bound", opts.reduce_loss_bound)?;
    check_loss_bound("broadcast_loss_bound", opts.broadcast_loss_bound)?;
    if opts.priority > 7 {
        return Err(ConfigError::new("priority", format!("must be in 0..=7 (got {})", opts.priority)));
    }
    let w = layout.world;
    Ok(match algorithm {
        Algorithm::Ring => ring(w, bytes, elem_bytes, opts),
        Algorithm::Tree => tree(w, bytes, elem_bytes, layout.tree_arity, layout.pipeline_chunks, opts),
        Algorithm::Ps => ps(&layout.ps_layout(), w, bytes, elem_bytes, opts),
        Algorithm::Rat => {
            let map = layout.rack_map.as_ref().ok_or_else(|| {
                ConfigError::new("rack_map", "is needed by algorithm \"rat\" (the rack of every rank)")
            })?;
            rat(map, bytes, elem_bytes, opts)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_refuses_what_the_generators_would_panic_on() {
        let o = CollectiveOptions::default();
        let l = Layout::new(4);
        assert_eq!(build(Algorithm::Ring, &l, 10, 4, &o).unwrap_err().field, "bytes");
        assert_eq!(build(Algorithm::Ring, &l, 8, 0, &o).unwrap_err().field, "elem_bytes");
        assert_eq!(build(Algorithm::Rat, &l, 8, 4, &o).unwrap_err().field, "rack_map");
        let flat = Layout { tree_arity: 0, ..l.clone() };
        assert_eq!(build(Algorithm::Tree, &flat, 8, 4, &o).unwrap_err().field, "tree_arity");
        let lossy = CollectiveOptions { reduce_loss_bound: 1.5, ..o };
        assert_eq!(build(Algorithm::Ring, &l, 8, 4, &lossy).unwrap_err().field, "reduce_loss_bound");
        let racks = Layout { rack_map: Some(RackMap::from_racks(vec![0, 0, 1])), ..l.clone() };
        assert_eq!(build(Algorithm::Rat, &racks, 8, 4, &o).unwrap_err().field, "rack_map");
        // what passes is the generator's own schedule
        assert_eq!(build(Algorithm::Ring, &l, 64, 4, &o).unwrap(), ring(4, 64, 4, &o));
        assert_eq!(build(Algorithm::Ps, &l, 64, 4, &o).unwrap(), ps(&PsLayout::colocated(4, 4), 4, 64, 4, &o));
    }
}
