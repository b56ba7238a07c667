//! The emulated network as a real-time discrete-event model: packets read from the
//! hosts' TUN devices enter their host's NIC port, cross the simulator's own fabric
//! (`gradwire-sim`'s topology, ports and routes; `gradwire-core`'s egress queues), and
//! leave through the destination host's TUN device.
//!
//! Time is the wall clock in picoseconds. Each port serializes on a virtual clock
//! (`busy_until`), so its line rate is exact however late the driver wakes; a late wake
//! only delays delivery, it never changes the rate or the order.

use crate::ipv4::{self, ParseError};
use gradwire_core::packet::Packet;
use gradwire_core::switch::{worker_fallback, Admit, BufferPool, DropReason, PcnMark, PcnRegister};
use gradwire_core::time::{serialization, Time, MS, NS, US};
use gradwire_sim::fabric::{Fabric, Hdr};
use gradwire_sim::output::PacketCounts;
use gradwire_sim::routing::{Pick, PortId, Routes};
use gradwire_sim::scenario::RoutingMode;
use gradwire_sim::topology::{NodeKind, Topology};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::scenario::EmuScenario;

/// Every host's address is `SUBNET.(host + 1)`. Each namespace has its own routing
/// table and the TUN devices never live in the root namespace, so concurrent runs may
/// all use the same subnet.
pub const SUBNET: [u8; 3] = [10, 77, 0];

/// Bytes before the packet in every buffer: the driver keeps per-packet metadata there
/// (the TUN device's virtio-net header), which the switch carries along untouched.
pub const HEADROOM: usize = 16;

/// How long the switch may read a host's TUN device without finding it empty (a sender
/// faster than the switch reads) before deliveries go on without it: that host's
/// packets then enter its NIC port at most this long before they are read.
pub const MAX_LAG: Time = 2 * MS;

pub fn host_addr(host: u32) -> [u8; 4] {
    [SUBNET[0], SUBNET[1], SUBNET[2], (host + 1) as u8]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The port finished serializing a packet: start the next one.
    TxDone(PortId),
    /// The head of the port's wire reaches the far end.
    Arrive(PortId),
}

/// Packets read from the TUN devices that the switch did not carry.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ignored {
    /// IPv6 (the namespaces disable it, but a kernel may send before that) or garbage.
    pub not_ipv4: u64,
    /// IPv4 with lengths inconsistent with the bytes read.
    pub malformed: u64,
}

/// PCN's register on each switch port (host NICs have none), and the ECN threshold each
/// port applies now.
struct Pcn {
    regs: Vec<Option<PcnRegister>>,
    applied: Vec<u32>,
}

impl Pcn {
    fn new(s: &EmuScenario, topo: &Topology, fabric: &Fabric) -> Option<Pcn> {
        if !s.emulate.pcn.unwrap_or(false) {
            return None;
        }
        let sw = &s.sim.switch;
        let lease = match s.emulate.pcn_lease_us {
            Some(us) => (us * US as f64) as Time,
            None => {
                // as the simulator: twice the worker's fallback, whose queueing is a full
                // buffer at each of the 3 switch ports of a leaf-spine path
                let mtu = s.mtu() as u64;
                let cap = match sw.drop_threshold_packets {
                    0 => sw.buffer_bytes,
                    n => sw.buffer_bytes.min(n as u64 * mtu),
                };
                let rate = (s.sim.topology.host_link_gbps * 1e9) as u64;
                let drain = serialization(cap.min(u32::MAX as u64) as u32, rate.max(1));
                2 * worker_fallback(s.sim.base_rtt_ns() * NS, 3 * drain)
            }
        };
        let k = sw.ecn_threshold_packets;
        let regs = fabric
            .ports
            .iter()
            .map(|p| (topo.nodes[p.from as usize].kind == NodeKind::Switch).then(|| PcnRegister::new(k, lease)))
            .collect();
        Some(Pcn { regs, applied: vec![k; fabric.ports.len()] })
    }
}

/// Packets read from a host's TUN device stamped before the fabric's clock (see
/// [`Switch::horizon`]): they enter their NIC port at the clock instead, later than the
/// host wrote them. Only a device read for [`MAX_LAG`] without being found empty lets the
/// clock pass a host's idle time.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StaleIngress {
    pub packets: u64,
    /// The worst, in microseconds behind the clock.
    pub max_us: u64,
}

/// Every packet offered to one port, as CSV (`GRADWIRE_EMU_TRACE=PORT:FILE`): the offer's
/// time and the fabric's clock (ns), the source host, bytes, queue bytes before the offer,
/// and whether it was queued.
struct Trace {
    port: PortId,
    out: std::io::BufWriter<std::fs::File>,
}

/// What PCN's registers did, summed over the switch ports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PcnTotals {
    pub port_starts: u64,
    pub port_bursts: u64,
    pub unmatched_bursts: u64,
    pub port_lease_expiries: u64,
    /// Ports whose PCN threshold is in force now.
    pub ports_lowered: u64,
}

