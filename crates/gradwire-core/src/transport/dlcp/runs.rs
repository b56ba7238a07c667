//! The segment runs a DLCP sender still has to send this round.

use std::collections::VecDeque;
use std::ops::Range;

/// A FIFO of segment runs whose head run lives inline: sending the next segment reads
/// only the sender itself, not a separate allocation (the simulator keeps ~10^5 senders
/// and the extra cache miss per packet was measurable). Most rounds are one run.
#[derive(Debug, Default)]
pub(super) struct RunQueue {
    head: Option<Range<u64>>,
    rest: VecDeque<Range<u64>>,
}

impl RunQueue {
    pub fn push_back(&mut self, run: Range<u64>) {
        match self.head {
            None => self.head = Some(run),
            Some(_) => self.rest.push_back(run),
        }
    }

    pub fn extend(&mut self, runs: impl IntoIterator<Item = Range<u64>>) {
        for run in runs {
            self.push_back(run);
        }
    }

    /// The next segment index, in queue order.
    pub fn pop_index(&mut self) -> Option<u64> {
        let run = self.head.as_mut()?;
        let index = run.start;
        run.start += 1;
        if run.is_empty() {
            self.head = self.rest.pop_front();
        }
        Some(index)
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    pub fn clear(&mut self) {
        self.head = None;
        self.rest.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_every_index_of_every_run_in_order() {
        let mut q = RunQueue::default();
        assert!(q.is_empty());
        q.push_back(3..5);
        q.extend([7..8, 0..2]);
        let got: Vec<u64> = std::iter::from_fn(|| q.pop_index()).collect();
        assert_eq!(got, [3, 4, 7, 0, 1]);
        assert!(q.is_empty());
        q.extend([1..3]);
        q.clear();
        assert_eq!(q.pop_index(), None);
    }
}
