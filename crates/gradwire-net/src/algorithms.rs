//! Which schedule each collective call runs, built once per shape and cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gradwire_core::collective::{self, CollectiveOptions, Layout, Op, PsLayout, RackMap, Schedule};
use gradwire_core::transport::ConfigError;

use crate::error::NetError;

/// Allreduce algorithms: the core's.
pub use gradwire_core::collective::Algorithm;

/// The most pieces a tree or broadcast is cut into.
pub const MAX_PIPELINE_CHUNKS: u32 = 1024;

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

    /// The generators' layout for a job of `world` ranks.
    pub fn layout(&self, world: u32) -> Layout {
        Layout {
            world,
            tree_arity: self.tree_arity,
            pipeline_chunks: self.pipeline_chunks,
            rack_map: self.rack_map.clone(),
            ps: self.ps_servers.filter(|&s| (1..=world).contains(&s)).map(|s| PsLayout::colocated(world, s)),
        }
    }

    pub fn check(&self, world: u32) -> Result<(), NetError> {
        if let Some(s) = self.ps_servers {
            if s == 0 || s > world {
                return Err(NetError::Config(format!("ps_servers is {s}: expected 1..={world}")));
            }
        }
        // Each piece is its own transfers (flow ids hold 2^20 per call): a count past this
        // is a mistake, and would allocate its schedule before anything else refused it.
        if self.pipeline_chunks > MAX_PIPELINE_CHUNKS {
            return Err(NetError::Config(format!(
                "pipeline_chunks is {}: expected 1..={MAX_PIPELINE_CHUNKS}",
                self.pipeline_chunks
            )));
        }
        self.layout(world).validate().map_err(config)?;
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
    layout: Layout,
    cache: Mutex<HashMap<Key, Arc<Schedule>>>,
}

/// A core parameter the call or the job got wrong.
fn config(e: ConfigError) -> NetError {
    let hint = if e.field == "rack_map" {
        ": pass topology=... to init or set GRADWIRE_TOPOLOGY (e.g. \"0,0,1,1\")"
    } else {
        ""
    };
    NetError::Config(format!("{e}{hint}"))
}

impl Schedules {
    pub fn new(world: u32, cfg: CollectiveConfig) -> Result<Self, NetError> {
        cfg.check(world)?;
        Ok(Schedules { world, layout: cfg.layout(world), cfg, cache: Mutex::new(HashMap::new()) })
    }

    pub fn config(&self) -> &CollectiveConfig {
        &self.cfg
    }

    /// The PS layout calls use: servers colocated with workers.
    pub fn ps_layout(&self) -> PsLayout {
        self.layout.ps_layout()
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
        collective::check_buffer(bytes, elem).map_err(config)?;
        let w = self.world;
        let opts = |reduce: f64, bcast: f64| CollectiveOptions {
            reduce_loss_bound: reduce,
            broadcast_loss_bound: bcast,
            priority: self.cfg.priority,
        };
        let bound = |b: f64| gradwire_core::transport::check_loss_bound("loss_bound", b).map_err(config);
        let c = &self.cfg;
        Ok(match kind {
            // Only the reduce half may lose data: results are broadcast reliably, so every
            // rank ends with the same bits (LTP §III: lossy gather, reliable broadcast).
            CallKind::Allreduce { algorithm, loss_bound } => {
                bound(loss_bound)?;
                collective::build(algorithm, &self.layout, bytes, elem, &opts(loss_bound, 0.0)).map_err(config)?
            }
            CallKind::Broadcast { root } => {
                if root >= w {
                    return Err(NetError::Config(format!("broadcast root {root} is outside 0..{w}")));
                }
                collective::broadcast(w, root, bytes, elem, c.tree_arity, c.pipeline_chunks, &opts(0.0, 0.0))
            }
            CallKind::PsPush { loss_bound } | CallKind::PsPull { loss_bound } => {
                bound(loss_bound)?;
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
