//! The event queue, ordered by time and then by insertion, so that equal-time events run
//! in the order they were scheduled and a run is a pure function of its inputs and seed.
//! Each event is one `u128` (time | sequence | target). Events due within ~134 µs go into a
//! calendar wheel of 8.2 ns buckets (only the bucket being served is a heap); later ones
//! (RTOs, rate periods) wait in a binary heap. A pop takes the smaller of the two.

use gradwire_core::Time;
use std::collections::BinaryHeap;

/// What an event wakes up. Each variant names a component by index; the component
/// itself keeps its state, the event carries nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// A port finished serializing the packet in service.
    TxDone(u32),
    /// The head packet of a link's wire reaches the far end.
    Arrive(u32),
    /// An endpoint's timer.
    Timer(u32),
    /// A flow released by a barrier starts.
    FlowStart(u32),
    /// The next batch of flows from the time-sorted start list begins.
    Starts,
    /// A scheduled failure (index into the scenario's failures).
    Failure(u32),
    /// Periodic queue-length sampling.
    Sample,
    /// Node pauses and paused links: see `sim::pause`.
    Pause(u32),
}

/// Latest time an event may be scheduled at: 2^50 ps, about 18.7 minutes of simulated time.
pub const MAX_TIME: Time = (1 << TIME_BITS) - 1;
const TIME_BITS: u32 = 50;
const SEQ_BITS: u32 = 46;
const TARGET_BITS: u32 = 32;

impl Target {
    fn pack(self) -> u32 {
        let (kind, index) = match self {
            Target::TxDone(i) => (0, i),
            Target::Arrive(i) => (1, i),
            Target::Timer(i) => (2, i),
            Target::FlowStart(i) => (3, i),
            Target::Failure(i) => (4, i),
            Target::Sample => (5, 0),
            Target::Starts => (6, 0),
            Target::Pause(i) => (7, i),
        };
        debug_assert!(index < 1 << 29, "component index overflows the event key");
        kind << 29 | index
    }

    fn unpack(v: u32) -> Target {
        let index = v & ((1 << 29) - 1);
        match v >> 29 {
            0 => Target::TxDone(index),
            1 => Target::Arrive(index),
            2 => Target::Timer(index),
            3 => Target::FlowStart(index),
            4 => Target::Failure(index),
            5 => Target::Sample,
            6 => Target::Starts,
            _ => Target::Pause(index),
        }
    }
}

/// One heap entry is one `u128`: time (50 bits) | insertion sequence (46) | target (32).
/// A single integer comparison orders events, and 16-byte entries halve the memory a
/// heap pop moves — the pop is the simulator's hottest function.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Entry(u128);

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.cmp(&self.0) // reversed: the max-heap pops the earliest
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A calendar wheel in front of a heap, with one order. Events due within [`NEAR`] of the
/// current bucket (link arrivals, serialization ends, pacing) are appended to a bucket of
/// [`BUCKET`] picoseconds, O(1) and one cache line; only the bucket being served is a heap,
/// built when it comes up, small enough to stay in L1. Later events (retransmission
/// timeouts, flow timers: one per live flow, ~10^6 at 1 024 hosts) wait in `far`, a wheel
/// of the same shape one level up ([`FarQueue`]). A pop takes the earlier of the two
/// served heaps' tops, so the order is exactly that of a single heap — (time, insertion
/// sequence) — and runs stay byte-identical.
///
/// (Measured: a single near heap of ~10^4–10^5 entries spent ~15 % of a 144-host run in
/// its sift-down, on cold lines deep in the heap. A radix heap and a 4-ary heap lost
/// to it: with the sequence number in the low bits radix buckets degenerate; the 4-ary
/// heap was a wash. A single `far` heap missed the cache at every level of its pops:
/// replacing it, with the 2-byte next hops of `routing.rs`, took a 1 024-host run to
/// 0.795× its CPU, docs/performance.md.)
#[derive(Default)]
pub struct EventQueue {
    near: Wheel<BUCKET_BITS>,
    far: FarQueue,
    next_seq: u64,
}

