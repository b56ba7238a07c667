//! A switch egress port: strict-priority queues over a byte buffer, with per-queue ECN
//! marking and drop thresholds.
//!
//! The port is generic over what it queues (`T`: a packet handle in the simulator, a packet
//! in the emulator) and does no I/O: the driver calls [`EgressPort::enqueue`] when a packet
//! arrives and [`EgressPort::dequeue`] when the link is free.
//!
//! Buffer space lives in a [`BufferPool`] passed in by the driver, so a pool can be private
//! to one port or shared by every port of a switch (with the dynamic-threshold policy of
//! Choudhury & Hahne: a queue may grow while it holds less than `alpha * free`).
//!
//! [`PFabricPort`] is the other discipline (pFabric's priority dropping and scheduling by a
//! per-packet rank); [`SwitchPort`] holds either one behind the same calls.

mod pcn;
mod pfabric;

use std::collections::VecDeque;

use crate::packet::{FlowId, Packet};

pub use pcn::{
    ecn_lower_bound, pcn_thresholds, worker_fallback, BadThreshold, PcnCounters, PcnMark, PcnRegister, PcnWorker,
    MAX_PCN_THRESHOLD,
};
pub use pfabric::{PFabricPort, PFabricPortConfig};

/// Most priority queues a port can have (3 bits of DSCP-derived priority).
pub const MAX_QUEUES: usize = 8;

/// Why a packet was dropped. The simulator adds world-level reasons to the same counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// The buffer pool had no room for the packet.
    BufferFull,
    /// Shared buffer: the queue exceeded its dynamic threshold `alpha * free`.
    DynamicThreshold,
    /// The queue held its configured maximum of packets.
    QueueThreshold,
    /// The link or node was down.
    LinkDown,
    /// No route to the destination (e.g. after failures).
    NoRoute,
    /// Random non-congestion loss configured on a link.
    RandomLoss,
    /// DLCP selective dropping: an unimportant (non-ECT) packet above its queue's threshold.
    Selective,
    /// pFabric: a queued packet pushed out of a full buffer by an arrival of smaller rank.
    Evicted,
    /// A host's own NIC queue had no room (a FIFO NIC that its senders overfill).
    HostNic,
}

impl DropReason {
    /// Every reason, in discriminant order: `reason as usize` indexes an array of
    /// `ALL.len()` counters such as [`PortCounters::dropped`].
    pub const ALL: [DropReason; 9] = [
        DropReason::BufferFull,
        DropReason::DynamicThreshold,
        DropReason::QueueThreshold,
        DropReason::LinkDown,
        DropReason::NoRoute,
        DropReason::RandomLoss,
        DropReason::Selective,
        DropReason::Evicted,
        DropReason::HostNic,
    ];

    /// Stable snake_case name, the key of this reason in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::BufferFull => "buffer_full",
            DropReason::DynamicThreshold => "dynamic_threshold",
            DropReason::QueueThreshold => "queue_threshold",
            DropReason::LinkDown => "link_down",
            DropReason::NoRoute => "no_route",
            DropReason::RandomLoss => "random_loss",
            DropReason::Selective => "selective",
            DropReason::Evicted => "evicted",
            DropReason::HostNic => "host_nic",
        }
    }
}

/// Byte budget shared by one or more ports.
#[derive(Clone, Debug)]
pub struct BufferPool {
    /// Bytes the pool can hold in total (on the wire).
    pub capacity_bytes: u64,
    /// Bytes queued now by every port drawing on the pool; never above `capacity_bytes`.
    /// Ports add and release them; a driver only reads it.
    pub used_bytes: u64,
    /// `Some(alpha)`: dynamic threshold per queue; `None`: first come, first served.
    pub dt_alpha: Option<f64>,
}

impl BufferPool {
    /// An empty pool of `capacity_bytes`, with the dynamic threshold `dt_alpha` if `Some`.
    pub fn new(capacity_bytes: u64, dt_alpha: Option<f64>) -> Self {
        BufferPool { capacity_bytes, used_bytes: 0, dt_alpha }
    }

    /// A pool that never runs out (capacity `u64::MAX`, no dynamic threshold): only the
    /// ports' own thresholds drop.
    pub fn unbounded() -> Self {
        BufferPool::new(u64::MAX, None)
    }

