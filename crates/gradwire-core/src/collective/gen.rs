//! What every generator shares: options, even splitting, a transfer builder, and one
//! reduce-then-broadcast pass over a tree (used by `tree` and `rat`).

use super::{Op, Rank, Schedule, Transfer, TransferId};
use std::ops::Range;

/// Per-collective knobs every generator takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CollectiveOptions {
    /// Loss bound of transfers that carry partial sums ([`Op::Reduce`]: ring reduce-scatter,
    /// tree reduce, PS push).
    pub reduce_loss_bound: f64,
    /// Loss bound of transfers that carry results ([`Op::Copy`]: ring all-gather, tree
    /// broadcast, PS pull).
    pub broadcast_loss_bound: f64,
    /// Switch queue of every transfer (0..=7).
    pub priority: u8,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        CollectiveOptions { reduce_loss_bound: 0.0, broadcast_loss_bound: 0.0, priority: 1 }
    }
}

/// `bytes` cut into `parts` element-aligned ranges covering it in order, as even as
/// possible: the first `elements % parts` pieces get one element more. Pieces may be empty
/// when there are fewer elements than parts.
///
/// # Panics
/// If `elem_bytes` or `parts` is 0, or `bytes` is not a multiple of `elem_bytes`.
pub fn split_even(bytes: u64, elem_bytes: u32, parts: u32) -> Vec<Range<u64>> {
    assert!(elem_bytes > 0, "elem_bytes must be positive");
    assert!(parts > 0, "cannot split into 0 parts");
    let e = elem_bytes as u64;
    assert!(bytes.is_multiple_of(e), "bytes ({bytes}) is not a multiple of elem_bytes ({elem_bytes})");
    let elems = bytes / e;
    let (base, extra) = (elems / parts as u64, elems % parts as u64);
    let mut at = 0;
    (0..parts as u64)
        .map(|i| {
            let len = (base + (i < extra) as u64) * e;
            let r = at..at + len;
            at += len;
            r
        })
        .collect()
}

/// Appends transfers with the options' loss bound (by op) and priority.
pub(crate) struct Builder {
    schedule: Schedule,
    opts: CollectiveOptions,
}

impl Builder {
    /// # Panics
    /// On a zero `elem_bytes`, `bytes` not a multiple of it, or bad options.
    pub(crate) fn new(name: &str, world: u32, bytes: u64, elem_bytes: u32, opts: &CollectiveOptions) -> Builder {
        assert!(elem_bytes > 0, "elem_bytes must be positive");
        assert!(
            bytes.is_multiple_of(elem_bytes as u64),
            "bytes ({bytes}) is not a multiple of elem_bytes ({elem_bytes})"
        );
        for (what, b) in
            [("reduce_loss_bound", opts.reduce_loss_bound), ("broadcast_loss_bound", opts.broadcast_loss_bound)]
        {
            assert!((0.0..=1.0).contains(&b), "{what} must be in [0, 1] (got {b})");
        }
        assert!(opts.priority <= 7, "priority must be 0..=7 (got {})", opts.priority);
        Builder {
            schedule: Schedule { name: name.into(), world, bytes, elem_bytes, transfers: Vec::new() },
            opts: *opts,
        }
    }

    pub(crate) fn push(
        &mut self,
        src: Rank,
        dst: Rank,
        range: Range<u64>,
        op: Op,
        after: Vec<TransferId>,
    ) -> TransferId {
        let loss_bound = match op {
            Op::Reduce => self.opts.reduce_loss_bound,
            Op::Copy => self.opts.broadcast_loss_bound,
        };
        self.schedule.transfers.push(Transfer { src, dst, range, op, after, loss_bound, priority: self.opts.priority });
        (self.schedule.transfers.len() - 1) as TransferId
    }

    pub(crate) fn finish(self) -> Schedule {
        debug_assert_eq!(
            self.schedule.validate(),
            Ok(()),
            "generator {} built an invalid schedule",
            self.schedule.name
        );
        self.schedule
    }
}

/// Allreduce of `range` over a tree given by `parent` (indexed by rank; `None` for the
/// root and for ranks outside the tree): every non-root rank sends its partial sum up
/// (`Reduce`, after everything its children sent it), the root sends the total down
/// (`Copy`, after all its children's partial sums), every inner rank forwards it down
/// after receiving it. Emits nothing for an empty range or a lone root.
pub(crate) fn tree_allreduce(b: &mut Builder, parent: &[Option<Rank>], root: Rank, range: Range<u64>) {
    if range.is_empty() {
        return;
    }
    let n = parent.len();
    let mut children: Vec<Vec<Rank>> = vec![Vec::new(); n];
    for (r, p) in parent.iter().enumerate() {
        if let Some(p) = *p {
            children[p as usize].push(r as Rank);
        }
    }
    // Post-order from the root: a rank's reduce comes after its children's.
    let mut order = Vec::new();
    let mut stack = vec![(root, false)];
    while let Some((r, expanded)) = stack.pop() {
        if expanded {
            order.push(r);
        } else {
            stack.push((r, true));
            stack.extend(children[r as usize].iter().rev().map(|&c| (c, false)));
        }
    }
    let mut up: Vec<Option<TransferId>> = vec![None; n];
    for &r in &order {
        if let Some(p) = parent[r as usize] {
            let after = children[r as usize].iter().filter_map(|&c| up[c as usize]).collect();
            up[r as usize] = Some(b.push(r, p, range.clone(), Op::Reduce, after));
        }
    }
    // Broadcast, top-down (reverse post-order visits parents before children).
    let mut down: Vec<Option<TransferId>> = vec![None; n];
    for &r in order.iter().rev() {
        let after: Vec<TransferId> = match down[r as usize] {
            Some(d) => vec![d],
            None => children[r as usize].iter().filter_map(|&c| up[c as usize]).collect(),
        };
        for &c in &children[r as usize] {
            down[c as usize] = Some(b.push(r, c, range.clone(), Op::Copy, after.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_spreads_the_remainder_over_the_first_pieces() {
        assert_eq!(split_even(40, 4, 3), vec![0..16, 16..28, 28..40]);
        assert_eq!(split_even(8, 4, 3), vec![0..4, 4..8, 8..8]);
        assert_eq!(split_even(0, 2, 2), vec![0..0, 0..0]);
        assert_eq!(split_even(12, 2, 1), vec![0..12]);
    }

    #[test]
    #[should_panic(expected = "not a multiple")]
    fn split_rejects_partial_elements() {
        split_even(10, 4, 2);
    }
}
