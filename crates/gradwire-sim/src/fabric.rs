//! The physical network at run time: egress ports with their links, buffer pools and the
//! packet pool.

use crate::fast::{Sample, Weights};
use crate::routing::{Hop, PortId};
use crate::scenario::{BufferMode, NicDiscipline, Scenario, SwitchPolicy};
use crate::topology::{NodeId, NodeKind, Topology};
use gradwire_core::switch::{BufferPool, EgressPort, PFabricPortConfig, PortConfig, PortHeader, SwitchPort};
use gradwire_core::time::{serialization, Time, SEC};
use gradwire_core::Packet;
use std::collections::VecDeque;

pub type PktId = u32;

/// A packet handle plus the header fields a switch reads. Ports queue and wires carry
/// these, so a packet's pooled body is touched only at its hosts: it goes cold while it
/// waits in buffers and on wires, and reading it at every hop was the largest cache miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hdr {
    pub id: PktId,
    pub flow: u32,
    pub dst: u32,
    pub wire_bytes: u16,
    pub priority: u8,
    pub ect: bool,
    /// [`Packet::switch_rank`], what a pFabric port schedules by.
    pub rank: u64,
}

impl Hdr {
    pub fn of(id: PktId, p: &Packet) -> Hdr {
        Hdr {
            id,
            flow: p.flow,
            dst: p.dst,
            wire_bytes: u16::try_from(p.wire_bytes).expect("validated: a packet fits 65535 bytes"),
            priority: p.priority,
            ect: p.ecn.ect,
            rank: p.switch_rank(),
        }
    }
}

impl PortHeader for Hdr {
    fn wire_bytes(&self) -> u32 {
        self.wire_bytes as u32
    }
    fn priority(&self) -> u8 {
        self.priority
    }
    fn ect(&self) -> bool {
        self.ect
    }
    fn switch_rank(&self) -> u64 {
        self.rank
    }
    fn flow(&self) -> u32 {
        self.flow
    }
}

/// Packets live here while in the network; a handle is an index, freed on delivery or drop.
/// Each slot is one cache line: a 56-byte packet at a 56-byte stride would straddle two
/// lines in most slots, and a host's read of a cold packet would then miss twice. The
/// line's spare bytes carry a tag for the driver (the simulator: where the packet's flow
/// keeps its endpoints), read with the packet at no extra miss.
#[derive(Default)]
pub struct PacketPool {
    slots: Vec<Slot>,
    free: Vec<PktId>,
    live: u64,
}

#[derive(Clone, Copy)]
#[repr(align(64))]
struct Slot(Packet, u32);

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

impl PacketPool {
    /// Pool `p` with `tag`; returns its handle.
    pub fn alloc(&mut self, p: Packet, tag: u32) -> PktId {
        self.live += 1;
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Slot(p, tag);
                id
            }
            None => {
                self.slots.push(Slot(p, tag));
                (self.slots.len() - 1) as PktId
            }
        }
    }

    /// Free packet `id`; returns it and its tag.
    pub fn release(&mut self, id: PktId) -> (Packet, u32) {
        self.live -= 1;
        self.free.push(id);
        let Slot(p, tag) = self.slots[id as usize];
        (p, tag)
    }

    /// Start loading packet `id` into cache (a hint: a packet is cold by the time the
    /// host it travels to reads it).
    #[inline]
    pub fn prefetch(&self, id: PktId) {
        if let Some(slot) = self.slots.get(id as usize) {
            gradwire_core::prefetch::line(slot as *const Slot as *const u8);
        }
    }

    /// Packet `id`'s tag.
    pub fn tag(&self, id: PktId) -> u32 {
        self.slots[id as usize].1
    }

    pub fn get(&self, id: PktId) -> &Packet {
        &self.slots[id as usize].0
    }

    pub fn get_mut(&mut self, id: PktId) -> &mut Packet {
        &mut self.slots[id as usize].0
    }

    /// Packets currently in the network (queued, in service or on a wire).
    pub fn live(&self) -> u64 {
        self.live
    }

    /// Slots ever allocated: the pool's high-water mark.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// One direction of a link: the egress queue at `from` and the wire to `to`.