    fn free(&self) -> u64 {
        self.capacity_bytes - self.used_bytes
    }
}

/// Per-queue thresholds, in packets; 0 disables one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Strict-priority queues in use, `1..=MAX_QUEUES`; a higher priority than
    /// `queues - 1` goes to the last queue.
    pub queues: u8,
    /// Mark an ECN-capable packet CE when its queue already holds at least this many.
    pub ecn_threshold: [u32; MAX_QUEUES],
    /// Drop a packet when its queue already holds this many.
    pub drop_threshold: [u32; MAX_QUEUES],
    /// DLCP: at or above the ECN threshold, mark ECN-capable (important) packets and drop
    /// the others, instead of queueing the others unmarked.
    pub selective_drop: bool,
    /// Bytes of the buffer pool only queue 0 may use: queues 1.. are admitted while the
    /// pool keeps this much free, so control (queue 0 under DLCP) still finds room when
    /// data fills the buffer. 0: first come, first served.
    pub queue0_reserve_bytes: u64,
}

impl PortConfig {
    /// Same thresholds on every queue.
    pub fn uniform(queues: u8, ecn_threshold: u32, drop_threshold: u32) -> Self {
        assert!((1..=MAX_QUEUES as u8).contains(&queues), "1..=8 queues");
        PortConfig {
            queues,
            ecn_threshold: [ecn_threshold; MAX_QUEUES],
            drop_threshold: [drop_threshold; MAX_QUEUES],
            selective_drop: false,
            queue0_reserve_bytes: 0,
        }
    }

    /// DLCP's switch (dlcp.md §3.2.2, Appendix B): queue 0 carries control and is never
    /// selectively dropped; data queue `i` (1..queues) marks/drops at `T * (1 + (i-1) * d)`,
    /// so the front layers, which ride the highest-priority (lowest) queues, lose packets first.
    pub fn dlcp(queues: u8, t_packets: u32, d: f64, drop_threshold: u32) -> Self {
        let mut cfg = PortConfig::uniform(queues, 0, drop_threshold);
        for q in 1..queues as usize {
            cfg.ecn_threshold[q] = (t_packets as f64 * (1.0 + (q - 1) as f64 * d)).round() as u32;
        }
        cfg.selective_drop = true;
        cfg
    }
}

/// Outcome of offering a packet to a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Queued.
    Queued {
        /// The packet was ECN-capable and found its queue at or above the ECN threshold:
        /// the driver must set CE.
        marked: bool,
    },
    /// Not queued; the port has counted the drop.
    Dropped(DropReason),
}

/// Running totals of one port, in packets unless named bytes. The ones every packet
/// updates come first (`repr(C)`), next to the port's own state; see [`EgressPort`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortCounters {
    /// Packets admitted.
    pub enqueued: u64,
    /// Packets sent (dequeued).
    pub dequeued: u64,
    /// Bytes (on the wire) of the dequeued packets: what the port's link carried.
    pub dequeued_bytes: u64,
    /// Admitted packets the port told the driver to CE-mark.
    pub ecn_marked: u64,
    /// Most bytes the port held at once (high-water mark).
    pub max_bytes: u64,
    /// Drops per reason, indexed by `reason as usize` (see [`DropReason::ALL`]); includes
    /// those recorded with `count_drop`.
    pub dropped: [u64; DropReason::ALL.len()],
}

/// A strict-priority egress port: up to [`MAX_QUEUES`] FIFO queues with per-queue ECN
/// marking and drop thresholds from [`PortConfig`], over a shared [`BufferPool`].
///
/// Laid out for the cache (`repr(C)`): what every packet reads and writes (the totals,
/// the counters it bumps, then each queue's ring with its bytes and thresholds in one
/// 48-byte lane) comes first, the configuration last. Queue 0's lane ends 208 bytes in, so
/// a driver that embeds the port after a 64-byte header touches four lines per packet;
/// the field order the compiler chose spread the same reads over eight.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct EgressPort<T> {
    bytes: u64,
    /// `cfg.queue0_reserve_bytes`, here where admission reads it.
    reserve: u64,
    /// Packets queued, and bit `q` set while queue `q` holds any: emptiness and the next
    /// queue to serve without reading the queues' lanes.
    packets: u32,
    nonempty: u8,
    /// `cfg.queues` and `cfg.selective_drop`, likewise.
    queues: u8,
    selective_drop: bool,
    /// Totals since creation; the port updates them, the driver reads them.
    pub counters: PortCounters,
    lanes: [Lane<T>; MAX_QUEUES],
    cfg: PortConfig,
}