pub struct Switch {
    topo: Topology,
    pcn: Option<Pcn>,
    fabric: Fabric,
    routes: Routes,
    /// ECMP (hashing the scenario's seed with the flow, as the simulator does) or spraying.
    pick: Pick,
    /// Loss probability of each port's link and its own generator, so one link's draws do
    /// not depend on traffic elsewhere.
    loss: Vec<f64>,
    loss_rng: Vec<Xoshiro256PlusPlus>,
    spray_rng: Xoshiro256PlusPlus,
    events: BinaryHeap<Reverse<(Time, Event)>>,
    slots: Vec<Box<[u8]>>,
    free: Vec<u32>,
    /// Host `h`'s NIC: its only egress port.
    nic: Vec<PortId>,
    /// Bytes a host's NIC queue holds of packets other than TCP (0: unbounded). TCP is
    /// never dropped there: on a real host TCP small queues hold a flow's data in its
    /// socket while the NIC is busy, but a TUN device frees the socket's buffer as soon as
    /// the switch reads a packet, so that backpressure cannot reach the kernel here. UDP
    /// has no such limit on a real host either, and meets a full qdisc: this bound.
    nic_limit: u64,
    pub sent: u64,
    pub delivered: u64,
    pub drops: [u64; DropReason::ALL.len()],
    pub ignored: Ignored,
    mtu: usize,
    /// Every event up to this time has run.
    clock: Time,
    /// When each host's TUN device was last found empty: what it sends next, it wrote
    /// later, and enters the host's NIC port at this time (the earliest it can have).
    idle: Vec<Time>,
    /// Since when each host's device has been read without being found empty.
    backlogged: Vec<Option<Time>>,
    stale: StaleIngress,
    trace: Option<Trace>,
    /// Per port: how long after its next `Arrive` / `TxDone` event a packet can reach a host
    /// at the earliest (see [`Switch::next_wake`]).
    arrive_lookahead: Vec<Time>,
    txdone_lookahead: Vec<Time>,
}