///
/// Laid out for the cache (`repr(C)`, line-aligned): the first line holds what every
/// `Arrive` and `TxDone` reads, the strict-priority queue's per-packet state follows in
/// the next three (see `EgressPort`), all within what `Fabric::prefetch_port` loads; the
/// name, read only to build output, is last.
#[repr(C, align(64))]
pub struct Port {
    /// When the packet being serialized (already on `wire`) is fully sent.
    pub busy_until: Time,
    pub delay: Time,
    /// Packets propagating, in arrival order (the link is FIFO with a fixed delay).
    pub wire: VecDeque<(Time, Hdr)>,
    /// Picoseconds per byte when that is a whole number that fits (100G: 80), else 0.
    ps_per_byte: u32,
    pub to: NodeId,
    pub pool: u32,
    pub from: NodeId,
    pub up: bool,
    /// Pauses in force (a paused link, a host paused with `hold = "all"`): while non-zero
    /// the port dequeues nothing.
    pub paused: u8,
    /// A `TxDone` event is scheduled for `busy_until`.
    pub wake_pending: bool,
    pub queue: SwitchPort<Hdr>,
    pub bits_per_sec: u64,
    pub name: String,
}

impl Port {
    /// Serialization time; exact. Common rates divide 8 Tbit·ps evenly, so a multiply
    /// replaces the 128-bit division on the hot path.
    #[inline]
    pub fn tx_time(&self, bytes: u32) -> Time {
        match self.ps_per_byte {
            0 => serialization(bytes, self.bits_per_sec),
            k => bytes as Time * k as Time,
        }
    }

    pub fn hop(&self) -> Hop {
        Hop { from: self.from, to: self.to, up: self.up }
    }
}

/// A packet [`Fabric::transmit`] put on a wire.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// When its serialization ends (the port's next packet may start).
    pub done: Time,
    /// When it reaches the far end.
    pub arrives: Time,
    /// It is alone on the wire: its arrival needs an event (the ones behind it are
    /// scheduled as each arrives, see [`Fabric::arrive`]).
    pub first: bool,
}

/// What `prefetch_port` loads: the header line and the queue's per-packet lines.
const PORT_HOT_BYTES: usize = 256;
const _: () = assert!(std::mem::offset_of!(Port, queue) + EgressPort::<Hdr>::HOT_BYTES <= PORT_HOT_BYTES);

pub struct Fabric {
    pub ports: Vec<Port>,
    pub pools: Vec<BufferPool>,
    /// Egress ports of each node.
    pub node_ports: Vec<Vec<PortId>>,
    pub packets: PacketPool,
    /// A fast run's hops where a packet stands for the flows sampled away (`crate::fast`).
    pub weights: Option<Weights>,
}

impl Fabric {
    /// Start loading port `p`'s first lines (a hint; see `prefetch`).
    #[inline]
    pub fn prefetch_port(&self, p: PortId) {
        let Some(port) = self.ports.get(p as usize) else { return };
        let base = port as *const Port as *const u8;
        for off in (0..PORT_HOT_BYTES).step_by(64) {
            gradwire_core::prefetch::line(base.wrapping_add(off));
        }
    }