const BUCKET_BITS: u32 = 13;
/// Width of a wheel bucket: 2^13 ps ≈ 8.2 ns (a 144-host run has ~8 events per ns).
pub const BUCKET: Time = 1 << BUCKET_BITS;
const BUCKETS: u64 = 1 << 14;
/// Horizon of the wheel: 2^14 buckets, ≈ 134 µs (in ps).
pub const NEAR: Time = BUCKET * BUCKETS;
/// Coarse buckets of the far events' time: [`NEAR`] each, so 2^14 of them reach ≈ 2.2 s.
const COARSE_BITS: u32 = BUCKET_BITS + 14;
/// Capacity (events) a bucket's buffer may keep once served. Buffers rotate between the
/// served heap and the buckets, so every bucket would end up holding the largest burst
/// any bucket ever saw: 37 MB at 128 hosts, where a bucket averages ~4 events. Larger
/// buffers are freed, which bounds a wheel's idle capacity at 16 384 × 32 × 16 B (8 MiB).
const KEEP_CAPACITY: usize = 32;

impl EventQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `target` at `at` (clamped to [`MAX_TIME`]; callers stop before that).
    #[inline]
    pub fn push(&mut self, at: Time, target: Target) {
        let at = at.min(MAX_TIME);
        let seq = (self.next_seq & ((1 << SEQ_BITS) - 1)) as u128;
        let e = Entry((at as u128) << (SEQ_BITS + TARGET_BITS) | seq << TARGET_BITS | target.pack() as u128);
        self.next_seq += 1;
        if let Err(e) = self.near.place(e) {
            self.far.push(e);
        }
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(Time, Target)> {
        // `Entry`'s order is reversed: the greater entry is the earlier event
        let from_far = match (self.near.current.peek(), self.far.peek()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(n), Some(f)) => f > n,
        };
        let e = if from_far { self.far.pop() } else { self.near.pop() }?;
        if from_far && self.near.current.is_empty() {
            // An empty near wheel restarts at the clock. Its horizon counts from the bucket
            // it last served: after a gap longer than that (an idle network while timers
            // fire), every event would be beyond it and go to `far`, for the rest of the run.
            self.near.cur = e.bucket::<BUCKET_BITS>();
        }
        let Entry(k) = e;
        let t = (k >> (SEQ_BITS + TARGET_BITS)) as Time;
        Some((t, Target::unpack(k as u32)))
    }

    /// The target of the event the next `pop` returns, without popping it (the event loop
    /// uses it to start loading that component's memory while the current event runs).
    #[inline]
    pub fn peek_target(&self) -> Option<Target> {
        let top = match (self.near.current.peek(), self.far.peek()) {
            (n, None) => n?,
            (None, Some(f)) => f,
            (Some(n), Some(f)) => n.max(f),
        };
        Some(Target::unpack(top.0 as u32))
    }

    /// When the event the next `pop` returns is due.
    pub fn peek_time(&self) -> Option<Time> {
        let top = match (self.near.current.peek(), self.far.peek()) {
            (n, None) => n?,
            (None, Some(f)) => f,
            (Some(n), Some(f)) => n.max(f),
        };
        Some((top.0 >> (SEQ_BITS + TARGET_BITS)) as Time)
    }

    pub fn len(&self) -> usize {
        self.near.len() + self.far.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Entry {
    /// Index of the bucket of `2^BITS` picoseconds the event falls in.
    #[inline]
    fn bucket<const BITS: u32>(self) -> u64 {
        (self.0 >> (SEQ_BITS + TARGET_BITS)) as u64 >> BITS
    }
}

/// One level of the queue: buckets of `2^BITS` ps, [`BUCKETS`] of them ahead of the one
/// being served, unsorted, one bit each for the non-empty ones; the served bucket is a heap.
struct Wheel<const BITS: u32> {
    /// Events of buckets up to `cur` (every one earlier than any event in `lists`); empty
    /// only when the wheel is.
    current: BinaryHeap<Entry>,
    /// Absolute index of the bucket being served.
    cur: u64,
    /// Buckets `cur + 1 .. cur + BUCKETS`, at index `b % BUCKETS`.
    lists: Vec<Vec<Entry>>,
    occupied: Vec<u64>,
    /// Events in `lists`.
    in_lists: usize,
    /// No event in the wheel lies in a later bucket (an upper bound, reset when the wheel
    /// empties): how far back `cur` may be moved (see `rewind`).
    last: u64,
}

impl<const BITS: u32> Default for Wheel<BITS> {
    fn default() -> Self {
        Wheel {
            current: BinaryHeap::new(),
            cur: 0,
            lists: (0..BUCKETS).map(|_| Vec::new()).collect(),
            occupied: vec![0; (BUCKETS / 64) as usize],
            in_lists: 0,
            last: 0,
        }
    }
}

impl<const BITS: u32> Wheel<BITS> {
    /// Queue `e`, or hand it back if it lies beyond the horizon. An empty wheel serves the
    /// event's own bucket (keeping `current` non-empty while the wheel holds events, so
    /// its top is the wheel's first event).
    #[inline]
    fn place(&mut self, e: Entry) -> Result<(), Entry> {
        let b = e.bucket::<BITS>();
        if b < self.cur && self.last - b < BUCKETS && !self.current.is_empty() {
            self.rewind(b);
        }
        if b <= self.cur {
            self.current.push(e);
        } else if b - self.cur >= BUCKETS {
            return Err(e);
        } else if self.current.is_empty() {
            debug_assert_eq!(self.in_lists, 0);
            self.serve_alone(e);
        } else {
            self.append(b, e);
            self.last = self.last.max(b);
        }
        Ok(())
    }

    /// An empty wheel serves `e`'s bucket, however far ahead.
    fn serve_alone(&mut self, e: Entry) {
        self.cur = e.bucket::<BITS>();
        self.last = self.cur;
        self.current.push(e);
    }

    #[inline]
    fn append(&mut self, b: u64, e: Entry) {
        let i = (b % BUCKETS) as usize;
        self.lists[i].push(e);
        self.occupied[i / 64] |= 1 << (i % 64);
        self.in_lists += 1;
    }

    /// Serve bucket `b`, earlier than the one served, which goes back to its list. The
    /// wheel serves the first occupied bucket, which can lie well ahead of the clock (the
    /// far wheel's first timer was a 200 ms initial RTO, before any RTT sample); without
    /// this every event scheduled into the gap joined the served heap, which grew to every
    /// live flow's timer (~10^5 at 432 hosts) and cost a cold sift-down per pop. Only while
    /// every event stays within a horizon of `b` (`last`), so the lists keep one bucket
    /// per slot.
    #[cold]
    fn rewind(&mut self, b: u64) {
        let served = std::mem::take(&mut self.current).into_vec();
        self.cur = b;
        for e in served {
            match e.bucket::<BITS>() {
                x if x <= b => self.current.push(e),
                x => self.append(x, e),
            }
        }
    }

    /// Pop the first event, then serve the next bucket if that emptied the heap.
    #[inline]
    fn pop(&mut self) -> Option<Entry> {
        let e = self.current.pop()?;
        if self.current.is_empty() && self.in_lists > 0 {
            self.serve(self.next().expect("a bucket is occupied"));
        }
        Some(e)
    }

    /// Absolute index of the first non-empty bucket after `cur`, if any.
    fn next(&self) -> Option<u64> {
        (self.in_lists > 0).then(|| {
            let start = (self.cur + 1) % BUCKETS;
            self.cur + (self.first_occupied(start) as u64 + BUCKETS - start) % BUCKETS + 1
        })
    }

    /// Serve bucket `b` (the first non-empty one, or any if none is): its events become
    /// the heap, whose old buffer becomes the bucket's, so allocations are reused, unless
    /// a burst left it large.
    fn serve(&mut self, b: u64) {
        self.cur = b;
        self.last = self.last.max(b);
        let i = (b % BUCKETS) as usize;
        if self.occupied[i / 64] & 1 << (i % 64) == 0 {
            return;
        }
        self.occupied[i / 64] &= !(1 << (i % 64));
        let events = std::mem::take(&mut self.lists[i]);
        self.in_lists -= events.len();
        let spare = std::mem::replace(&mut self.current, BinaryHeap::from(events)).into_vec();
        if spare.capacity() <= KEEP_CAPACITY {
            self.lists[i] = spare;
        }
        // the bucket after this one was written up to a horizon ago: start loading it
        if let Some(n) = self.next() {
            let list = &self.lists[(n % BUCKETS) as usize];
            for e in list.iter().step_by(4).take(4) {
                gradwire_core::prefetch::line(e as *const Entry as *const u8);
            }
        }
    }

    /// The first occupied bucket at or after `start`, wrapping around; one must exist.
    fn first_occupied(&self, start: u64) -> usize {
        let words = self.occupied.len();
        let (w0, bit) = ((start / 64) as usize, start % 64);
        let first = self.occupied[w0] & (!0u64 << bit);
        if first != 0 {
            return w0 * 64 + first.trailing_zeros() as usize;
        }
        for k in 1..=words {
            let w = (w0 + k) % words;
            if self.occupied[w] != 0 {
                return w * 64 + self.occupied[w].trailing_zeros() as usize;
            }
        }
        unreachable!("only called with a bucket occupied")
    }

    fn len(&self) -> usize {
        self.current.len() + self.in_lists
    }
}

/// The events beyond the near wheel's horizon: a wheel of coarse buckets of [`NEAR`]
/// (≈ 2.2 s ahead) and, beyond that, a heap. A far event costs one append when scheduled
/// and a pop in a heap of one coarse bucket's events (thousands, in cache) instead of a
/// pop in one heap of all of them. `overflow` (backed-off RTOs) is moved into the served
/// heap before any of it can be due.
#[derive(Default)]
struct FarQueue {
    wheel: Wheel<COARSE_BITS>,
    /// Events at or beyond `wheel.cur + BUCKETS` when they were scheduled.
    overflow: BinaryHeap<Entry>,
}

impl FarQueue {
    fn push(&mut self, e: Entry) {
        match self.wheel.place(e) {
            Ok(()) => {}
            // nothing is far: serve this event's bucket, however far it is
            Err(e) if self.wheel.current.is_empty() => {
                debug_assert!(self.overflow.is_empty());
                self.wheel.serve_alone(e);
            }
            Err(e) => self.overflow.push(e),
        }
    }

    #[inline]
    fn peek(&self) -> Option<&Entry> {
        self.wheel.current.peek()
    }

    #[inline]
    fn pop(&mut self) -> Option<Entry> {
        let served = self.wheel.cur;
        let e = self.wheel.pop()?;
        if !self.overflow.is_empty() && (self.wheel.current.is_empty() || self.wheel.cur != served) {
            self.take_overflow();
        }
        Some(e)
    }

    /// The wheel has moved on to a later bucket, or emptied (then it serves `overflow`'s
    /// first bucket): whatever of `overflow` is not later than the served bucket joins its
    /// heap. (While `overflow` holds events the served heap is never empty.)
    #[cold]
    fn take_overflow(&mut self) {
        if self.wheel.current.is_empty() {
            let first = self.overflow.peek().expect("called with overflow left").bucket::<COARSE_BITS>();
            self.wheel.serve(first);
        }
        while self.overflow.peek().is_some_and(|e| e.bucket::<COARSE_BITS>() <= self.wheel.cur) {
            let e = self.overflow.pop().expect("peeked");
            self.wheel.current.push(e);
        }
    }

    fn len(&self) -> usize {
        self.wheel.len() + self.overflow.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn targets_round_trip_through_the_key() {
        let all = [
            Target::TxDone(0),
            Target::Arrive(7),
            Target::Timer((1 << 29) - 1),
            Target::FlowStart(3),
            Target::Failure(2),
            Target::Sample,
            Target::Starts,
            Target::Pause(7),
        ];
        let mut q = EventQueue::new();
        for (i, &t) in all.iter().enumerate() {
            q.push(MAX_TIME - i as u64, t);
        }
        let mut got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        got.reverse();
        assert_eq!(got, all.iter().enumerate().map(|(i, &t)| (MAX_TIME - i as u64, t)).collect::<Vec<_>>());
    }

    #[test]
    fn a_served_bucket_ahead_of_the_clock_does_not_collect_the_events_before_it() {
        const US: Time = 1_000_000;
        let mut q = EventQueue::new();
        // the first far event, an initial RTO, makes its coarse bucket the served one;
        // then RTOs of 10 ms, as after the first RTT samples, land before it
        q.push(200_000 * US, Target::Timer(0));
        for i in 1..10_000 {
            q.push(10_000 * US + i as Time * US, Target::Timer(i));
        }
        assert!(q.far.wheel.current.len() < 200, "served heap {}", q.far.wheel.current.len());
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, t)| t).collect();
        let want: Vec<_> = (1..10_000).chain([0]).map(Target::Timer).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn after_an_idle_gap_near_events_go_to_the_near_wheel_again() {
        let mut q = EventQueue::new();
        q.push(10, Target::Arrive(0));
        assert_eq!(q.pop(), Some((10, Target::Arrive(0))));
        // the network idles while a timer fires well beyond the near horizon
        q.push(5 * NEAR, Target::Timer(1));
        assert_eq!(q.pop(), Some((5 * NEAR, Target::Timer(1))));
        for i in 0..100 {
            q.push(5 * NEAR + 1000 * i, Target::Arrive(i as u32));
        }
        assert_eq!(q.far.len(), 0, "near events went to the far queue");
        assert_eq!(q.near.len(), 100);
    }

    proptest! {
        /// Pops come out in time order, and equal times in insertion order.
        #[test]
        fn pops_in_time_then_insertion_order(times in proptest::collection::vec(0u64..50, 0..300)) {
            let mut q = EventQueue::new();
            for (i, &t) in times.iter().enumerate() {
                q.push(t, Target::Timer(i as u32));
            }
            let mut expected: Vec<(u64, u32)> = times.iter().enumerate().map(|(i, &t)| (t, i as u32)).collect();
            expected.sort(); // stable by (time, index) == (time, insertion)
            let mut got = Vec::new();
            while let Some((t, Target::Timer(i))) = q.pop() {
                got.push((t, i));
            }
            prop_assert_eq!(got, expected);
        }

        /// Interleaved as in a simulation (each push at or after the last pop), the queue
        /// agrees with a reference ordered set on every pop.
        #[test]
        fn interleaved_matches_reference(ops in proptest::collection::vec((0u64..20, 0usize..4), 1..400)) {
            check_against_reference(ops.into_iter().map(|(delay, n)| vec![delay; n]))?;
        }

        /// Delays spread over a few buckets, many buckets and past the wheel's horizon, so
        /// pushes land in the served bucket, in later buckets (wrapping the wheel many
        /// times over a run) and in `far`.
        #[test]
        fn wheel_buckets_and_far_keep_one_order(ops in proptest::collection::vec((0u64..3, 0u64..1 << 20, 0usize..4), 1..600)) {
            check_against_reference(ops.into_iter().map(|(scale, x, n)| {
                let delay = match scale {
                    0 => x % (4 * BUCKET),
                    1 => x * (NEAR >> 20),
                    _ => x * ((3 * NEAR) >> 20),
                };
                (0..n as u64).map(|k| delay / (k + 1)).collect()
            }))?;
        }

        /// Far delays over many coarse buckets and past their horizon, so far events land
        /// in the served coarse bucket, in later ones (wrapping) and in `overflow`, and
        /// come due between one another and near ones. (At most 200 rounds of at most 2^42
        /// ps stay below `MAX_TIME`.)
        #[test]
        fn coarse_buckets_and_overflow_keep_one_order(ops in proptest::collection::vec((0u64..4, 0u64..1 << 20, 0usize..4), 1..200)) {
            check_against_reference(ops.into_iter().map(|(scale, x, n)| {
                let delay = match scale {
                    0 => x % (2 * NEAR),
                    1 => x << (COARSE_BITS - 20 + 4),
                    2 => x << (COARSE_BITS + 14 - 20),
                    _ => x << (COARSE_BITS + 15 - 20),
                };
                (0..n as u64).map(|k| delay / (k + 1)).collect()
            }))?;
        }

        /// The same with delays on both sides of the near horizon: far events come due
        /// between near ones and still pop in (time, insertion) order.
        #[test]
        fn near_and_far_heaps_keep_one_order(ops in proptest::collection::vec((0u64..20, 0usize..4), 1..400)) {
            check_against_reference(ops.into_iter().map(|(d, n)| vec![d * (NEAR / 4) + (d & 1); n]))?;
        }
    }

    /// Drive a queue as the simulation does (each round pushes at `now + delay` for each of
    /// its delays, then pops once; `now` is the last pop's time) beside a reference ordered
    /// set: every peek, pop and length must agree with it.
    fn check_against_reference(rounds: impl Iterator<Item = Vec<Time>>) -> Result<(), TestCaseError> {
        let mut q = EventQueue::new();
        let mut reference = std::collections::BTreeSet::new();
        let (mut now, mut seq) = (0u64, 0u32);
        for delays in rounds {
            for delay in delays {
                q.push(now + delay, Target::Timer(seq));
                reference.insert((now + delay, seq));
                seq += 1;
            }
            let peeked = q.peek_target();
            let got = q.pop();
            prop_assert_eq!(peeked, got.map(|(_, target)| target));
            let want = reference.pop_first();
            prop_assert_eq!(got, want.map(|(t, i)| (t, Target::Timer(i))));
            prop_assert_eq!(q.len(), reference.len());
            if let Some((t, _)) = want {
                now = t;
            }
        }
        Ok(())
    }
}