impl Switch {
    pub fn new(s: &EmuScenario) -> Switch {
        let topo = Topology::build(&s.sim.topology);
        let fabric = Fabric::build(&s.sim, &topo);
        let routes = Routes::compute(&topo, &fabric.node_ports, &fabric.hops());
        let loss: Vec<f64> = fabric
            .ports
            .iter()
            .map(|p| *s.emulate.link_loss.get(&p.name).unwrap_or(&s.sim.topology.link_loss_rate))
            .collect();
        let loss_rng = (0..fabric.ports.len() as u64)
            .map(|i| Xoshiro256PlusPlus::seed_from_u64(s.sim.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i)))
            .collect();
        let nic: Vec<PortId> = (0..topo.hosts).map(|h| fabric.node_ports[h as usize][0]).collect();
        // A host NIC's queue is the emulator's to bound (see `nic_limit`), not its pool's.
        let mut fabric = fabric;
        for &p in &nic {
            let pool = fabric.ports[p as usize].pool as usize;
            fabric.pools[pool] = BufferPool::unbounded();
        }
        let hosts = topo.hosts as usize;
        // A packet that reaches a switch leaves it through one of the switch's ports: it
        // reaches the far end no sooner than that port's link delay. A port's next packet
        // starts at its TxDone and reaches the far end a link delay later.
        let to_host = |p: &gradwire_sim::fabric::Port| topo.nodes[p.to as usize].kind == NodeKind::Host;
        let arrive_lookahead: Vec<Time> = fabric
            .ports
            .iter()
            .map(|p| match to_host(p) {
                true => 0,
                false => {
                    let out = &fabric.node_ports[p.to as usize];
                    out.iter().map(|&q| fabric.ports[q as usize].delay).min().unwrap_or(0)
                }
            })
            .collect();
        // and a delivery is held for the receive moderation (`rx_coalesce`) before the
        // driver writes it, so nothing needs the fabric to run before then
        let rx = s.rx_coalesce();
        let arrive_lookahead: Vec<Time> = arrive_lookahead.into_iter().map(|a| a + rx).collect();
        let txdone_lookahead = fabric.ports.iter().zip(&arrive_lookahead).map(|(p, a)| p.delay + a).collect();
        Switch {
            arrive_lookahead,
            txdone_lookahead,
            pcn: Pcn::new(s, &topo, &fabric),
            nic_limit: s.sim.host.nic_queue_bytes,
            pick: match s.sim.routing.mode {
                RoutingMode::Spray => Pick::Spray,
                RoutingMode::Ecmp => Pick::Ecmp { seed: s.sim.seed },
            },
            spray_rng: Xoshiro256PlusPlus::seed_from_u64(s.sim.seed ^ 0x5eed),
            topo,
            fabric,
            routes,
            loss,
            loss_rng,
            events: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            nic,
            sent: 0,
            delivered: 0,
            drops: [0; DropReason::ALL.len()],
            ignored: Ignored::default(),
            mtu: s.mtu() as usize,
            clock: 0,
            idle: vec![0; hosts],
            backlogged: vec![None; hosts],
            stale: StaleIngress::default(),
            trace: None,
        }
    }

    /// Trace every packet offered to the port `name` into `path` (see [`Trace`]).
    pub fn trace_port(&mut self, name: &str, path: &std::path::Path) -> std::io::Result<()> {
        let port = self.fabric.ports.iter().position(|p| p.name == name).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("no port {name:?} to trace"))
        })? as PortId;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        std::io::Write::write_all(&mut out, b"t_ns,clock_ns,src,bytes,queue_bytes,queued\n")?;
        self.trace = Some(Trace { port, out });
        Ok(())
    }

    pub fn hosts(&self) -> u32 {
        self.topo.hosts
    }

    pub fn port_names(&self) -> Vec<String> {
        self.fabric.ports.iter().map(|p| p.name.clone()).collect()
    }

    /// A free packet buffer to read into (at least the MTU); hand it back with [`Switch::ingress`].
    pub fn take_slot(&mut self) -> u32 {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(vec![0u8; HEADROOM + self.mtu.max(2048)].into_boxed_slice());
                (self.slots.len() - 1) as u32
            }
        }
    }

    pub fn slot_mut(&mut self, id: u32) -> &mut [u8] {
        &mut self.slots[id as usize]
    }

    pub fn release_slot(&mut self, id: u32) {
        self.free.push(id);
    }

    /// Host `host`'s TUN device was found empty at `t`.
    pub fn host_idle(&mut self, host: u32, t: Time) {
        let idle = &mut self.idle[host as usize];
        *idle = (*idle).max(t);
        self.backlogged[host as usize] = None;
    }

    /// Host `host`'s TUN device still held packets at `t` when the switch stopped reading
    /// it for this round. After [`MAX_LAG`] of that its idle time follows `t - MAX_LAG`.
    pub fn host_backlogged(&mut self, host: u32, t: Time) {
        let since = *self.backlogged[host as usize].get_or_insert(t);
        if t > since + MAX_LAG {
            let idle = &mut self.idle[host as usize];
            *idle = (*idle).max(t - MAX_LAG);
        }
    }

    /// How far [`Switch::advance`] may run at wall time `now`: to the earliest time a host's
    /// TUN device was last found empty (see [`Switch::host_backlogged`]). A packet
    /// still unread enters its NIC port at its host's idle time, so no event before then
    /// may run yet: a port that ran ahead (on another host's packets) would queue a late
    /// read backlog behind traffic that followed it. That is how one sender per port
    /// filled the ring's ports: its backlog, read after a late wake and stamped 10–20 ms
    /// in the past, queued behind the acknowledgments a third host had sent since.
    pub fn horizon(&self, now: Time) -> Time {
        self.idle.iter().copied().min().unwrap_or(now).min(now)
    }

    /// Host `host` sent the `len`-byte packet at `HEADROOM..` of slot `id`, read at
    /// `read_at`: it enters the host's NIC port when the host's TUN device was last found
    /// empty, or at the fabric's clock if that has passed.
    pub fn ingress(&mut self, host: u32, id: u32, len: usize, read_at: Time) {
        let written = self.idle[host as usize];
        let now = written.max(self.clock);
        let info = match ipv4::parse(&self.slots[id as usize][HEADROOM..HEADROOM + len]) {
            Ok(info) => info,
            Err(e) => {
                match e {
                    ParseError::NotIpv4 => self.ignored.not_ipv4 += 1,
                    ParseError::Malformed => self.ignored.malformed += 1,
                }
                return self.release_slot(id);
            }
        };
        self.sent += 1;
        let dst = match info.dst {
            [a, b, c, d] if [a, b, c] == SUBNET && d >= 1 && (d as u32) <= self.topo.hosts => d as u32 - 1,
            _ => return self.drop(id, DropReason::NoRoute),
        };
        let hdr = Hdr {
            id,
            flow: info.flow_hash(),
            dst,
            wire_bytes: info.total_len,
            priority: info.priority(),
            ect: info.ect(),
            rank: 0,
        };
        if written < self.clock {
            self.stale.packets += 1;
            self.stale.max_us = self.stale.max_us.max((self.clock - written) / US);
        }
        let nic = self.nic[host as usize];
        if info.proto != 6 && self.nic_limit > 0 {
            // The NIC's backlog when the host wrote the packet, at the latest (when it was
            // read): the packet is stamped at the device's idle time, and a backlog read
            // after a late wake all carries that one stamp although the host wrote it over
            // the whole wait while its NIC drained. Counted at the stamp, a sender within
            // the line rate would overflow the queue after every late wake of the switch.
            let port = &mut self.fabric.ports[nic as usize];
            let queued = port.tx_time(port.queue.bytes().min(u32::MAX as u64) as u32);
            let drained_at = port.busy_until.max(now) + queued;
            let behind = drained_at.saturating_sub(read_at.max(now));
            let limit = port.tx_time(self.nic_limit.min(u32::MAX as u64) as u32);
            if behind + port.tx_time(hdr.wire_bytes as u32) > limit {
                port.queue.count_drop(DropReason::BufferFull);
                return self.drop(id, DropReason::BufferFull);
            }
        }
        self.offer(nic, hdr, now);
    }

    fn drop(&mut self, id: u32, reason: DropReason) {
        self.drops[reason as usize] += 1;
        self.release_slot(id);
    }

    /// A switch port's PCN register sees the packet's mark (and its own lease expiry); the
    /// port's ECN threshold follows the register.
    fn pcn_at_port(&mut self, p: PortId, hdr: &Hdr, t: Time) {
        let Some(pcn) = self.pcn.as_mut() else { return };
        let Some(reg) = pcn.regs[p as usize].as_mut() else { return };
        reg.handle_timeout(t);
        if let Some(mark) = PcnMark::decode(self.slots[hdr.id as usize][HEADROOM + 1] >> 2) {
            reg.on_mark(mark, t);
        }
        let th = reg.threshold();
        if th != pcn.applied[p as usize] {
            pcn.applied[p as usize] = th;
            self.fabric.ports[p as usize].queue.set_ecn_threshold(th);
        }
    }

    /// Offer a packet to port `p`'s queue at time `t`; start sending if the port is idle.
    fn offer(&mut self, p: PortId, hdr: Hdr, t: Time) {
        self.pcn_at_port(p, &hdr, t);
        let mut pkt = Packet::data(hdr.flow, 0, hdr.dst, 0, 0, hdr.wire_bytes as u32);
        pkt.priority = hdr.priority;
        pkt.ecn.ect = hdr.ect;
        let port = &mut self.fabric.ports[p as usize];
        let pool = &mut self.fabric.pools[port.pool as usize];
        let before = port.queue.bytes();
        let verdict = port.queue.enqueue(hdr, &pkt, pool);
        let busy = port.wake_pending;
        if let Some(tr) = self.trace.as_mut().filter(|tr| tr.port == p) {
            let src = (self.slots[hdr.id as usize][HEADROOM + 15] as u32).wrapping_sub(1);
            let queued = matches!(verdict, Admit::Queued { .. });
            let line = format!("{},{},{src},{},{before},{}\n", t / NS, self.clock / NS, hdr.wire_bytes, queued as u8);
            let _ = std::io::Write::write_all(&mut tr.out, line.as_bytes());
        }
        match verdict {
            Admit::Dropped(reason) => self.drop(hdr.id, reason),
            Admit::Queued { marked } => {
                if marked {
                    ipv4::mark_ce(&mut self.slots[hdr.id as usize][HEADROOM..]);
                }
                if !busy {
                    self.start_tx(p, t);
                }
            }
        }
    }

    fn start_tx(&mut self, p: PortId, t: Time) {
        let Some((_, sent)) = self.fabric.transmit(p, t) else { return };
        self.fabric.ports[p as usize].wake_pending = true;
        if sent.first {
            self.events.push(Reverse((sent.arrives, Event::Arrive(p))));
        }
        self.events.push(Reverse((sent.done, Event::TxDone(p))));
    }

    /// When the next event is due, if any.
    pub fn next_deadline(&self) -> Option<Time> {
        self.events.peek().map(|Reverse((t, _))| *t)
    }

    /// When the driver must run the fabric next so that no packet reaches its host late:
    /// the earliest time a pending event can hand a packet to a host. An event that moves a
    /// packet inside the fabric (a port finishing a packet, a packet reaching a switch)
    /// delivers nothing itself, and what it causes reaches a host a link delay later at the
    /// earliest, so it may run late, in time order, on the wake of a later event: the
    /// fabric is a model on a virtual clock, only deliveries are bound to the wall clock.
    /// With packets a serialization time apart on each hop this is one wake per delivery,
    /// not one per event. Every event due by the wake runs then (`advance` runs the events
    /// it causes up to its `now` as well), so a delivery is never later than it would be
    /// with a wake per event.
    pub fn next_wake(&self) -> Option<Time> {
        self.events
            .iter()
            .map(|&Reverse((t, ev))| match ev {
                Event::Arrive(p) => t + self.arrive_lookahead[p as usize],
                Event::TxDone(p) => t + self.txdone_lookahead[p as usize],
            })
            .min()
    }

    /// Run every event due by `now` (the driver passes [`Switch::horizon`]);
    /// `deliver(host, arrival time, headroom, packet)` writes to a host's TUN.
    pub fn advance(&mut self, now: Time, mut deliver: impl FnMut(u32, Time, &[u8], &[u8])) {
        while let Some(&Reverse((t, ev))) = self.events.peek() {
            if t > now {
                break;
            }
            self.events.pop();
            match ev {
                Event::TxDone(p) => {
                    self.fabric.ports[p as usize].wake_pending = false;
                    self.start_tx(p, t);
                }
                Event::Arrive(p) => self.arrive(p, t, &mut deliver),
            }
        }
        self.clock = self.clock.max(now);
    }

    fn arrive(&mut self, p: PortId, t: Time, deliver: &mut impl FnMut(u32, Time, &[u8], &[u8])) {
        let (hdr, next) = self.fabric.arrive(p, t).expect("an Arrive event is its wire's head, due at its time");
        if let Some(next) = next {
            self.events.push(Reverse((next, Event::Arrive(p))));
        }
        let to = self.fabric.ports[p as usize].to;
        let loss = self.loss[p as usize];
        if loss > 0.0 && self.loss_rng[p as usize].gen::<f64>() < loss {
            self.fabric.ports[p as usize].queue.count_drop(DropReason::RandomLoss);
            return self.drop(hdr.id, DropReason::RandomLoss);
        }
        if self.topo.nodes[to as usize].kind == NodeKind::Host {
            let slot = &self.slots[hdr.id as usize];
            deliver(to, t, &slot[..HEADROOM], &slot[HEADROOM..HEADROOM + hdr.wire_bytes as usize]);
            self.delivered += 1;
            return self.release_slot(hdr.id);
        }
        match self.routes.pick(to, hdr.dst, hdr.flow, self.pick, &mut self.spray_rng) {
            Some(port) => self.offer(port, hdr, t),
            None => self.drop(hdr.id, DropReason::NoRoute),
        }
    }

    /// Packets inside the network: queued or on a wire.
    pub fn in_flight(&self) -> u64 {
        self.fabric.ports.iter().map(|p| p.queue.packets() as u64 + p.wire.len() as u64).sum()
    }

    pub fn stats(&self) -> Stats {
        let dropped: u64 = self.drops.iter().sum();
        let in_flight = self.in_flight();
        let drops_of = |d: &[u64]| -> BTreeMap<String, u64> {
            DropReason::ALL.iter().map(|r| (r.as_str().to_string(), d[*r as usize])).collect()
        };
        let pcn = self.pcn.as_ref().map(|pcn| {
            let mut t = PcnTotals::default();
            for r in pcn.regs.iter().flatten() {
                t.port_starts += r.counters.starts;
                t.port_bursts += r.counters.bursts;
                t.unmatched_bursts += r.counters.unmatched_bursts;
                t.port_lease_expiries += r.counters.lease_expiries;
                t.ports_lowered += (r.pending() > 0) as u64;
            }
            t
        });
        Stats {
            stale_ingress: self.stale.clone(),
            pcn,
            drops: drops_of(&self.drops),
            ecn_marks: self.fabric.ports.iter().map(|p| p.queue.counters().ecn_marked).sum(),
            packets: PacketCounts {
                sent: self.sent,
                delivered: self.delivered,
                dropped,
                in_flight,
                conserved: self.sent == self.delivered + dropped + in_flight,
            },
            ignored: self.ignored.clone(),
            ports: self
                .fabric
                .ports
                .iter()
                .map(|p| {
                    let c = p.queue.counters();
                    let admission: u64 = c.dropped.iter().sum::<u64>() - c.dropped[DropReason::RandomLoss as usize];
                    PortStats {
                        name: p.name.clone(),
                        offered: c.enqueued + admission,
                        enqueued: c.enqueued,
                        dequeued: c.dequeued,
                        ecn_marked: c.ecn_marked,
                        drops: drops_of(&c.dropped),
                        max_bytes: c.max_bytes,
                        queued_packets: p.queue.packets() as u64,
                        on_wire: p.wire.len() as u64,
                    }
                })
                .collect(),
        }
    }
}