/// One priority queue: its packets with their wire bytes, its byte total and thresholds.
#[derive(Clone, Debug)]
#[repr(C)]
struct Lane<T> {
    ring: VecDeque<(T, u32)>,
    bytes: u64,
    ecn_threshold: u32,
    drop_threshold: u32,
}

impl<T> EgressPort<T> {
    /// Bytes from the port's start to the end of queue 0's lane: what one packet through
    /// queue 0 touches (a driver sizes its prefetch by it).
    pub const HOT_BYTES: usize = std::mem::offset_of!(EgressPort<T>, lanes) + std::mem::size_of::<Lane<T>>();

    /// An empty port. `cfg.queues` must be in `1..=MAX_QUEUES` (as [`PortConfig::uniform`]
    /// checks): `enqueue` panics on 0.
    pub fn new(cfg: PortConfig) -> Self {
        EgressPort {
            bytes: 0,
            reserve: cfg.queue0_reserve_bytes,
            packets: 0,
            nonempty: 0,
            queues: cfg.queues,
            selective_drop: cfg.selective_drop,
            counters: PortCounters::default(),
            lanes: std::array::from_fn(|q| Lane {
                ring: VecDeque::new(),
                bytes: 0,
                ecn_threshold: cfg.ecn_threshold[q],
                drop_threshold: cfg.drop_threshold[q],
            }),
            cfg,
        }
    }

    /// The configuration in force, including thresholds changed by
    /// [`EgressPort::set_ecn_threshold`].
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    /// Set the ECN marking threshold (packets) of every queue that marks: what a
    /// [`PcnRegister`] drives. Queues configured without marking (threshold 0) stay so.
    pub fn set_ecn_threshold(&mut self, packets: u32) {
        for q in 0..self.cfg.queues as usize {
            if self.cfg.ecn_threshold[q] > 0 {
                self.cfg.ecn_threshold[q] = packets.max(1);
                self.lanes[q].ecn_threshold = packets.max(1);
            }
        }
    }

    /// Offer a packet of `bytes` on the wire at `priority` (clamped to the lowest queue).
    /// `ect` says whether the packet may be CE-marked instead of only queued.
    pub fn enqueue(&mut self, item: T, bytes: u32, priority: u8, ect: bool, pool: &mut BufferPool) -> Admit {
        let q = (priority as usize).min(self.queues as usize - 1);
        let held = self.lanes[q].ring.len() as u32;
        let verdict = self.admit(q, held, bytes, pool);
        if let Admit::Dropped(reason) = verdict {
            self.counters.dropped[reason as usize] += 1;
            return verdict;
        }
        let ecn_th = self.lanes[q].ecn_threshold;
        let congested = ecn_th > 0 && held >= ecn_th;
        if congested && !ect && self.selective_drop {
            self.counters.dropped[DropReason::Selective as usize] += 1;
            return Admit::Dropped(DropReason::Selective);
        }
        let marked = ect && congested;
        pool.used_bytes += bytes as u64;
        self.bytes += bytes as u64;
        self.packets += 1;
        self.nonempty |= 1 << q;
        let lane = &mut self.lanes[q];
        lane.bytes += bytes as u64;
        lane.ring.push_back((item, bytes));
        // a deep queue's ring outgrows the cache: its next slot was last touched a ring ago
        crate::prefetch::after(lane.ring.back());
        self.counters.enqueued += 1;
        self.counters.ecn_marked += marked as u64;
        self.counters.max_bytes = self.counters.max_bytes.max(self.bytes);
        Admit::Queued { marked }
    }

    fn admit(&self, q: usize, held: u32, bytes: u32, pool: &BufferPool) -> Admit {
        let lane = &self.lanes[q];
        if lane.drop_threshold > 0 && held >= lane.drop_threshold {
            return Admit::Dropped(DropReason::QueueThreshold);
        }
        let reserve = if q == 0 { 0 } else { self.reserve };
        if bytes as u64 + reserve > pool.free() {
            return Admit::Dropped(DropReason::BufferFull);
        }
        if let Some(alpha) = pool.dt_alpha {
            if (lane.bytes + bytes as u64) as f64 > alpha * pool.free() as f64 {
                return Admit::Dropped(DropReason::DynamicThreshold);
            }
        }
        Admit::Queued { marked: false }
    }

