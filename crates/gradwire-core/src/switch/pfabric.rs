//! pFabric's switch port (Alizadeh et al., SIGCOMM'13, §4.1): one small buffer scheduled
//! and dropped by a per-packet rank.
//!
//! * **Dequeue**: find the packet with the smallest rank (most urgent: the fewest bytes
//!   left in its flow); send the *earliest-arrived* packet of that packet's flow. Sending
//!   the flow's oldest packet instead of the smallest-ranked one keeps a flow's packets in
//!   order and avoids starving its older (larger-rank) packets.
//! * **Admission**: when the buffer cannot hold the arrival, the packet with the largest
//!   rank loses: either queued packets of larger rank than the arrival are pushed out
//!   (largest rank first; among equal ranks the latest arrival) until the arrival fits, or,
//!   when that cannot make room, the arrival itself is dropped. Equal ranks favour what is
//!   already queued.
//!
//! The buffer is a few BDPs (the paper uses about 2×BDP), so a linear scan per operation is
//! what the hardware design does too and costs less than keeping an index.
//!
//! Pushed-out packets are handed back through [`PFabricPort::pop_evicted`]: the driver must
//! drain it after every [`PFabricPort::enqueue`] and account them as dropped with
//! [`DropReason::Evicted`]. There is no ECN: `enqueue` never marks.

use std::collections::VecDeque;

use super::{Admit, BufferPool, DropReason, PortCounters};
use crate::packet::FlowId;

/// Size of a pFabric port's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PFabricPortConfig {
    /// Bytes the port may hold (on top of what its `BufferPool` allows); `u64::MAX` leaves
    /// only the pool as the limit. pFabric uses about 2×BDP per port.
    pub capacity_bytes: u64,
}

impl PFabricPortConfig {
    /// A buffer of `bdps` bandwidth-delay products of a `bits_per_sec` link with round
    /// trip `rtt` picoseconds, e.g. `with_bdp(2.0, 10_000_000_000, 12 * US)` = 30 kB.
    pub fn with_bdp(bdps: f64, bits_per_sec: u64, rtt: crate::time::Time) -> Self {
        let bdp = bits_per_sec as f64 * rtt as f64 / crate::time::SEC as f64 / 8.0;
        PFabricPortConfig { capacity_bytes: (bdps * bdp).round() as u64 }
    }

    /// No limit of its own (only the pool's); e.g. a host NIC that schedules by rank.
    pub fn unbounded() -> Self {
        PFabricPortConfig { capacity_bytes: u64::MAX }
    }
}

#[derive(Clone, Debug)]
struct Entry<T> {
    item: T,
    bytes: u32,
    rank: u64,
    flow: FlowId,
}

/// A pFabric egress port over items `T` (packet handles), generic like
/// [`super::EgressPort`] and driven the same way.
#[derive(Clone, Debug)]
pub struct PFabricPort<T> {
    cfg: PFabricPortConfig,
    /// Queued packets in arrival order.
    entries: VecDeque<Entry<T>>,
    bytes: u64,
    /// Pushed out by the last `enqueue`s, not yet taken by the driver.
    evicted: Vec<T>,
    /// Index of the first entry with the smallest rank, if known. A flow's ranks fall as it
    /// progresses, so a dequeue (a flow's *earliest* packet) rarely removes it: keeping it
    /// saves the full scan that was most of a busy port's cost; `None` rescans.
    min_at: Option<usize>,
    /// Totals since creation; `ecn_marked` stays 0.
    pub counters: PortCounters,
}

impl<T> PFabricPort<T> {
    /// An empty port.
    pub fn new(cfg: PFabricPortConfig) -> Self {
        PFabricPort {
            cfg,
            entries: VecDeque::new(),
            bytes: 0,
            evicted: Vec::new(),
            min_at: None,
            counters: PortCounters::default(),
        }
    }

    /// The buffer size it was built with.
    pub fn config(&self) -> &PFabricPortConfig {
        &self.cfg
    }

    /// Room for one more packet right now: the port's own limit and the pool's.
    fn room(&self, pool: &BufferPool) -> u64 {
        self.cfg.capacity_bytes.saturating_sub(self.bytes).min(pool.capacity_bytes - pool.used_bytes)
    }

