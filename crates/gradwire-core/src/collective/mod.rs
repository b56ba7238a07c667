//! Collectives as dataflows of chunk transfers, written once for every world.
//!
//! A [`Schedule`] says which rank sends which byte range of the collective's buffer to
//! whom, what the receiver does with it (add it in, or overwrite), after which other
//! transfers, with which loss bound and switch priority. The simulator turns each
//! transfer into a flow started when its dependencies finish; the socket runtime runs a
//! [`RankExec`] per rank and moves real bytes. Neither needs to know which algorithm built
//! the schedule.
//!
//! Buffer model: every rank holds a buffer of `Schedule::bytes` bytes (its gradient for an
//! allreduce). A transfer reads `range` of the sender's buffer *when it starts* and, once
//! delivered, applies the received bytes to the same `range` of the receiver's buffer.
//! Lost bytes (bubbles, within the transfer's loss bound) are zeros: a `Reduce` adds
//! nothing for them, a `Copy` writes zeros.
//!
//! Generators, one module each: [`broadcast`] (k-ary, pipelined), [`ring`], [`tree`] (k-ary, pipelined), [`ps`] (parameter
//! server, colocated or dedicated servers) and [`rat`] (rat.md's topology-shaped trees over a
//! [`RackMap`]). [`execute_in_memory`] is the reference executor on `f32` buffers.

mod algorithm;
mod broadcast;
mod exec;
mod gen;
mod memory;
mod ps;
mod rack;
mod rat;
mod ring;
mod tree;

#[cfg(test)]
mod table1;
#[cfg(test)]
pub(crate) mod testutil;

pub use algorithm::{build, check_buffer, Algorithm, Layout};
pub use broadcast::broadcast;
pub use exec::{ExecError, RankExec};
pub use gen::{split_even, CollectiveOptions};
pub use memory::execute_in_memory;
pub use ps::{ps, ps_shards, LayoutError, PsLayout};
pub use rack::RackMap;
pub use rat::{rat, rat_trees};
pub use ring::ring;
pub use tree::{heap_parents, tree};

use std::fmt;
use std::ops::Range;

/// Rank of a process in a job, `0..world`.
pub type Rank = u32;
/// Index of a transfer in [`Schedule::transfers`].
pub type TransferId = u32;

/// What the receiver does with a delivered range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `dst[range] += received` (elementwise; the element type is the world's business).
    Reduce,
    /// `dst[range] = received`.
    Copy,
}

/// One chunk transfer of a schedule: a byte range of the buffer, from one rank to another.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    /// Sending rank; it reads `range` of its buffer when the transfer starts.
    pub src: Rank,
    /// Receiving rank; it applies `op` to `range` of its buffer once delivered.
    pub dst: Rank,
    /// Byte range of the buffer, the same offsets at both ends; element-aligned.
    pub range: Range<u64>,
    /// What the receiver does with the delivered bytes.
    pub op: Op,
    /// Transfers that must be finished *at `src`* before this one starts: each is either
    /// received by `src` (delivered and applied) or sent by `src` (sender side done).
    pub after: Vec<TransferId>,
    /// Share of `range` that may be missing at completion, `[0, 1]`.
    pub loss_bound: f64,
    /// Switch queue 0..=7 (0 is the reserved control queue; data normally uses 1..=7).
    pub priority: u8,
}

impl Transfer {
    /// Payload size of the transfer, bytes (`range.end - range.start`).
    pub fn bytes(&self) -> u64 {
        self.range.end - self.range.start
    }
}

/// A collective for `world` ranks over a buffer of `bytes` bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Algorithm name, for reports ("ring", "tree", "rat", "ps").
    pub name: String,
    /// Number of ranks; every `src`/`dst` is in `0..world`.
    pub world: u32,
    /// Size of every rank's buffer, bytes.
    pub bytes: u64,
    /// Element size; every transfer range starts and ends on a multiple of it.
    pub elem_bytes: u32,
    /// The transfers, indexed by [`TransferId`]; dependencies refer to these indices.
    pub transfers: Vec<Transfer>,
}