/// One port's counters: `offered = enqueued + admission drops`,
/// `enqueued = dequeued + queued_packets`, `dequeued = on_wire + random_loss + passed on`.
#[derive(Clone, Debug, Serialize)]
pub struct PortStats {
    pub name: String,
    pub offered: u64,
    pub enqueued: u64,
    pub dequeued: u64,
    pub ecn_marked: u64,
    pub drops: BTreeMap<String, u64>,
    pub max_bytes: u64,
    pub queued_packets: u64,
    pub on_wire: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    pub stale_ingress: StaleIngress,
    /// With `emulate.pcn`: what the switch ports' PCN registers did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcn: Option<PcnTotals>,
    pub drops: BTreeMap<String, u64>,
    pub ecn_marks: u64,
    pub packets: PacketCounts,
    pub ignored: Ignored,
    pub ports: Vec<PortStats>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::test_packet;
    use crate::scenario;
    use gradwire_core::time::{MS, NS, US};

    fn switch(toml: &str) -> Switch {
        Switch::new(&scenario::load(toml).unwrap())
    }

    /// `host` wrote `pkt` to its TUN device; the switch reads it at `t`.
    fn read(sw: &mut Switch, host: u32, pkt: &[u8], t: Time) {
        let id = sw.take_slot();
        sw.slot_mut(id)[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
        sw.ingress(host, id, pkt.len(), t);
    }

    /// Offer `pkt` from `host` at `t`.
    fn send(sw: &mut Switch, host: u32, pkt: &[u8], t: Time) {
        sw.host_idle(host, t);
        read(sw, host, pkt, t);
    }

    /// Run to completion; every delivery as (time, host, packet).
    fn drain(sw: &mut Switch) -> Vec<(Time, u32, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = sw.next_deadline() {
            sw.advance(t, |h, _, _, p| out.push((t, h, p.to_vec())));
        }
        out
    }

    fn tos(priority: u8, ect: bool) -> u8 {
        ((7 - priority) << 3) << 2 | if ect { 0b10 } else { 0 }
    }

    #[test]
    fn forwards_at_line_rate_with_link_delays() {
        // 1 Gbit/s: 1500 B take 12 us per link; two links of 5 us each
        let mut sw = switch("[topology]\nhosts_per_leaf = 2\n");
        for _ in 0..3 {
            send(&mut sw, 0, &test_packet(host_addr(0), host_addr(1), 0, 1500), 0);
        }
        let got = drain(&mut sw);
        let times: Vec<Time> = got.iter().map(|g| g.0 / NS).collect();
        // first: 12 + 5 + 12 + 5 us; then one per 12 us (the bottleneck's serialization)
        assert_eq!(times, vec![34_000, 46_000, 58_000]);
        assert!(got.iter().all(|g| g.1 == 1));
        let st = sw.stats();
        assert!(st.packets.conserved && st.packets.delivered == 3);
    }

    type Delivery = (Time, Time, u32, Vec<u8>);

    /// Two racks, three senders into two receivers, packets of several sizes: every
    /// delivery as (wake time, arrival time, host, packet), waking for every event, or only
    /// at `next_wake`; and how many wakes.
    fn deliveries(rx_coalesce_us: f64, every_event: bool) -> (Vec<Delivery>, usize) {
        let mut sw = switch(&format!(
            "[topology]\nleaves = 2\nspines = 1\nuplinks_per_leaf = 1\nhosts_per_leaf = 3\nuplink_gbps = 1.0\n\
             [emulate]\nrx_coalesce_us = {rx_coalesce_us}\n"
        ));
        for i in 0..60u64 {
            let (src, dst) = [(0, 4), (1, 4), (3, 2)][i as usize % 3];
            let len = [1500, 64, 900][(i as usize / 2) % 3];
            send(&mut sw, src, &test_packet(host_addr(src), host_addr(dst), 0, len), i * 3 * US);
        }
        let (mut out, mut wakes) = (Vec::new(), 0);
        while let Some(t) = if every_event { sw.next_deadline() } else { sw.next_wake() } {
            sw.advance(t, |h, at, _, p| out.push((t, at, h, p.to_vec())));
            wakes += 1;
        }
        (out, wakes)
    }

    #[test]
    fn waking_only_for_deliveries_delivers_every_packet_at_its_time() {
        let (want, wakes_every) = deliveries(0.0, true);
        let (got, wakes_lazy) = deliveries(0.0, false);
        assert_eq!(got.len(), 60);
        assert_eq!(got, want);
        assert!(wakes_lazy * 2 < wakes_every, "{wakes_lazy} wakes against {wakes_every}");
        // with receive moderation a packet waits at most that long, and fewer wakes take them
        let (held, wakes_held) = deliveries(20.0, false);
        let arrivals = |d: &[Delivery]| d.iter().map(|g| (g.1, g.2, g.3.clone())).collect::<Vec<_>>();
        assert_eq!(arrivals(&held), arrivals(&want));
        assert!(held.iter().all(|g| g.0 >= g.1 && g.0 <= g.1 + 20 * US));
        assert!(wakes_held < wakes_lazy, "{wakes_held} wakes against {wakes_lazy}");
    }

    #[test]
    fn strict_priority_and_ce_marks_at_the_congested_port() {
        // hosts 0 and 1 both send to host 2: its port queues; K = 2 packets
        let mut sw = switch("[topology]\nhosts_per_leaf = 3\n[switch]\necn_threshold_packets = 2\n");
        for i in 0..6 {
            send(&mut sw, 0, &test_packet(host_addr(0), host_addr(2), tos(7, true), 1500), i * NS);
        }
        for i in 0..3 {
            send(&mut sw, 1, &test_packet(host_addr(1), host_addr(2), tos(1, true), 1500), i * NS);
        }
        let got = drain(&mut sw);
        let prios: Vec<u8> = got.iter().map(|g| ipv4::parse(&g.2).unwrap().priority()).collect();
        // the first low-priority packet was already on the wire; the high-priority ones
        // overtake the rest
        assert_eq!(prios, vec![7, 1, 1, 1, 7, 7, 7, 7, 7]);
        let ce = got.iter().filter(|g| g.2[1] & 0b11 == 0b11).count() as u64;
        assert!(ce > 0);
        let st = sw.stats();
        assert_eq!(st.ecn_marks, ce);
        assert!(got.iter().all(|g| ipv4::header_checksum(&g.2[..20]) == 0));
    }

    #[test]
    fn pcn_start_lowers_the_ecn_threshold_until_its_burst_passes() {
        // hosts 0 and 1 send 15 ECT packets each to host 2: its port queues ~15 packets,
        // below K = 20, above a PCN threshold of 5
        let marks = |pcn: bool, start: bool| {
            let mut sw = switch(&format!(
                "[topology]\nhosts_per_leaf = 3\n[switch]\necn_threshold_packets = 20\n[emulate]\npcn = {pcn}\n"
            ));
            let start_tos = (PcnMark::Start { threshold: 5 }.encode().unwrap() << 2) | 0b10;
            if start {
                send(&mut sw, 0, &test_packet(host_addr(0), host_addr(2), start_tos, 100), 0);
            }
            for i in 0..15 {
                for src in [0, 1] {
                    send(&mut sw, src, &test_packet(host_addr(src), host_addr(2), 0b10, 1500), 1000 * NS + i * NS);
                }
            }
            let ce = drain(&mut sw).iter().filter(|g| g.2[1] & 0b11 == 0b11).count();
            (ce, sw)
        };
        assert_eq!(marks(false, true).0, 0, "without PCN the DSCP only picks a queue");
        assert_eq!(marks(true, false).0, 0);
        let (ce, mut sw) = marks(true, true);
        assert!(ce > 0);
        let st = sw.stats().pcn.unwrap();
        // one switch port saw the START (the host NIC has no register) and is still lowered
        assert_eq!((st.port_starts, st.ports_lowered), (1, 1));
        let burst_tos = PcnMark::Burst.encode().unwrap() << 2;
        send(&mut sw, 0, &test_packet(host_addr(0), host_addr(2), burst_tos, 100), 10 * US * 1000);
        drain(&mut sw);
        let st = sw.stats().pcn.unwrap();
        assert_eq!((st.port_bursts, st.ports_lowered), (1, 0));
    }

    /// The driver's pattern (`run.rs`): rounds that read up to 64 packets from each host
    /// (1 us a packet), noting each device found empty or still backlogged, then
    /// `advance(horizon)`. After a round that read nothing the switch sleeps 50 us, and
    /// every 100th sleep 10 ms (a late wake on a loaded machine). `writers`: host `h`
    /// writes `packet` every `gap`.
    fn drive(sw: &mut Switch, writers: &[(u32, Vec<u8>, Time)], until: Time) {
        let mut taken = vec![0u64; writers.len()];
        let (mut now, mut sleeps) = (0, 0);
        while now < until {
            let mut got = 0;
            for h in 0..sw.hosts() {
                let mut n = 0;
                loop {
                    // the host's oldest unread packet, if written by now
                    let next = (writers.iter().enumerate())
                        .filter(|(i, w)| w.0 == h && (taken[*i] + 1) * w.2 <= now)
                        .min_by_key(|(i, w)| (taken[*i] + 1) * w.2);
                    let Some((i, w)) = next else {
                        sw.host_idle(h, now);
                        break;
                    };
                    if n == 64 {
                        sw.host_backlogged(h, now);
                        break;
                    }
                    read(sw, h, &w.1, now);
                    taken[i] += 1;
                    n += 1;
                    now += US;
                }
                got += n;
            }
            sw.advance(sw.horizon(now), |_, _, _, _| {});
            if got == 0 {
                sleeps += 1;
                now += if sleeps % 100 == 0 { 10 * MS } else { 50 * US };
            }
        }
    }

    fn port<'a>(st: &'a Stats, name: &str) -> &'a PortStats {
        st.ports.iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn packets_stamped_when_the_tun_was_last_empty_keep_a_sender_within_the_line_rate() {
        // a 300 KB NIC queue: a 10 ms wake's backlog (1.2 MB) all carries one stamp, yet
        // the host wrote it while its NIC drained, so nothing overflows
        let mut sw = switch(
            "[topology]\nhosts_per_leaf = 2\n[switch]\nbuffer_bytes = 512000\n[host]\nnic_queue_bytes = 300000\n",
        );
        // 0.95 Gbit/s of 1500-byte packets
        let data = test_packet(host_addr(0), host_addr(1), 0b10, 1500);
        drive(&mut sw, &[(0, data, 12_632 * NS)], 200 * MS);
        let st = sw.stats();
        let (leaf, nic) = (port(&st, "leaf0->host1"), port(&st, "host0->leaf0"));
        assert!(leaf.max_bytes <= 3000, "leaf {} nic {}", leaf.max_bytes, nic.max_bytes);
        assert!(nic.max_bytes > 300_000, "the 10 ms wakes leave a backlog: {}", nic.max_bytes);
        assert_eq!(nic.drops["buffer_full"], 0);
    }