    /// Take the next packet: the head of the highest-priority (lowest-numbered) non-empty queue.
    pub fn dequeue(&mut self, pool: &mut BufferPool) -> Option<T> {
        if self.nonempty == 0 {
            return None;
        }
        let q = self.nonempty.trailing_zeros() as usize;
        let lane = &mut self.lanes[q];
        let (item, bytes) = lane.ring.pop_front().expect("a queue marked non-empty");
        lane.bytes -= bytes as u64;
        match lane.ring.front() {
            Some(next) => crate::prefetch::line(next as *const _ as *const u8),
            None => self.nonempty &= !(1 << q),
        }
        self.packets -= 1;
        pool.used_bytes -= bytes as u64;
        self.bytes -= bytes as u64;
        self.counters.dequeued += 1;
        self.counters.dequeued_bytes += bytes as u64;
        Some(item)
    }

    /// Remove everything (a link went down); returns what was queued, for drop accounting.
    pub fn drain(&mut self, pool: &mut BufferPool) -> Vec<T> {
        let mut out = Vec::new();
        while let Some(item) = self.dequeue(pool) {
            out.push(item);
        }
        out
    }

    /// Bytes (on the wire) queued over all queues.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets queued over all queues.
    pub fn packets(&self) -> usize {
        self.packets as usize
    }

    /// Packets in queue `q` (0 is served first); panics if `q >= MAX_QUEUES`.
    pub fn queue_packets(&self, q: usize) -> usize {
        self.lanes[q].ring.len()
    }

    /// Nothing queued.
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// Total drops over all reasons.
    pub fn drops(&self) -> u64 {
        self.counters.dropped.iter().sum()
    }

    /// Record a drop that happened outside admission (link down, random loss).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.counters.dropped[reason as usize] += 1;
    }
}

/// What an egress port reads of a packet to admit it. [`Packet`] has it; a driver that
/// keeps a smaller header per queued packet (the simulator's) implements it for that.
pub trait PortHeader {
    /// Bytes on the wire (what the buffer holds).
    fn wire_bytes(&self) -> u32;
    /// Strict-priority queue (0 = highest).
    fn priority(&self) -> u8;
    /// ECN-capable: marked rather than dropped above the ECN threshold.
    fn ect(&self) -> bool;
    /// What a pFabric port schedules and drops by ([`Packet::switch_rank`]).
    fn switch_rank(&self) -> u64;
    /// The flow, for pFabric's starvation rule.
    fn flow(&self) -> FlowId;
}

impl PortHeader for Packet {
    fn wire_bytes(&self) -> u32 {
        self.wire_bytes
    }
    fn priority(&self) -> u8 {
        self.priority
    }
    fn ect(&self) -> bool {
        self.ecn.ect
    }
    fn switch_rank(&self) -> u64 {
        Packet::switch_rank(self)
    }
    fn flow(&self) -> FlowId {
        self.flow
    }
}

/// A switch (or NIC) egress port of either discipline, so a driver can hold one type:
/// strict priority with ECN/drop thresholds ([`EgressPort`]) or pFabric ([`PFabricPort`]).
///
/// Drive it as an `EgressPort`, plus one step: after every [`SwitchPort::enqueue`], drain
/// [`SwitchPort::pop_evicted`] and account each packet as dropped with
/// [`DropReason::Evicted`] (the port has counted it already). A strict-priority port never
/// evicts.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // one per port, matched on every packet: no box to chase
pub enum SwitchPort<T> {
    /// Strict priority with ECN marking and drop thresholds.
    Priority(EgressPort<T>),
    /// pFabric: scheduling and dropping by per-packet rank, no ECN.
    PFabric(PFabricPort<T>),
}

impl<T> SwitchPort<T> {
    /// An empty strict-priority port.
    pub fn priority(cfg: PortConfig) -> Self {
        SwitchPort::Priority(EgressPort::new(cfg))
    }

