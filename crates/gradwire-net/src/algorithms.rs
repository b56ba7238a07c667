//! Which schedule each collective call runs, built once per shape and cached.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use gradwire_core::collective::{self, CollectiveOptions, Op, PsLayout, RackMap, Schedule};

use crate::error::NetError;

/// Allreduce algorithms.
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

impl Algorithm {
    /// Every algorithm, in the order help texts list them.
    pub const ALL: [Algorithm; 4] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Rat, Algorithm::Ps];

    /// The name callers give (`"ring"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Rat => "rat",
            Algorithm::Ps => "ps",
        }
    }
}

impl FromStr for Algorithm {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Self, NetError> {
        Algorithm::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<String> = Algorithm::ALL.iter().map(|a| format!("{:?}", a.name())).collect();
            NetError::Config(format!("unknown algorithm {s:?}: expected one of {}", names.join(", ")))
        })
    }
}

/// The job's layout knobs; `Default` suits a job without a topology.
#[derive(Clone, Debug)]
pub struct CollectiveConfig {
    /// Rack (and pod) of every rank, for RAT (`GRADWIRE_TOPOLOGY`).
    pub rack_map: Option<RackMap>,
    /// PS servers, colocated with workers and spread evenly (default: every rank serves
    /// one shard).
    pub ps_servers: Option<u32>,
    pub tree_arity: u32,
    /// Pieces a tree or broadcast is cut into so they flow down in a pipeline.
    pub pipeline_chunks: u32,
    /// Switch queue of the data (1..=7).
    pub priority: u8,
}

impl Default for CollectiveConfig {
    fn default() -> Self {
        CollectiveConfig { rack_map: None, ps_servers: None, tree_arity: 2, pipeline_chunks: 4, priority: 1 }
    }
}

impl CollectiveConfig {
    /// Reads `GRADWIRE_TOPOLOGY` (e.g. "0,0,1,1" or "0,0,1,1;0,0,0,0") if set.
    pub fn from_env() -> Result<Self, NetError> {
        let mut c = CollectiveConfig::default();
        if let Ok(t) = std::env::var("GRADWIRE_TOPOLOGY") {
            c.rack_map =
                Some(RackMap::parse(&t).map_err(|e| NetError::Config(format!("GRADWIRE_TOPOLOGY is {t:?}: {e}")))?);
        }
        Ok(c)
    }

    pub fn check(&self, world: u32) -> Result<(), NetError> {
        if let Some(m) = &self.rack_map {
            if m.world() != world {
                return Err(NetError::Config(format!(
                    "the rack map lists {} ranks but the job has {world}",
                    m.world()
                )));
            }
        }
        if let Some(s) = self.ps_servers {
            if s == 0 || s > world {
                return Err(NetError::Config(format!("ps_servers is {s}: expected 1..={world}")));
            }
        }
        if self.tree_arity == 0 || self.pipeline_chunks == 0 {
            return Err(NetError::Config("tree_arity and pipeline_chunks must be positive".into()));
        }
        if !(1..=7).contains(&self.priority) {
            return Err(NetError::Config(format!(
                "priority {} is outside 1..=7 (0 is reserved for control)",
                self.priority
            )));
        }
        Ok(())
    }
}

/// What a call does; with the buffer's size and element size it fixes the schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CallKind {
    Allreduce {
        algorithm: Algorithm,
        loss_bound: f64,
    },
    Broadcast {
        root: u32,
    },
    /// Workers' shards summed into the servers' buffers (lossy within the bound).
    PsPush {
        loss_bound: f64,
    },
    /// Servers' shards copied to the workers.
    PsPull {
        loss_bound: f64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: u8,
    algorithm: Option<Algorithm>,
    root: u32,
    bound_bits: u64,
    bytes: u64,
    elem: u32,
}

pub struct Schedules {
    world: u32,
    cfg: CollectiveConfig,
    cache: Mutex<HashMap<Key, Arc<Schedule>>>,
}

fn check_bound(b: f64) -> Result<(), NetError> {
    if (0.0..=1.0).contains(&b) {
        Ok(())
    } else {
        Err(NetError::Config(format!("loss_bound {b} is outside [0, 1]")))
    }
}

impl Schedules {
    pub fn new(world: u32, cfg: CollectiveConfig) -> Result<Self, NetError> {
        cfg.check(world)?;
        Ok(Schedules { world, cfg, cache: Mutex::new(HashMap::new()) })
    }