    #[test]
    fn a_late_read_backlog_does_not_queue_behind_a_third_hosts_later_packets() {
        // the ring's port into host 1: host 0's data at 0.95 Gbit/s, and host 2's small
        // control packets (its reports to host 1, a sender too) every 100 us. When the
        // fabric ran to the wall clock before reading, host 2's packets (read at once)
        // moved the port to the present and host 0's backlog after a 10 ms wake (read over
        // several rounds, stamped 10 ms back) queued behind them: 512 KB and drops.
        let mut sw = switch("[topology]\nhosts_per_leaf = 3\n[switch]\nbuffer_bytes = 512000\n");
        let data = test_packet(host_addr(0), host_addr(1), 0b10, 1500);
        let report = test_packet(host_addr(2), host_addr(1), tos(0, false), 64);
        drive(&mut sw, &[(0, data, 12_632 * NS), (2, report, 100 * US)], 200 * MS);
        let st = sw.stats();
        let leaf = port(&st, "leaf0->host1");
        // while host 0's NIC drains a 10 ms backlog at the line rate, host 2's packets add
        // a few KB
        assert!(leaf.max_bytes <= 15_000, "leaf0->host1 held {} B", leaf.max_bytes);
        assert_eq!(leaf.drops["buffer_full"], 0);
        assert_eq!(st.stale_ingress.packets, 0, "{:?}", st.stale_ingress);
    }