    /// Offer a packet of `bytes` on the wire with pFabric `rank` (smaller is more urgent;
    /// use [`crate::Packet::switch_rank`]) belonging to `flow`. Answers `Queued` (never
    /// marked) or `Dropped(BufferFull)`; packets pushed out to make room wait in
    /// [`PFabricPort::pop_evicted`].
    pub fn enqueue(&mut self, item: T, bytes: u32, rank: u64, flow: FlowId, pool: &mut BufferPool) -> Admit {
        let need = bytes as u64;
        let room = self.room(pool);
        if need > room {
            // Only queued packets ranked strictly worse than the arrival may make room.
            let worse: u64 = self.entries.iter().filter(|e| e.rank > rank).map(|e| e.bytes as u64).sum();
            if room + worse < need {
                self.counters.dropped[DropReason::BufferFull as usize] += 1;
                return Admit::Dropped(DropReason::BufferFull);
            }
            // Push out the worst (latest among equals) until the arrival fits.
            while self.room(pool) < need {
                let (mut victim, mut worst) = (0, 0);
                for (i, e) in self.entries.iter().enumerate() {
                    if e.rank >= worst {
                        (victim, worst) = (i, e.rank);
                    }
                }
                debug_assert!(worst > rank);
                let e = self.remove(victim);
                self.release(e.bytes, pool);
                self.counters.dropped[DropReason::Evicted as usize] += 1;
                self.evicted.push(e.item);
            }
        }
        pool.used_bytes += need;
        self.bytes += need;
        // the first minimum stays first on a tie
        match self.min_at {
            Some(m) if rank < self.entries[m].rank => self.min_at = Some(self.entries.len()),
            None if self.entries.is_empty() => self.min_at = Some(0),
            _ => {}
        }
        self.entries.push_back(Entry { item, bytes, rank, flow });
        self.counters.enqueued += 1;
        self.counters.max_bytes = self.counters.max_bytes.max(self.bytes);
        Admit::Queued { marked: false }
    }

    /// Remove entry `i`, keeping `min_at` pointing at the same entry (or unknown if it goes).
    fn remove(&mut self, i: usize) -> Entry<T> {
        self.min_at = match self.min_at {
            Some(m) if m == i => None,
            Some(m) if i < m => Some(m - 1),
            other => other,
        };
        self.entries.remove(i).expect("index within the queue")
    }

    fn release(&mut self, bytes: u32, pool: &mut BufferPool) {
        pool.used_bytes -= bytes as u64;
        self.bytes -= bytes as u64;
    }

    /// A packet pushed out of the buffer by an earlier `enqueue`; the driver frees it and
    /// counts it as dropped with [`DropReason::Evicted`] (the port already counted it).
    pub fn pop_evicted(&mut self) -> Option<T> {
        self.evicted.pop()
    }

    /// Take the next packet: the earliest packet of the flow that holds the smallest rank.
    pub fn dequeue(&mut self, pool: &mut BufferPool) -> Option<T> {
        let best = match self.min_at {
            Some(m) => m,
            None => {
                let (mut best, mut best_rank) = (None, u64::MAX);
                for (i, e) in self.entries.iter().enumerate() {
                    if best.is_none() || e.rank < best_rank {
                        best = Some(i);
                        best_rank = e.rank;
                    }
                }
                self.min_at = best;
                best?
            }
        };
        let flow = self.entries[best].flow;
        let first = self.entries.iter().position(|e| e.flow == flow)?;
        let e = self.remove(first);
        self.release(e.bytes, pool);
        self.counters.dequeued += 1;
        self.counters.dequeued_bytes += e.bytes as u64;
        Some(e.item)
    }

    /// Remove everything (a link went down), in arrival order, for drop accounting.
    /// Packets already evicted stay in [`PFabricPort::pop_evicted`].
    pub fn drain(&mut self, pool: &mut BufferPool) -> Vec<T> {
        let mut out = Vec::with_capacity(self.entries.len());
        self.min_at = None;
        while let Some(e) = self.entries.pop_front() {
            self.release(e.bytes, pool);
            out.push(e.item);
        }
        out
    }

    /// Bytes (on the wire) queued, evicted packets excluded.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets queued, evicted packets excluded.
    pub fn packets(&self) -> usize {
        self.entries.len()
    }

    /// Nothing queued (evicted packets not yet popped do not count).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total drops over all reasons (evictions included).
    pub fn drops(&self) -> u64 {
        self.counters.dropped.iter().sum()
    }

    /// Record a drop that happened outside admission (link down, random loss).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.counters.dropped[reason as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Port of `cap` bytes; items are `(id, rank)` so tests can see what came out.
    fn port(cap: u64) -> PFabricPort<u32> {
        PFabricPort::new(PFabricPortConfig { capacity_bytes: cap })
    }

    /// A 3000-byte port filled by item 1 (rank 100) and item 2 (rank 900), 1500 bytes each.
    fn full_port(pool: &mut BufferPool) -> PFabricPort<u32> {
        let mut p = port(3000);
        p.enqueue(1, 1500, 100, 1, pool);
        p.enqueue(2, 1500, 900, 2, pool);
        p
    }