    /// An empty pFabric port.
    pub fn pfabric(cfg: PFabricPortConfig) -> Self {
        SwitchPort::PFabric(PFabricPort::new(cfg))
    }

    /// Offer `item`, whose packet is `pkt`: a strict-priority port reads its wire bytes,
    /// priority and ECT; a pFabric port its wire bytes, flow and switch rank. On
    /// `Queued { marked: true }` the driver sets CE.
    #[inline]
    pub fn enqueue(&mut self, item: T, pkt: &impl PortHeader, pool: &mut BufferPool) -> Admit {
        match self {
            SwitchPort::Priority(p) => p.enqueue(item, pkt.wire_bytes(), pkt.priority(), pkt.ect(), pool),
            SwitchPort::PFabric(p) => p.enqueue(item, pkt.wire_bytes(), pkt.switch_rank(), pkt.flow(), pool),
        }
    }

    /// Set the ECN marking threshold of a strict-priority port (see
    /// [`EgressPort::set_ecn_threshold`]); a pFabric port does not mark and ignores it.
    pub fn set_ecn_threshold(&mut self, packets: u32) {
        if let SwitchPort::Priority(p) = self {
            p.set_ecn_threshold(packets);
        }
    }

    /// A packet pushed out by an earlier `enqueue` (pFabric only).
    pub fn pop_evicted(&mut self) -> Option<T> {
        match self {
            SwitchPort::Priority(_) => None,
            SwitchPort::PFabric(p) => p.pop_evicted(),
        }
    }

    /// Take the next packet by the port's discipline and release its bytes from `pool`.
    #[inline]
    pub fn dequeue(&mut self, pool: &mut BufferPool) -> Option<T> {
        match self {
            SwitchPort::Priority(p) => p.dequeue(pool),
            SwitchPort::PFabric(p) => p.dequeue(pool),
        }
    }

    /// Remove everything queued (a link went down), for drop accounting.
    pub fn drain(&mut self, pool: &mut BufferPool) -> Vec<T> {
        match self {
            SwitchPort::Priority(p) => p.drain(pool),
            SwitchPort::PFabric(p) => p.drain(pool),
        }
    }

    /// Totals since creation.
    pub fn counters(&self) -> &PortCounters {
        match self {
            SwitchPort::Priority(p) => &p.counters,
            SwitchPort::PFabric(p) => &p.counters,
        }
    }

    /// Bytes (on the wire) queued.
    pub fn bytes(&self) -> u64 {
        match self {
            SwitchPort::Priority(p) => p.bytes(),
            SwitchPort::PFabric(p) => p.bytes(),
        }
    }

    /// Packets queued.
    pub fn packets(&self) -> usize {
        match self {
            SwitchPort::Priority(p) => p.packets(),
            SwitchPort::PFabric(p) => p.packets(),
        }
    }

    /// Nothing queued (evicted packets not yet popped do not count).
    pub fn is_empty(&self) -> bool {
        match self {
            SwitchPort::Priority(p) => p.is_empty(),
            SwitchPort::PFabric(p) => p.is_empty(),
        }
    }

    /// Total drops over all reasons (evictions included).
    pub fn drops(&self) -> u64 {
        self.counters().dropped.iter().sum()
    }