    #[test]
    fn a_device_never_found_empty_holds_the_fabric_back_at_most_max_lag() {
        let mut sw = switch("[topology]\nhosts_per_leaf = 2\n");
        sw.host_idle(1, 10 * MS);
        for t in (0..=10).map(|i| i * MS) {
            sw.host_backlogged(0, t);
        }
        assert_eq!(sw.horizon(10 * MS), 10 * MS - MAX_LAG);
        sw.host_idle(0, 10 * MS);
        assert_eq!(sw.horizon(10 * MS), 10 * MS);
    }

    #[test]
    fn conservation_with_random_loss_and_buffer_drops() {
        let mut sw = switch(
            "seed = 7\n[topology]\nhosts_per_leaf = 4\nlink_loss_rate = 0.05\n[switch]\nbuffer_bytes = 15000\necn_threshold_packets = 0\n",
        );
        for i in 0..400u64 {
            let src = (i % 3) as u32 + 1;
            send(&mut sw, src, &test_packet(host_addr(src), host_addr(0), 0, 1500), i * US / 4);
            // mid-run: some packets are still queued or on a wire
            if i == 200 {
                sw.advance(i * US / 4, |_, _, _, _| {});
                let st = sw.stats();
                assert!(st.packets.in_flight > 0 && st.packets.conserved);
            }
        }
        send(&mut sw, 1, &test_packet(host_addr(1), [10, 9, 9, 9], 0, 100), 0);
        drain(&mut sw);
        let st = sw.stats();
        assert!(st.packets.conserved, "{:?}", st.packets);
        assert_eq!(st.packets.in_flight, 0);
        assert!(st.drops["random_loss"] > 0 && st.drops["buffer_full"] > 0 && st.drops["no_route"] == 1);
        let per_port: u64 = st.ports.iter().map(|p| p.drops.values().sum::<u64>()).sum();
        assert_eq!(per_port + 1, st.packets.dropped, "every drop but no_route belongs to a port");
        for p in &st.ports {
            assert_eq!(p.enqueued, p.dequeued + p.queued_packets, "{}", p.name);
        }
    }