    pub fn config(&self) -> &CollectiveConfig {
        &self.cfg
    }

    /// The PS layout calls use: servers colocated with workers.
    pub fn ps_layout(&self) -> PsLayout {
        PsLayout::colocated(self.world, self.cfg.ps_servers.unwrap_or(self.world))
    }

    pub fn get(&self, kind: CallKind, bytes: u64, elem_bytes: u32) -> Result<Arc<Schedule>, NetError> {
        let key = match kind {
            CallKind::Allreduce { algorithm, loss_bound } => Key {
                kind: 0,
                algorithm: Some(algorithm),
                root: 0,
                bound_bits: loss_bound.to_bits(),
                bytes,
                elem: elem_bytes,
            },
            CallKind::Broadcast { root } => {
                Key { kind: 1, algorithm: None, root, bound_bits: 0, bytes, elem: elem_bytes }
            }
            CallKind::PsPush { loss_bound } => {
                Key { kind: 2, algorithm: None, root: 0, bound_bits: loss_bound.to_bits(), bytes, elem: elem_bytes }
            }
            CallKind::PsPull { loss_bound } => {
                Key { kind: 3, algorithm: None, root: 0, bound_bits: loss_bound.to_bits(), bytes, elem: elem_bytes }
            }
        };
        if let Some(s) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(s);
        }
        let s = Arc::new(self.build(kind, bytes, elem_bytes)?);
        if let Ok(mut c) = self.cache.lock() {
            if c.len() > 256 {
                c.clear();
            }
            c.insert(key, s.clone());
        }
        Ok(s)
    }

    fn build(&self, kind: CallKind, bytes: u64, elem: u32) -> Result<Schedule, NetError> {
        if elem == 0 || !bytes.is_multiple_of(elem as u64) {
            return Err(NetError::Config(format!("a buffer of {bytes} bytes is not whole {elem}-byte elements")));
        }
        let w = self.world;
        let opts = |reduce: f64, bcast: f64| CollectiveOptions {
            reduce_loss_bound: reduce,
            broadcast_loss_bound: bcast,
            priority: self.cfg.priority,
        };
        let c = &self.cfg;
        Ok(match kind {
            // Only the reduce half may lose data: results are broadcast reliably, so every
            // rank ends with the same bits (LTP §III: lossy gather, reliable broadcast).
            CallKind::Allreduce { algorithm, loss_bound } => {
                check_bound(loss_bound)?;
                let o = opts(loss_bound, 0.0);
                match algorithm {
                    Algorithm::Ring => collective::ring(w, bytes, elem, &o),
                    Algorithm::Tree => collective::tree(w, bytes, elem, c.tree_arity, c.pipeline_chunks, &o),
                    Algorithm::Ps => collective::ps(&self.ps_layout(), w, bytes, elem, &o),
                    Algorithm::Rat => {
                        let map = c.rack_map.as_ref().ok_or_else(|| {
                            NetError::Config("algorithm \"rat\" needs a rack map: pass topology=... to init or set GRADWIRE_TOPOLOGY (e.g. \"0,0,1,1\")".into())
                        })?;
                        collective::rat(map, bytes, elem, &o)
                    }
                }
            }
            CallKind::Broadcast { root } => {
                if root >= w {
                    return Err(NetError::Config(format!("broadcast root {root} is outside 0..{w}")));
                }
                collective::broadcast(w, root, bytes, elem, c.tree_arity, c.pipeline_chunks, &opts(0.0, 0.0))
            }
            CallKind::PsPush { loss_bound } | CallKind::PsPull { loss_bound } => {
                check_bound(loss_bound)?;
                let push = matches!(kind, CallKind::PsPush { .. });
                let full = collective::ps(&self.ps_layout(), w, bytes, elem, &opts(loss_bound, loss_bound));
                half(full, if push { Op::Reduce } else { Op::Copy }, if push { "ps.push" } else { "ps.pull" })
            }
        })
    }
}

/// The transfers of one op, without dependencies (push and pull are separate calls).
fn half(s: Schedule, op: Op, name: &str) -> Schedule {
    let transfers = s.transfers.into_iter().filter(|t| t.op == op).map(|mut t| {
        t.after.clear();
        t
    });
    Schedule {
        name: name.into(),
        world: s.world,
        bytes: s.bytes,
        elem_bytes: s.elem_bytes,
        transfers: transfers.collect(),
    }
}