    /// Serialize the next packet queued at port `p`, starting at `start` (the caller's
    /// clock, never before the port is free): it goes onto the wire at once with its
    /// arrival time, as the link is FIFO with a fixed delay. `None`: the queue is empty.
    /// The simulator and the emulator both send through this.
    #[inline]
    pub fn transmit(&mut self, p: PortId, start: Time) -> Option<(Hdr, Sent)> {
        let port = &mut self.ports[p as usize];
        let pool = &mut self.pools[port.pool as usize];
        let mut h = port.queue.dequeue(pool)?;
        let begin = start.max(port.busy_until);
        let mut tx = port.tx_time(h.wire_bytes as u32);
        if let Some(w) = &mut self.weights {
            let own = w.leaving(p, h.dst, h.flow, h.wire_bytes);
            if w.is_fluid() {
                // charged to the buffer for more, it takes the link as itself beside the phantom
                tx = w.serialization(p, h.dst, h.flow, port.tx_time(own as u32), port.bits_per_sec, begin);
            }
            h.wire_bytes = own;
        }
        port.busy_until = begin + tx;
        let arrives = port.busy_until + port.delay;
        port.wire.push_back((arrives, h));
        gradwire_core::prefetch::after(port.wire.back());
        Some((h, Sent { done: port.busy_until, arrives, first: port.wire.len() == 1 }))
    }

    /// The packet at the head of port `p`'s wire reaching the far end at `now`, and when
    /// the next one behind it arrives (the caller's next event for this wire). `None`: a
    /// stale event (a wire emptied by a failure, or its head not yet due).
    #[inline]
    pub fn arrive(&mut self, p: PortId, now: Time) -> Option<(Hdr, Option<Time>)> {
        let wire = &mut self.ports[p as usize].wire;
        match wire.front() {
            Some(&(at, _)) if at == now => {}
            _ => return None,
        }
        let (_, h) = wire.pop_front().expect("checked");
        Some((h, wire.front().map(|&(next, _)| next)))
    }

    pub fn build(s: &Scenario, topo: &Topology) -> Fabric {
        Self::build_sampled(s, topo, None)
    }