    fn drain_order(p: &mut PFabricPort<u32>, pool: &mut BufferPool) -> Vec<u32> {
        std::iter::from_fn(|| p.dequeue(pool)).collect()
    }

    #[test]
    fn serves_smallest_rank_first_across_flows() {
        let mut pool = BufferPool::unbounded();
        let mut p = port(u64::MAX);
        // (item, rank, flow): one packet per flow
        for (item, rank, flow) in [(1, 500, 1), (2, 100, 2), (3, 900, 3), (4, 50, 4), (5, 300, 5)] {
            assert_eq!(p.enqueue(item, 1500, rank, flow, &mut pool), Admit::Queued { marked: false });
        }
        assert_eq!(drain_order(&mut p, &mut pool), vec![4, 2, 5, 1, 3]);
        assert_eq!(pool.used_bytes, 0);
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn sends_the_earliest_packet_of_the_most_urgent_flow() {
        let mut pool = BufferPool::unbounded();
        let mut p = port(u64::MAX);
        // flow 1's ranks fall as it progresses; flow 2 sits in between
        p.enqueue(10, 1500, 3000, 1, &mut pool);
        p.enqueue(20, 1500, 2000, 2, &mut pool);
        p.enqueue(11, 1500, 1500, 1, &mut pool);
        // flow 1 holds the smallest rank (1500): its *earliest* packet (rank 3000) goes first
        assert_eq!(p.dequeue(&mut pool), Some(10));
        assert_eq!(p.dequeue(&mut pool), Some(11));
        assert_eq!(p.dequeue(&mut pool), Some(20));
        // ties on rank: arrival order
        p.enqueue(30, 100, 7, 3, &mut pool);
        p.enqueue(40, 100, 7, 4, &mut pool);
        assert_eq!(drain_order(&mut p, &mut pool), vec![30, 40]);
    }

    #[test]
    fn full_buffer_evicts_the_largest_rank() {
        let mut pool = BufferPool::unbounded();
        let mut p = full_port(&mut pool);
        // full: the arrival (rank 500) beats the queued rank 900, which is pushed out
        assert_eq!(p.enqueue(3, 1500, 500, 3, &mut pool), Admit::Queued { marked: false });
        assert_eq!(p.pop_evicted(), Some(2));
        assert_eq!(p.pop_evicted(), None);
        assert_eq!(p.counters.dropped[DropReason::Evicted as usize], 1);
        assert_eq!((p.bytes(), pool.used_bytes, p.packets()), (3000, 3000, 2));
        assert_eq!(drain_order(&mut p, &mut pool), vec![1, 3]);
    }

    #[test]
    fn full_buffer_drops_the_arrival_when_it_ranks_largest() {
        let mut pool = BufferPool::unbounded();
        let mut p = full_port(&mut pool);
        assert_eq!(p.enqueue(3, 1500, 1000, 3, &mut pool), Admit::Dropped(DropReason::BufferFull));
        // equal rank: what is queued stays
        assert_eq!(p.enqueue(4, 1500, 900, 4, &mut pool), Admit::Dropped(DropReason::BufferFull));
        assert_eq!(p.pop_evicted(), None);
        assert_eq!(p.counters.dropped[DropReason::BufferFull as usize], 2);
        assert_eq!(p.counters.dropped[DropReason::Evicted as usize], 0);
        assert_eq!(drain_order(&mut p, &mut pool), vec![1, 2]);
    }

    #[test]
    fn eviction_takes_several_small_packets_worst_and_latest_first() {
        let mut pool = BufferPool::unbounded();
        let mut p = port(1600);
        // four 400-byte packets; two share the worst rank
        p.enqueue(1, 400, 10, 1, &mut pool);
        p.enqueue(2, 400, 80, 2, &mut pool);
        p.enqueue(3, 400, 80, 3, &mut pool);
        p.enqueue(4, 400, 50, 4, &mut pool);
        // a 1000-byte arrival of rank 20 needs three of them out: 3 (rank 80, later), 2, then 4
        assert_eq!(p.enqueue(5, 1000, 20, 5, &mut pool), Admit::Queued { marked: false });
        let mut ev: Vec<u32> = std::iter::from_fn(|| p.pop_evicted()).collect();
        ev.sort();
        assert_eq!(ev, vec![2, 3, 4]);
        assert_eq!((p.bytes(), pool.used_bytes), (1400, 1400));
        // not enough worse-ranked bytes to make room: nothing is evicted, the arrival drops
        let mut q = port(1600);
        let mut pool2 = BufferPool::unbounded();
        q.enqueue(1, 800, 10, 1, &mut pool2);
        q.enqueue(2, 800, 90, 2, &mut pool2);
        assert_eq!(q.enqueue(3, 1500, 50, 3, &mut pool2), Admit::Dropped(DropReason::BufferFull));
        assert_eq!(q.pop_evicted(), None);
        assert_eq!(q.packets(), 2);
        // larger than the whole buffer: dropped
        assert_eq!(q.enqueue(4, 2000, 0, 4, &mut pool2), Admit::Dropped(DropReason::BufferFull));
    }

    #[test]
    fn the_pool_limits_too() {
        let mut pool = BufferPool::new(2000, None);
        let mut p = port(u64::MAX);
        p.enqueue(1, 1500, 700, 1, &mut pool);
        assert_eq!(p.enqueue(2, 1500, 800, 2, &mut pool), Admit::Dropped(DropReason::BufferFull));
        assert_eq!(p.enqueue(3, 1500, 600, 3, &mut pool), Admit::Queued { marked: false });
        assert_eq!(p.pop_evicted(), Some(1));
        assert_eq!(pool.used_bytes, 1500);
    }

    #[test]
    fn with_bdp_sizes_the_buffer() {
        use crate::time::US;
        assert_eq!(PFabricPortConfig::with_bdp(2.0, 10_000_000_000, 12 * US).capacity_bytes, 30_000);
    }

    /// Random traffic: bytes are conserved in the port and the pool, every admitted packet
    /// leaves exactly once (dequeued, evicted or drained), and every dequeue picks the
    /// earliest packet of a flow holding the minimum rank.
    #[test]
    fn conservation_and_order_under_random_traffic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut pool = BufferPool::new(20_000, None);
        let mut p: PFabricPort<u32> = port(12_000);
        // shadow model: (item, bytes, rank, flow) in arrival order
        let mut model: Vec<(u32, u32, u64, u32)> = Vec::new();
        let (mut admitted, mut out) = (0u64, 0u64);
        for item in 0..5000u32 {
            if next(3) < 2 {
                let bytes = [40, 400, 1500][next(3) as usize];
                // a few tiny ranks, so different flows tie on the minimum (like ACKs at 0)
                let rank = if next(4) == 0 { next(3) } else { next(50_000) };
                let flow = next(6) as u32;
                match p.enqueue(item, bytes, rank, flow, &mut pool) {
                    Admit::Queued { marked } => {
                        assert!(!marked);
                        admitted += 1;
                        model.push((item, bytes, rank, flow));
                    }
                    Admit::Dropped(r) => {
                        assert_eq!(r, DropReason::BufferFull);
                        // only dropped when every queued rank is <= the arrival's or the
                        // worse-ranked bytes could not make room
                        let worse: u64 = model.iter().filter(|m| m.2 > rank).map(|m| m.1 as u64).sum();
                        let used: u64 = model.iter().map(|m| m.1 as u64).sum();
                        assert!(used + bytes as u64 - worse > 12_000);
                    }
                }
                while let Some(v) = p.pop_evicted() {
                    let i = model.iter().position(|m| m.0 == v).expect("evicted a queued packet");
                    assert!(model[i].2 > rank, "evicted rank {} for arrival rank {rank}", model[i].2);
                    model.remove(i);
                    out += 1;
                }
            } else if let Some(v) = p.dequeue(&mut pool) {
                let min = model.iter().map(|m| m.2).min().unwrap();
                // on a tie, the flow of the first (earliest) minimum
                let flow = model.iter().find(|m| m.2 == min).unwrap().3;
                let i = model.iter().position(|m| m.0 == v).unwrap();
                assert_eq!(model[i].3, flow);
                assert!(model[..i].iter().all(|m| m.3 != model[i].3), "not the flow's earliest");
                model.remove(i);
                out += 1;
            } else {
                assert!(model.is_empty());
            }
            let held: u64 = model.iter().map(|m| m.1 as u64).sum();
            assert_eq!((p.bytes(), pool.used_bytes, p.packets()), (held, held, model.len()));
            assert!(held <= 12_000);
        }
        out += p.drain(&mut pool).len() as u64;
        assert_eq!(admitted, out);
        assert_eq!((p.bytes(), pool.used_bytes), (0, 0));
        let c = &p.counters;
        assert_eq!(c.enqueued, admitted);
        assert_eq!(c.enqueued, c.dequeued + c.dropped[DropReason::Evicted as usize] + model.len() as u64);
        assert!(c.dropped[DropReason::Evicted as usize] > 0 && c.dropped[DropReason::BufferFull as usize] > 0);
    }
}
