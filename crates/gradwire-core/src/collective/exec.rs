//! One rank's view of a schedule: which of its sends may start now.
//!
//! The world reports what finished at this rank (`received`: delivered and applied;
//! `sent`: the sender side is done) and drains `poll_ready` for sends whose dependencies
//! are all met. Pure bookkeeping: no bytes, no clock.

use super::{Rank, Schedule, TransferId};

/// A finish report [`RankExec`] refused: a bug in the world driving it, not in the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// The transfer does not exist, or this rank is not the end the call claims.
    NotOurs {
        /// The transfer reported.
        transfer: TransferId,
        /// This executor's rank.
        rank: Rank,
    },
    /// Reported finished twice.
    AlreadyDone {
        /// The transfer reported.
        transfer: TransferId,
    },
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::NotOurs { transfer, rank } => write!(f, "transfer {transfer} does not end at rank {rank}"),
            ExecError::AlreadyDone { transfer } => write!(f, "transfer {transfer} was already reported finished"),
        }
    }
}

impl std::error::Error for ExecError {}

/// Dependency tracking for one rank of a [`Schedule`]: which of the rank's sends may
/// start, given which of its transfers have finished. Sends become ready in schedule
/// order.
#[derive(Clone, Debug)]
pub struct RankExec {
    rank: Rank,
    /// For every transfer of the schedule: unmet dependencies (only tracked for our sends).
    pending: Vec<u32>,
    /// Our sends that depend on each transfer.
    dependants: Vec<Vec<TransferId>>,
    done: Vec<bool>,
    ready: Vec<TransferId>,
    /// Our sends and receives not yet finished.
    open: usize,
}

impl RankExec {
    /// The schedule must be valid ([`Schedule::validate`]).
    pub fn new(schedule: &Schedule, rank: Rank) -> Self {
        let n = schedule.transfers.len();
        let mut pending = vec![0u32; n];
        let mut dependants = vec![Vec::new(); n];
        let mut ready = Vec::new();
        let mut open = 0;
        for (i, t) in schedule.transfers.iter().enumerate() {
            if t.dst == rank {
                open += 1;
            }
            if t.src != rank {
                continue;
            }
            open += 1;
            pending[i] = t.after.len() as u32;
            for &d in &t.after {
                dependants[d as usize].push(i as TransferId);
            }
            if t.after.is_empty() {
                ready.push(i as TransferId);
            }
        }
        // Start in schedule order.
        ready.reverse();
        RankExec { rank, pending, dependants, done: vec![false; n], ready, open }
    }

    /// The rank this executor tracks.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Next send whose dependencies are all met (each returned once).
    pub fn poll_ready(&mut self) -> Option<TransferId> {
        self.ready.pop()
    }

    /// `transfer` (one of ours, either end) finished at this rank.
    pub fn finished(&mut self, schedule: &Schedule, transfer: TransferId) -> Result<(), ExecError> {
        schedule
            .transfers
            .get(transfer as usize)
            .filter(|t| t.src == self.rank || t.dst == self.rank)
            .ok_or(ExecError::NotOurs { transfer, rank: self.rank })?;
        if std::mem::replace(&mut self.done[transfer as usize], true) {
            return Err(ExecError::AlreadyDone { transfer });
        }
        self.open -= 1;
        let mut newly = Vec::new();
        for &s in &self.dependants[transfer as usize] {
            let p = &mut self.pending[s as usize];
            *p -= 1;
            if *p == 0 {
                newly.push(s);
            }
        }
        // Keep schedule order: smaller ids pop first.
        self.ready.extend(newly);
        self.ready.sort_unstable_by(|a, b| b.cmp(a));
        Ok(())
    }

    /// `transfer` has been reported finished here (false for an unknown id).
    pub fn is_finished(&self, transfer: TransferId) -> bool {
        self.done.get(transfer as usize).copied().unwrap_or(false)
    }

    /// Every send and receive of this rank has finished.
    pub fn is_complete(&self) -> bool {
        self.open == 0
    }

    /// Our sends and receives not yet finished.
    pub fn open(&self) -> usize {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Op, Transfer};

    fn t(src: Rank, dst: Rank, after: Vec<TransferId>) -> Transfer {
        Transfer { src, dst, range: 0..8, op: Op::Reduce, after, loss_bound: 0.0, priority: 1 }
    }

    #[test]
    fn sends_become_ready_after_their_dependencies() {
        // 0 -> 1, then 1 -> 2 after receiving it, then 2 -> 0.
        let s = Schedule {
            name: "chain".into(),
            world: 3,
            bytes: 8,
            elem_bytes: 4,
            transfers: vec![t(0, 1, vec![]), t(1, 2, vec![0]), t(2, 0, vec![1])],
        };
        s.validate().unwrap();
        let mut r1 = RankExec::new(&s, 1);
        assert_eq!(r1.poll_ready(), None);
        r1.finished(&s, 0).unwrap();
        assert_eq!(r1.poll_ready(), Some(1));
        assert!(!r1.is_complete());
        r1.finished(&s, 1).unwrap();
        assert!(r1.is_complete());
        assert_eq!(r1.finished(&s, 1), Err(ExecError::AlreadyDone { transfer: 1 }));
        assert_eq!(r1.finished(&s, 2), Err(ExecError::NotOurs { transfer: 2, rank: 1 }));
        let mut r0 = RankExec::new(&s, 0);
        assert_eq!(r0.poll_ready(), Some(0));
        assert_eq!(r0.poll_ready(), None);
    }

    #[test]
    fn validate_rejects_cycles_and_foreign_dependencies() {
        let cyc = Schedule {
            name: "c".into(),
            world: 2,
            bytes: 8,
            elem_bytes: 4,
            transfers: vec![t(0, 1, vec![1]), t(1, 0, vec![0])],
        };
        assert!(matches!(cyc.validate(), Err(ScheduleError::Cycle { .. })));
        let foreign = Schedule {
            name: "f".into(),
            world: 4,
            bytes: 8,
            elem_bytes: 4,
            transfers: vec![t(0, 1, vec![]), t(2, 3, vec![0])],
        };
        assert_eq!(foreign.validate(), Err(ScheduleError::ForeignDependency { transfer: 1, dep: 0 }));
        let mis = Schedule {
            name: "m".into(),
            world: 2,
            bytes: 8,
            elem_bytes: 4,
            transfers: vec![Transfer { range: 2..8, ..t(0, 1, vec![]) }],
        };
        assert_eq!(mis.validate(), Err(ScheduleError::Misaligned { transfer: 0 }));
    }

    use crate::collective::ScheduleError;
}