    /// The fabric of `s`, weighing a fast run's packets (`crate::fast`).
    pub fn build_sampled(s: &Scenario, topo: &Topology, sample: Option<&Sample>) -> Fabric {
        let sw = &s.switch;
        // buffer limits come from the pools; a pFabric port needs no cap of its own
        let fifo_nic = s.host.nic == NicDiscipline::Fifo;
        let reserve = |cfg: PortConfig| PortConfig { queue0_reserve_bytes: sw.queue0_reserve_bytes, ..cfg };
        let make_port = |is_host: bool, ecn_threshold: u32| match (sw.policy, is_host) {
            // one queue, whatever the packets' classes: they leave in the order they came
            (_, true) if fifo_nic => SwitchPort::priority(PortConfig::uniform(1, 0, 0)),
            (SwitchPolicy::Pfabric, _) => SwitchPort::pfabric(PFabricPortConfig::unbounded()),
            (_, true) => SwitchPort::priority(PortConfig::uniform(sw.queues, 0, 0)),
            (SwitchPolicy::Plain, false) => {
                SwitchPort::priority(reserve(PortConfig::uniform(sw.queues, ecn_threshold, sw.drop_threshold_packets)))
            }
            (SwitchPolicy::Dlcp, false) => SwitchPort::priority(reserve(PortConfig::dlcp(
                sw.queues,
                ecn_threshold,
                sw.dlcp_d,
                sw.drop_threshold_packets,
            ))),
        };
        let mut pools = Vec::new();
        // one shared pool per switch, created on demand
        let mut switch_pool: Vec<Option<u32>> = vec![None; topo.nodes.len()];
        let mut ports = Vec::new();
        let mut node_ports = vec![Vec::new(); topo.nodes.len()];
        let mut names: std::collections::HashMap<String, u32> = Default::default();
        for link in &topo.links {
            for (a, b) in [(link.a, link.b), (link.b, link.a)] {
                let is_host = topo.nodes[a as usize].kind == NodeKind::Host;
                // a thinned server's host link: a scale model of `1/thin_by` (crate::fast)
                let scale = match sample.filter(|x| x.thins(a) || x.thins(b)) {
                    Some(x) => x.thin_rate(),
                    None => 1.0,
                };
                let scaled = |v: u64| ((v as f64 * scale).round() as u64).max(1);
                let pool = if is_host {
                    pools.push(match s.host.nic_queue_bytes {
                        0 => BufferPool::unbounded(),
                        cap => BufferPool::new(scaled(cap), None),
                    });
                    (pools.len() - 1) as u32
                } else {
                    match sw.buffer {
                        BufferMode::PerPort => {
                            pools.push(BufferPool::new(scaled(sw.buffer_bytes), None));
                            (pools.len() - 1) as u32
                        }
                        BufferMode::Shared => *switch_pool[a as usize].get_or_insert_with(|| {
                            pools.push(BufferPool::new(sw.buffer_bytes, Some(sw.dt_alpha)));
                            (pools.len() - 1) as u32
                        }),
                    }
                };
                let base = format!("{}->{}", topo.nodes[a as usize].name, topo.nodes[b as usize].name);
                // parallel links get #1, #2, ... after the first
                let n = names.entry(base.clone()).or_insert(0);
                let name = if *n == 0 { base } else { format!("{base}#{n}") };
                *n += 1;
                node_ports[a as usize].push(ports.len() as PortId);
                let bits_per_sec = scaled(if is_host && s.host.nic_rate_share < 1.0 {
                    ((link.bits_per_sec as f64 * s.host.nic_rate_share).round() as u64).max(1)
                } else {
                    link.bits_per_sec
                });
                let mut ecn_threshold = sw.ecn_threshold_packets;
                if let Some(sample) = sample.filter(|x| x.scales_ecn_toward(b) || x.thins(b)) {
                    let rate = if sample.thins(b) { sample.thin_rate() } else { sample.rate };
                    ecn_threshold = ((ecn_threshold as f64 * rate).round() as u32).max(1);
                }
                ports.push(Port {
                    name,
                    from: a,
                    to: b,
                    bits_per_sec,
                    ps_per_byte: match (8 * SEC).is_multiple_of(bits_per_sec) {
                        true => u32::try_from(8 * SEC / bits_per_sec).unwrap_or(0),
                        false => 0,
                    },
                    delay: link.delay,
                    queue: make_port(is_host, ecn_threshold),
                    pool,
                    up: true,
                    paused: 0,
                    busy_until: 0,
                    wake_pending: false,
                    wire: VecDeque::new(),
                });
            }
        }
        let weights = sample.map(|x| x.weights(ports.iter().map(|p| (p.from, p.to))));
        Fabric { ports, pools, node_ports, packets: PacketPool::default(), weights }
    }

    pub fn hops(&self) -> Vec<Hop> {
        self.ports.iter().map(Port::hop).collect()
    }