    /// Record a drop that happened outside admission (link down, random loss).
    pub fn count_drop(&mut self, reason: DropReason) {
        match self {
            SwitchPort::Priority(p) => p.count_drop(reason),
            SwitchPort::PFabric(p) => p.count_drop(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(ecn: u32, drop: u32) -> EgressPort<u32> {
        EgressPort::new(PortConfig::uniform(8, ecn, drop))
    }

    #[test]
    fn marks_only_ect_at_or_above_threshold() {
        let mut pool = BufferPool::unbounded();
        let mut p = port(2, 0);
        assert_eq!(p.enqueue(0, 1500, 0, true, &mut pool), Admit::Queued { marked: false });
        assert_eq!(p.enqueue(1, 1500, 0, true, &mut pool), Admit::Queued { marked: false });
        assert_eq!(p.enqueue(2, 1500, 0, true, &mut pool), Admit::Queued { marked: true });
        assert_eq!(p.enqueue(3, 1500, 0, false, &mut pool), Admit::Queued { marked: false });
        // another queue has its own occupancy
        assert_eq!(p.enqueue(4, 1500, 1, true, &mut pool), Admit::Queued { marked: false });
        assert_eq!(p.counters.ecn_marked, 1);
    }

    #[test]
    fn drops_above_queue_threshold_and_buffer() {
        let mut pool = BufferPool::new(4000, None);
        let mut p = port(0, 2);
        assert!(matches!(p.enqueue(0, 1500, 3, false, &mut pool), Admit::Queued { .. }));
        assert!(matches!(p.enqueue(1, 1500, 3, false, &mut pool), Admit::Queued { .. }));
        assert_eq!(p.enqueue(2, 100, 3, false, &mut pool), Admit::Dropped(DropReason::QueueThreshold));
        assert_eq!(p.enqueue(3, 1500, 4, false, &mut pool), Admit::Dropped(DropReason::BufferFull));
        assert!(matches!(p.enqueue(4, 1000, 4, false, &mut pool), Admit::Queued { .. }));
        assert_eq!(pool.used_bytes, 4000);
        assert_eq!(p.drops(), 2);
        assert_eq!(p.counters.dropped[DropReason::QueueThreshold as usize], 1);
    }

    #[test]
    fn serves_strict_priority_fifo_within_queue() {
        let mut pool = BufferPool::unbounded();
        let mut p = port(0, 0);
        for (item, prio) in [(10, 5), (11, 5), (20, 1), (30, 7), (21, 1), (0, 0)] {
            p.enqueue(item, 100, prio, false, &mut pool);
        }
        let order: Vec<u32> = std::iter::from_fn(|| p.dequeue(&mut pool)).collect();
        assert_eq!(order, vec![0, 20, 21, 10, 11, 30]);
        assert_eq!(pool.used_bytes, 0);
        assert!(p.is_empty());
    }

    #[test]
    fn priority_beyond_configured_queues_goes_to_lowest() {
        let mut pool = BufferPool::unbounded();
        let mut p: EgressPort<u32> = EgressPort::new(PortConfig::uniform(2, 0, 0));
        p.enqueue(1, 100, 7, false, &mut pool);
        p.enqueue(0, 100, 0, false, &mut pool);
        assert_eq!(p.queue_packets(1), 1);
        assert_eq!(p.dequeue(&mut pool), Some(0));
    }

    #[test]
    fn dlcp_thresholds_grow_by_d_and_drop_only_unimportant_packets() {
        let cfg = PortConfig::dlcp(8, 10, 0.5, 0);
        assert_eq!(cfg.ecn_threshold, [0, 10, 15, 20, 25, 30, 35, 40]);
        let mut pool = BufferPool::unbounded();
        let mut p: EgressPort<u32> = EgressPort::new(cfg);
        for i in 0..10 {
            assert_eq!(p.enqueue(i, 1500, 1, i % 2 == 0, &mut pool), Admit::Queued { marked: false });
        }
        // queue 1 is at its threshold: important packets are marked, unimportant dropped
        assert_eq!(p.enqueue(10, 1500, 1, true, &mut pool), Admit::Queued { marked: true });
        assert_eq!(p.enqueue(11, 1500, 1, false, &mut pool), Admit::Dropped(DropReason::Selective));
        // queue 2's threshold is higher, and control (queue 0) is never selectively dropped
        assert_eq!(p.enqueue(12, 1500, 2, false, &mut pool), Admit::Queued { marked: false });
        for i in 0..50 {
            assert_eq!(p.enqueue(100 + i, 64, 0, false, &mut pool), Admit::Queued { marked: false });
        }
        assert_eq!(p.counters.dropped[DropReason::Selective as usize], 1);
    }

    #[test]
    fn a_queue0_reserve_admits_control_when_data_fills_the_port() {
        let cfg = PortConfig { queue0_reserve_bytes: 3000, ..PortConfig::uniform(8, 0, 0) };
        let mut pool = BufferPool::new(15_000, None);
        let mut p: EgressPort<u32> = EgressPort::new(cfg);
        let mut data = 0;
        while p.enqueue(data, 1500, 3, false, &mut pool) != Admit::Dropped(DropReason::BufferFull) {
            data += 1;
        }
        assert_eq!(data, 8, "data stops 3000 bytes short of the 15000-byte pool");
        for i in 0..46 {
            assert_eq!(p.enqueue(100 + i, 64, 0, false, &mut pool), Admit::Queued { marked: false }, "control {i}");
        }
        assert_eq!(p.enqueue(200, 64, 0, false, &mut pool), Admit::Dropped(DropReason::BufferFull), "pool full");
        // without the reserve the same data takes the whole pool and control finds none
        let mut pool = BufferPool::new(15_000, None);
        let mut q: EgressPort<u32> = EgressPort::new(PortConfig::uniform(8, 0, 0));
        for i in 0..10 {
            assert_eq!(q.enqueue(i, 1500, 3, false, &mut pool), Admit::Queued { marked: false });
        }
        assert_eq!(q.enqueue(99, 64, 0, false, &mut pool), Admit::Dropped(DropReason::BufferFull));
    }

    #[test]
    fn shared_buffer_dynamic_threshold_limits_one_queue() {
        // alpha = 1: a queue may hold at most as much as remains free.
        let mut pool = BufferPool::new(10_000, Some(1.0));
        let mut a = port(0, 0);
        let mut b = port(0, 0);
        let mut queued = 0;
        while let Admit::Queued { .. } = a.enqueue(0, 1000, 0, false, &mut pool) {
            queued += 1;
        }
        assert_eq!(queued, 5, "alpha=1 lets one queue take half the buffer");
        assert_eq!(a.counters.dropped[DropReason::DynamicThreshold as usize], 1);
        // the other port still gets room, a smaller share of what is left
        // (q + 1000 <= free: 1000 <= 5000, 2000 <= 4000, 3000 <= 3000, then 4000 > 2000)
        for _ in 0..3 {
            assert!(matches!(b.enqueue(0, 1000, 0, false, &mut pool), Admit::Queued { .. }));
        }
        assert_eq!(b.enqueue(0, 1000, 0, false, &mut pool), Admit::Dropped(DropReason::DynamicThreshold));
    }

    #[test]
    fn switch_port_dispatches_by_discipline() {
        let mut pool = BufferPool::unbounded();
        let data = |flow, prio, rank| {
            let mut p = Packet::data(flow, 0, 1, 0, 1460, 40);
            p.priority = prio;
            p.rank = rank;
            p.ecn.ect = true;
            p
        };
        // strict priority ignores the rank and marks by queue length
        let mut sp: SwitchPort<u32> = SwitchPort::priority(PortConfig::uniform(8, 1, 0));
        assert_eq!(sp.enqueue(0, &data(1, 3, 0), &mut pool), Admit::Queued { marked: false });
        assert_eq!(sp.enqueue(1, &data(2, 1, 99), &mut pool), Admit::Queued { marked: false });
        assert_eq!(sp.enqueue(2, &data(3, 1, 5), &mut pool), Admit::Queued { marked: true });
        assert_eq!(sp.pop_evicted(), None);
        assert_eq!(std::iter::from_fn(|| sp.dequeue(&mut pool)).collect::<Vec<_>>(), vec![1, 2, 0]);
        // pFabric ignores the priority, ranks data by `rank` and ACKs at 0, evicts when full
        let mut pf: SwitchPort<u32> = SwitchPort::pfabric(PFabricPortConfig { capacity_bytes: 3000 });
        assert_eq!(pf.enqueue(0, &data(1, 0, 900), &mut pool), Admit::Queued { marked: false });
        assert_eq!(pf.enqueue(1, &data(2, 7, 100), &mut pool), Admit::Queued { marked: false });
        let mut ack = Packet::ack(3, 1, 0, 0, 40);
        ack.rank = 1_000_000; // an ACK's rank field is its selective ACK, not a priority
        assert_eq!(pf.enqueue(2, &ack, &mut pool), Admit::Queued { marked: false });
        assert_eq!(pf.pop_evicted(), Some(0));
        assert_eq!(pf.counters().dropped[DropReason::Evicted as usize], 1);
        assert_eq!((pf.packets(), pf.bytes(), pool.used_bytes), (2, 1540, 1540));
        assert_eq!(std::iter::from_fn(|| pf.dequeue(&mut pool)).collect::<Vec<_>>(), vec![2, 1]);
        assert!(pf.is_empty() && pool.used_bytes == 0);
        pf.count_drop(DropReason::LinkDown);
        assert_eq!(pf.drops(), 2);
    }
}