    #[test]
    fn nic_queue_bounds_udp_but_never_drops_tcp() {
        let mut sw = switch("[topology]\nhosts_per_leaf = 2\n[host]\nnic_queue_bytes = 15000\n");
        for _ in 0..40 {
            send(&mut sw, 0, &test_packet(host_addr(0), host_addr(1), 0, 1500), 0);
            let mut tcp = test_packet(host_addr(0), host_addr(1), 0, 1500);
            tcp[9] = 6;
            send(&mut sw, 0, &tcp, 0);
        }
        let st = sw.stats();
        let nic = &st.ports[0];
        assert_eq!(nic.name, "host0->leaf0");
        // 10 packets of 1500 bytes fill 15000 bytes; the UDP ones beyond are dropped
        assert!(nic.drops["buffer_full"] >= 30 && nic.drops["buffer_full"] < 40, "{:?}", nic.drops);
        assert_eq!(nic.enqueued, 40 + 40 - nic.drops["buffer_full"]);
        drain(&mut sw);
        let st = sw.stats();
        assert!(st.packets.conserved && st.packets.delivered == 80 - st.packets.dropped);
    }

    #[test]
    fn same_seed_same_losses() {
        let run = |seed: u64| {
            let mut sw = switch(&format!("seed = {seed}\n[topology]\nhosts_per_leaf = 2\nlink_loss_rate = 0.2\n"));
            for i in 0..200u64 {
                send(&mut sw, 0, &test_packet(host_addr(0), host_addr(1), 0, 200), i * 10 * US);
            }
            drain(&mut sw).iter().map(|g| g.0).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn leaf_spine_crosses_the_spine_between_racks() {
        let mut sw =
            switch("[topology]\nleaves = 2\nspines = 2\nuplinks_per_leaf = 2\nhosts_per_leaf = 2\nuplink_gbps = 1.0\n");
        send(&mut sw, 0, &test_packet(host_addr(0), host_addr(3), 0, 1000), 0);
        send(&mut sw, 0, &test_packet(host_addr(0), host_addr(1), 0, 1000), 0);
        let got = drain(&mut sw);
        assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), vec![1, 3]);
        let st = sw.stats();
        let spine: u64 = st.ports.iter().filter(|p| p.name.starts_with("spine")).map(|p| p.dequeued).sum();
        assert_eq!(spine, 1);
    }