    pub fn port_by_name(&self, name: &str) -> Option<PortId> {
        self.ports.iter().position(|p| p.name == name).map(|i| i as PortId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;

    #[test]
    fn a_ports_per_packet_state_lies_in_the_lines_it_prefetches() {
        // PORT_HOT_BYTES's compile-time check assumes the strict-priority port starts the
        // enum (its tag is a niche, no byte ahead of it) and the port starts a line
        let q = SwitchPort::<Hdr>::priority(PortConfig::uniform(8, 1, 1));
        let SwitchPort::Priority(p) = &q else { unreachable!() };
        assert_eq!(p as *const _ as usize, &q as *const _ as usize);
        assert_eq!(std::mem::align_of::<Port>(), 64);
    }

    #[test]
    fn fast_tx_time_equals_exact_serialization() {
        for gbps in ["100.0", "25.0", "40.0", "3.3"] {
            let text = format!(
                "[topology]\nhost_link_gbps = {gbps}\n[workload]\nkind = \"incast\"\nsenders = 1\nflow_bytes = 1\n"
            );
            let s = &load(&text, &[]).unwrap()[0].scenario;
            let f = Fabric::build(s, &Topology::build(&s.topology));
            let p = &f.ports[0];
            for bytes in [1, 40, 64, 1500, 9000] {
                assert_eq!(p.tx_time(bytes), serialization(bytes, p.bits_per_sec), "{gbps} G, {bytes} B");
            }
        }
    }

    #[test]
    fn a_thinned_servers_host_link_is_a_scale_model() {
        // 2 of 4 servers sampled (m = 2): the other two's host links at half the rate,
        // buffer and ECN threshold, both ways; every other port's rate and buffer as they are.
        // 1 of 4 (m = 4) thinned by 2: the other three's at half too.
        for (sample, thinned_away, by) in [("servers = 2", 2, 2), ("servers = 1\nthin_by = 2", 3, 2)] {
            let text = format!(
                "fidelity = \"fast\"\n[topology]\nkind = \"fat_tree\"\nk = 4\n[transport]\nkind = \"dctcp\"\n\
                 [workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\npattern = \"ps\"\nworkers = 12\nservers = 4\n\
                 colocated = false\n[fast]\n{sample}\nthin_whole_tensors = true\n"
            );
            let s = &load(&text, &[]).unwrap()[0].scenario;
            let topo = Topology::build(&s.topology);
            let x = Sample::plan(s, &topo).unwrap().expect("a fast run");
            let thinned: Vec<u32> = (0..topo.hosts).filter(|&h| x.thins(h)).collect();
            assert_eq!(thinned.len(), thinned_away, "the servers sampled away: {thinned:?}");
            assert!(thinned.iter().all(|h| !x.servers.contains(h)));
            let f = Fabric::build_sampled(s, &topo, Some(&x));
            let mut scaled = 0;
            for p in &f.ports {
                let thin = x.thins(p.from) || x.thins(p.to);
                scaled += thin as usize;
                let full = if thin { by } else { 1 };
                assert_eq!(p.bits_per_sec * full, 100_000_000_000, "{}", p.name);
                let is_host = topo.nodes[p.from as usize].kind == NodeKind::Host;
                if !is_host {
                    assert_eq!(f.pools[p.pool as usize].capacity_bytes * full, s.switch.buffer_bytes, "{}", p.name);
                    let SwitchPort::Priority(q) = &p.queue else { panic!("{}: a priority port", p.name) };
                    // toward a worker at the sample's share (fast.scale_ecn), toward a thinned
                    // server at 1 / thin_by
                    let rate = match (x.thins(p.to), x.scales_ecn_toward(p.to)) {
                        (true, _) => 1.0 / by as f64,
                        (false, true) => x.rate,
                        (false, false) => 1.0,
                    };
                    let ecn = (s.switch.ecn_threshold_packets as f64 * rate).round() as u32;
                    assert_eq!(q.config().ecn_threshold[0], ecn, "{}", p.name);
                }
            }
            assert_eq!(scaled, 2 * thinned_away, "their links, both ways");
        }
    }

    #[test]
    fn a_host_nic_sends_at_its_share_of_the_link_and_the_switch_at_the_link() {
        let text = "[topology]\nhost_link_gbps = 1.0\nuplink_gbps = 1.0\n[host]\nnic_rate_share = 0.95\n\
                    [workload]\nkind = \"incast\"\nsenders = 1\nflow_bytes = 1\n";
        let s = &load(text, &[]).unwrap()[0].scenario;
        let topo = Topology::build(&s.topology);
        let f = Fabric::build(s, &topo);
        for p in &f.ports {
            let from_host = topo.nodes[p.from as usize].kind == NodeKind::Host;
            assert_eq!(p.bits_per_sec, if from_host { 950_000_000 } else { 1_000_000_000 }, "{}", p.name);
            assert_eq!(p.tx_time(1500), serialization(1500, p.bits_per_sec), "{}", p.name);
        }
        for bad in ["0.0", "1.5", "-1.0", "nan"] {
            let err = load(&text.replace("0.95", bad), &[]).unwrap_err().to_string();
            assert!(err.contains("host.nic_rate_share") && err.contains("(0, 1]"), "{bad}: {err}");
        }
    }
}