/// The first invariant a [`Schedule`] breaks, naming the offending transfer (`transfer`
/// is always its index in [`Schedule::transfers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleError {
    /// `src` or `dst` is not below `world`.
    RankOutOfRange {
        /// The offending transfer.
        transfer: TransferId,
        /// The rank out of range.
        rank: Rank,
        /// The schedule's world size.
        world: u32,
    },
    /// `src == dst`.
    SelfTransfer {
        /// The offending transfer.
        transfer: TransferId,
    },
    /// The range is empty or ends past the buffer.
    BadRange {
        /// The offending transfer.
        transfer: TransferId,
    },
    /// The range does not start and end on a multiple of `elem_bytes`.
    Misaligned {
        /// The offending transfer.
        transfer: TransferId,
    },
    /// The loss bound is outside `[0, 1]` (or NaN).
    BadLossBound {
        /// The offending transfer.
        transfer: TransferId,
    },
    /// The priority is above 7.
    BadPriority {
        /// The offending transfer.
        transfer: TransferId,
    },
    /// A dependency that is not a transfer into or out of the sender.
    ForeignDependency {
        /// The offending transfer.
        transfer: TransferId,
        /// The dependency its sender takes no part in.
        dep: TransferId,
    },
    /// A dependency on itself, on a transfer that does not exist, or a cycle: the
    /// transfer could never start.
    Cycle {
        /// A transfer that could never start.
        transfer: TransferId,
    },
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::RankOutOfRange { transfer, rank, world } => {
                write!(f, "transfer {transfer}: rank {rank} is outside the world of {world}")
            }
            ScheduleError::SelfTransfer { transfer } => write!(f, "transfer {transfer} sends to its own rank"),
            ScheduleError::BadRange { transfer } => {
                write!(f, "transfer {transfer}: range is empty or outside the buffer")
            }
            ScheduleError::Misaligned { transfer } => write!(f, "transfer {transfer}: range is not element-aligned"),
            ScheduleError::BadLossBound { transfer } => write!(f, "transfer {transfer}: loss bound outside [0, 1]"),
            ScheduleError::BadPriority { transfer } => write!(f, "transfer {transfer}: priority above 7"),
            ScheduleError::ForeignDependency { transfer, dep } => {
                write!(f, "transfer {transfer} depends on transfer {dep}, which its sender neither sends nor receives")
            }
            ScheduleError::Cycle { transfer } => write!(f, "transfer {transfer} is part of a dependency cycle"),
        }
    }
}

impl std::error::Error for ScheduleError {}

impl Schedule {
    /// Checks every invariant the executors rely on. Generators' output always passes.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        let e = self.elem_bytes.max(1) as u64;
        for (i, t) in self.transfers.iter().enumerate() {
            let id = i as TransferId;
            for rank in [t.src, t.dst] {
                if rank >= self.world {
                    return Err(ScheduleError::RankOutOfRange { transfer: id, rank, world: self.world });
                }
            }
            if t.src == t.dst {
                return Err(ScheduleError::SelfTransfer { transfer: id });
            }
            if t.range.start >= t.range.end || t.range.end > self.bytes {
                return Err(ScheduleError::BadRange { transfer: id });
            }
            if t.range.start % e != 0 || t.range.end % e != 0 {
                return Err(ScheduleError::Misaligned { transfer: id });
            }
            if !(0.0..=1.0).contains(&t.loss_bound) {
                return Err(ScheduleError::BadLossBound { transfer: id });
            }
            if t.priority > 7 {
                return Err(ScheduleError::BadPriority { transfer: id });
            }
            for &d in &t.after {
                let dep = self.transfers.get(d as usize).ok_or(ScheduleError::Cycle { transfer: id })?;
                if dep.src != t.src && dep.dst != t.src {
                    return Err(ScheduleError::ForeignDependency { transfer: id, dep: d });
                }
            }
        }
        // Kahn's algorithm: every transfer must become ready.
        let n = self.transfers.len();
        let mut indegree: Vec<usize> = self.transfers.iter().map(|t| t.after.len()).collect();
        let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, t) in self.transfers.iter().enumerate() {
            for &d in &t.after {
                dependants[d as usize].push(i);
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut seen = 0;
        while let Some(i) = ready.pop() {
            seen += 1;
            for &j in &dependants[i] {
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.push(j);
                }
            }
        }
        if seen < n {
            let stuck = indegree.iter().position(|&d| d > 0).unwrap_or(0);
            return Err(ScheduleError::Cycle { transfer: stuck as TransferId });
        }
        Ok(())
    }

    /// Transfers `rank` sends, in schedule order.
    pub fn sends_of(&self, rank: Rank) -> impl Iterator<Item = TransferId> + '_ {
        self.ids().filter(move |&i| self.transfers[i as usize].src == rank)
    }

    /// Transfers `rank` receives, in schedule order.
    pub fn receives_of(&self, rank: Rank) -> impl Iterator<Item = TransferId> + '_ {
        self.ids().filter(move |&i| self.transfers[i as usize].dst == rank)
    }

    fn ids(&self) -> impl Iterator<Item = TransferId> {
        0..self.transfers.len() as TransferId
    }

    /// Bytes sent between ranks for which `same_region` is false (e.g. across racks).
    pub fn bytes_between_regions(&self, same_region: impl Fn(Rank, Rank) -> bool) -> u64 {
        self.transfers.iter().filter(|t| !same_region(t.src, t.dst)).map(Transfer::bytes).sum()
    }

    /// Longest chain of dependent transfers (1 for a schedule without dependencies).
    pub fn dependency_depth(&self) -> u32 {
        let mut depth = vec![0u32; self.transfers.len()];
        // Dependencies may point forward, so relax until stable (schedules are acyclic).
        loop {
            let mut changed = false;
            for (i, t) in self.transfers.iter().enumerate() {
                let d = 1 + t.after.iter().map(|&a| depth[a as usize]).max().unwrap_or(0);
                if d > depth[i] {
                    depth[i] = d;
                    changed = true;
                }
            }
            if !changed {
                return depth.into_iter().max().unwrap_or(0);
            }
        }
    }
}