    /// ECMP: the emulator forwards each flow on the spine the simulator's routing picks for
    /// the same flow id, node and seed (`Routes::ecmp`), and another seed splits the same
    /// flows differently.
    #[test]
    fn ecmp_picks_the_simulators_port_for_each_flow() {
        let toml = |seed: u64| {
            format!("seed = {seed}\n[topology]\nleaves = 2\nspines = 4\nuplinks_per_leaf = 4\nhosts_per_leaf = 2\n")
        };
        let spine_of = |seed: u64| -> Vec<String> {
            let mut picks = Vec::new();
            for sport in 0..40u16 {
                let mut sw = switch(&toml(seed));
                let mut p = test_packet(host_addr(0), host_addr(2), 0, 200);
                p[20..22].copy_from_slice(&(5000 + sport).to_be_bytes());
                send(&mut sw, 0, &p, 0);
                drain(&mut sw);
                let st = sw.stats();
                let up = st.ports.iter().filter(|q| q.name.starts_with("leaf0->spine") && q.offered == 1);
                let emulated = up.map(|q| q.name.clone()).collect::<Vec<_>>().concat();
                // the simulator's forwarding of the same flow id (`Simulation::new`'s build)
                let sim = scenario::load(&toml(seed)).unwrap().sim;
                let topo = Topology::build(&sim.topology);
                let fabric = Fabric::build(&sim, &topo);
                let routes = Routes::compute(&topo, &fabric.node_ports, &fabric.hops());
                let leaf0 = fabric.ports.iter().find(|q| q.name.starts_with("leaf0->spine")).unwrap().from;
                let flow = crate::ipv4::parse(&p).unwrap().flow_hash();
                let port = routes.ecmp(leaf0, 2, flow, seed).unwrap();
                assert_eq!(emulated, fabric.ports[port as usize].name, "flow {flow:#x}, seed {seed}");
                picks.push(emulated);
            }
            picks
        };
        let (a, b) = (spine_of(1), spine_of(2));
        let spines: std::collections::BTreeSet<&String> = a.iter().collect();
        assert_eq!(spines.len(), 4, "40 flows over 4 spines: {spines:?}");
        assert_ne!(a, b, "the seed enters the hash");
    }
}
