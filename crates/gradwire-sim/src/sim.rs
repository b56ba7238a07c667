//! The simulated world: fabric + routes + endpoints + workload, advanced by the event queue.

use crate::engine::{EventQueue, Target};
use crate::fabric::{Fabric, PktId};
use crate::output::{QueueSample, Summary};
use crate::routing::{PortId, Routes};
use crate::scenario::{RoutingMode, Scenario, ScenarioError};
use crate::transports::EndpointFactory;
use crate::topology::{NodeId, NodeKind, Topology};
use crate::workload::{self, Workload};
use gradwire_core::switch::{Admit, DropReason};
use gradwire_core::time::{from_us, Time, MS, NS};
use gradwire_core::transport::{Endpoint, EndpointEvent, EndpointStats};
use gradwire_core::Packet;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::VecDeque;
use std::time::Instant;

/// Run-time state of one flow.
#[derive(Clone, Debug, Default)]
pub struct FlowState {
    pub started: Option<Time>,
    pub finished: Option<Time>,
    pub stats: EndpointStats,
}

/// How far a run has got; cheap to call between `step`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub now_ns: u64,
    pub stop_ns: u64,
    pub flows_done: u64,
    pub flows_total: u64,
    pub events: u64,
    pub finished: bool,
}

/// Packet accounting: every packet is delivered, dropped or still in the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conservation {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub in_flight: u64,
}

impl Conservation {
    pub fn holds(&self) -> bool {
        self.sent == self.delivered + self.dropped + self.in_flight
    }
}

pub struct Simulation {
    pub(crate) scenario: Scenario,
    pub(crate) topo: Topology,
    pub(crate) fabric: Fabric,
    routes: Routes,
    pub(crate) workload: Workload,
    barrier_left: Vec<u32>,
    pub(crate) flows: Vec<FlowState>,
    /// Endpoint `2f` is flow f's sender, `2f + 1` its receiver.
    endpoints: Vec<Option<Box<dyn Endpoint>>>,
    timer_at: Vec<Time>,
    events: EventQueue,
    rng: Xoshiro256PlusPlus,
    factory: EndpointFactory,
    pub(crate) now: Time,
    stop: Time,
    pub(crate) events_processed: u64,
    pub(crate) flows_done: u64,
    pub(crate) counts: Conservation,
    /// Packets that reached a host with no live endpoint for them (late, or misrouted).
    pub(crate) strays: u64,
    pub(crate) drops_by_reason: [u64; DropReason::ALL.len()],
    sampled_ports: Vec<PortId>,
    pub(crate) queue_samples: Vec<QueueSample>,
    failures: Vec<Vec<PortId>>,
    /// Ungated flows by (start time, id); `next_start` is the first not yet started.
    starts: Vec<(Time, u32)>,
    next_start: usize,
    /// Per host, per class: endpoints that may have a packet for the NIC.
    ready: Vec<Vec<VecDeque<u32>>>,
    ready_count: Vec<u32>,
    in_ready: Vec<bool>,
    ep_class: Vec<u8>,
    pub(crate) wall: std::time::Duration,
    finished: bool,
}

impl Simulation {
    pub fn new(scenario: &Scenario) -> Result<Simulation, ScenarioError> {
        scenario.validate()?;
        let s = scenario.clone();
        let topo = Topology::build(&s.topology);
        let fabric = Fabric::build(&s, &topo);
        let routes = Routes::compute(&topo, &fabric.node_ports, &fabric.hops());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(s.seed);
        let workload = workload::build(&s, &topo, &mut rng)?;

        let sampled_ports = s
            .output
            .queue_ports
            .iter()
            .enumerate()
            .map(|(i, name)| {
                fabric.port_by_name(name).map(|p| p as PortId).ok_or_else(|| {
                    ScenarioError::new(
                        format!("output.queue_ports.{i}"),
                        format!("no port named `{name}` (ports are named like `leaf0->host3` or `host0->leaf0`)"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let failures = s
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| resolve_failure(&topo, &fabric, i, f.link.as_deref(), f.node.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;

        let factory = EndpointFactory::new(&s);
        let nflows = workload.flows.len();
        let mut sim = Simulation {
            stop: (s.stop_ms * MS as f64).round() as Time,
            barrier_left: workload.barriers.iter().map(|b| b.waiting_for).collect(),
            flows: vec![FlowState::default(); nflows],
            endpoints: (0..2 * nflows).map(|_| None).collect(),
            timer_at: vec![Time::MAX; 2 * nflows],
            events: EventQueue::new(),
            rng,
            factory,
            now: 0,
            events_processed: 0,
            flows_done: 0,
            counts: Conservation::default(),
            strays: 0,
            drops_by_reason: [0; DropReason::ALL.len()],
            sampled_ports,
            queue_samples: Vec::new(),
            failures,
            starts: Vec::new(),
            next_start: 0,
            ready: vec![vec![VecDeque::new(); s.switch.queues as usize]; topo.hosts as usize],
            ready_count: vec![0; topo.hosts as usize],
            in_ready: vec![false; 2 * nflows],
            ep_class: vec![0; 2 * nflows],
            wall: Default::default(),
            finished: false,
            scenario: s,
            topo,
            fabric,
            routes,
            workload,
        };
        // Ungated flows wait in a time-sorted list rather than in the event heap, which
        // stays small: a DNN iteration schedules ~10^5 starts up front.
        sim.starts = (0..nflows as u32)
            .filter(|&f| sim.workload.flows[f as usize].gate.is_none_or(|b| sim.barrier_left[b as usize] == 0))
            .map(|f| (sim.workload.flows[f as usize].start, f))
            .collect();
        sim.starts.sort_unstable();
        if let Some(&(t, _)) = sim.starts.first() {
            sim.events.push(t, Target::Starts);
        }
        for (i, f) in sim.scenario.failures.iter().enumerate() {
            sim.events.push(from_us(f.at_us), Target::Failure(i as u32));
        }
        if !sim.sampled_ports.is_empty() {
            sim.events.push(0, Target::Sample);
        }
        Ok(sim)
    }

    /// Process up to `max_events` events; returns `true` once the run is over (every flow
    /// finished, nothing left to do, or the stop time reached).
    pub fn step(&mut self, max_events: u64) -> bool {
        if self.finished {
            return true;
        }
        let t0 = Instant::now();
        for _ in 0..max_events {
            if self.flows_done == self.flows.len() as u64 {
                self.finished = true;
                break;
            }
            let Some((t, target)) = self.events.pop() else {
                self.finished = true;
                break;
            };
            if t > self.stop {
                self.now = self.stop;
                self.finished = true;
                break;
            }
            debug_assert!(t >= self.now, "time went backwards");
            self.now = t;
            self.events_processed += 1;
            self.dispatch(target);
        }
        self.wall += t0.elapsed();
        self.finished
    }

    /// Run to the end.
    pub fn run(&mut self) {
        while !self.step(1 << 20) {}
    }

    pub fn progress(&self) -> Progress {
        Progress {
            now_ns: self.now / NS,
            stop_ns: self.stop / NS,
            flows_done: self.flows_done,
            flows_total: self.flows.len() as u64,
            events: self.events_processed,
            finished: self.finished,
        }
    }

    pub fn conservation(&self) -> Conservation {
        Conservation { in_flight: self.fabric.packets.live(), ..self.counts }
    }

    pub fn summary(&self) -> Summary {
        Summary::of(self)
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    fn dispatch(&mut self, target: Target) {
        match target {
            Target::TxDone(p) => self.tx_done(p),
            Target::Arrive(p) => self.arrive(p),
            Target::Timer(e) => self.timer(e),
            Target::FlowStart(f) => self.start_flow(f),
            Target::Starts => self.start_batch(),
            Target::Failure(i) => self.fail(i),
            Target::Sample => self.sample(),
        }
    }

    // ---- flows and endpoints -------------------------------------------------------

    fn start_flow(&mut self, f: u32) {
        let spec = &self.workload.flows[f as usize];
        self.flows[f as usize].started = Some(self.now);
        let nic = self.fabric.node_ports[spec.src as usize][0];
        let rate = self.fabric.ports[nic as usize].bits_per_sec;
        let (sender, receiver) = self.factory.make(f, spec, rate, self.now);
        // receivers send ACKs and control: they go first
        self.ep_class[2 * f as usize] = self.factory.data_class(spec).min(self.scenario.switch.queues - 1);
        self.endpoints[2 * f as usize] = Some(sender);
        self.endpoints[2 * f as usize + 1] = Some(receiver);
        self.drive(2 * f);
        self.drive(2 * f + 1);
    }

    fn start_batch(&mut self) {
        while let Some(&(t, f)) = self.starts.get(self.next_start) {
            if t > self.now {
                self.events.push(t, Target::Starts);
                break;
            }
            self.next_start += 1;
            self.start_flow(f);
        }
    }

    fn timer(&mut self, ep: u32) {
        if self.timer_at[ep as usize] == self.now {
            self.timer_at[ep as usize] = Time::MAX;
        }
        let Some(e) = self.endpoints[ep as usize].as_mut() else { return };
        if e.poll_timeout().is_some_and(|t| t <= self.now) {
            e.handle_timeout(self.now);
        }
        self.drive(ep);
    }

    /// After an endpoint was fed: settle its events and timer, and offer it to its host's
    /// NIC, which pulls packets one at a time when the link is free (see `pull_nic`).
    fn drive(&mut self, ep: u32) {
        if self.endpoints[ep as usize].is_none() {
            return;
        }
        let host = self.host_of(ep);
        if !self.in_ready[ep as usize] {
            self.in_ready[ep as usize] = true;
            let class = self.ep_class[ep as usize] as usize;
            self.ready[host as usize][class].push_back(ep);
            self.ready_count[host as usize] += 1;
        }
        self.settle(ep);
        self.pull_nic(host);
    }

    /// Drain an endpoint's events and re-arm its timer.
    fn settle(&mut self, ep: u32) {
        let now = self.now;
        let Some(e) = self.endpoints[ep as usize].as_mut() else { return };
        let mut delivered = false;
        let mut sender_done = false;
        while let Some(ev) = e.poll_event() {
            match ev {
                EndpointEvent::Delivered { .. } => delivered = true,
                EndpointEvent::SenderDone => sender_done = true,
            }
        }
        let deadline = e.poll_timeout();
        let stats = e.stats();
        // A due deadline of an endpoint waiting for the NIC is served when the NIC polls it
        // (`pull_nic` runs due timeouts first); arming it again now would spin in place.
        let waiting = self.in_ready[ep as usize];
        if let Some(t) = deadline.filter(|&t| t > now || !waiting) {
            if t < self.timer_at[ep as usize] {
                self.timer_at[ep as usize] = t;
                self.events.push(t.max(now), Target::Timer(ep));
            }
        }
        let flow = ep / 2;
        if ep % 2 == 0 {
            self.flows[flow as usize].stats = stats;
        }
        if delivered {
            self.finish_flow(flow);
        }
        if sender_done {
            // keep the receiver: a late retransmission still gets its ACK
            self.endpoints[ep as usize] = None;
        }
    }

    fn host_of(&self, ep: u32) -> u32 {
        let spec = &self.workload.flows[(ep / 2) as usize];
        if ep % 2 == 0 {
            spec.src
        } else {
            spec.dst
        }
    }

    /// The host NIC as a scheduler, like a qdisc with per-flow queues and socket
    /// backpressure: when the link is free it asks ready endpoints, highest class first and
    /// round-robin within a class, for one packet. A host therefore never sends faster than
    /// its line rate however many flows pace themselves at line rate, and nothing piles up.
    fn pull_nic(&mut self, host: u32) {
        let port = self.fabric.node_ports[host as usize][0];
        let pr = &mut self.fabric.ports[port as usize];
        if !pr.up || pr.wake_pending || !pr.queue.is_empty() {
            return;
        }
        if self.now < pr.busy_until {
            pr.wake_pending = true;
            self.events.push(pr.busy_until, Target::TxDone(port));
            return;
        }
        let now = self.now;
        for class in 0..self.ready[host as usize].len() {
            while let Some(ep) = self.ready[host as usize][class].pop_front() {
                let packet = self.endpoints[ep as usize].as_mut().and_then(|e| {
                    if e.poll_timeout().is_some_and(|t| t <= now) {
                        e.handle_timeout(now);
                    }
                    e.poll_transmit(now)
                });
                match packet {
                    Some(p) => {
                        // it may have more: back of its class
                        self.ready[host as usize][class].push_back(ep);
                        self.send_from_host(p);
                        self.settle(ep);
                        return;
                    }
                    None => {
                        self.in_ready[ep as usize] = false;
                        self.ready_count[host as usize] -= 1;
                        self.settle(ep);
                    }
                }
            }
        }
    }

    fn finish_flow(&mut self, f: u32) {
        let st = &mut self.flows[f as usize];
        if st.finished.is_some() {
            return;
        }
        st.finished = Some(self.now);
        self.flows_done += 1;
        for i in 0..self.workload.flows[f as usize].feeds.len() {
            let b = self.workload.flows[f as usize].feeds[i] as usize;
            self.barrier_left[b] -= 1;
            if self.barrier_left[b] == 0 {
                for j in 0..self.workload.barriers[b].releases.len() {
                    let g = self.workload.barriers[b].releases[j];
                    let spec = &self.workload.flows[g as usize];
                    let at = spec.start.max(self.now + spec.gate_delay);
                    self.events.push(at, Target::FlowStart(g));
                }
            }
        }
    }

    // ---- packets through the fabric ------------------------------------------------

    fn send_from_host(&mut self, mut p: Packet) {
        p.sent_at = self.now;
        self.counts.sent += 1;
        let id = self.fabric.packets.alloc(p);
        self.forward(p.src, id);
    }

    /// Pick the egress port at `node` toward the packet's destination and queue it there.
    fn forward(&mut self, node: NodeId, id: PktId) {
        let (dst, flow) = {
            let p = self.fabric.packets.get(id);
            (p.dst, p.flow)
        };
        let hops = self.routes.next_hops(node, dst);
        let port = match hops.len() {
            0 => return self.drop(id, DropReason::NoRoute),
            1 => hops[0],
            n => match self.scenario.routing.mode {
                RoutingMode::Ecmp => hops[(flow_hash(flow, node, self.scenario.seed) % n as u64) as usize],
                RoutingMode::Spray => hops[self.rng.gen_range(0..n)],
            },
        };
        self.enqueue(port, id);
    }

    fn enqueue(&mut self, port: PortId, id: PktId) {
        let pr = &mut self.fabric.ports[port as usize];
        if !pr.up {
            pr.queue.count_drop(DropReason::LinkDown);
            return self.drop(id, DropReason::LinkDown);
        }
        let pool = &mut self.fabric.pools[pr.pool as usize];
        let admit = pr.queue.enqueue(id, self.fabric.packets.get(id), pool);
        while let Some(victim) = self.fabric.ports[port as usize].queue.pop_evicted() {
            self.drop(victim, DropReason::Evicted);
        }
        let pr = &mut self.fabric.ports[port as usize];
        match admit {
            Admit::Dropped(reason) => self.drop(id, reason),
            Admit::Queued { marked } => {
                if marked {
                    self.fabric.packets.get_mut(id).ecn.ce = true;
                }
                if !pr.wake_pending {
                    if self.now >= pr.busy_until {
                        self.start_tx(port);
                    } else {
                        pr.wake_pending = true;
                        self.events.push(pr.busy_until, Target::TxDone(port));
                    }
                }
            }
        }
    }

    /// Serialize the next packet. It goes onto the wire at once with its arrival time
    /// (the link is FIFO), so an idle port costs no event when serialization ends: a
    /// `TxDone` wake-up is scheduled only while packets are waiting.
    fn start_tx(&mut self, port: PortId) {
        let pr = &mut self.fabric.ports[port as usize];
        let pool = &mut self.fabric.pools[pr.pool as usize];
        let Some(id) = pr.queue.dequeue(pool) else { return };
        pr.busy_until = self.now + pr.tx_time(self.fabric.packets.get(id).wire_bytes);
        let at = pr.busy_until + pr.delay;
        pr.wire.push_back((at, id));
        if pr.wire.len() == 1 {
            self.events.push(at, Target::Arrive(port));
        }
        let host_waiting = (pr.from as usize) < self.ready_count.len() && self.ready_count[pr.from as usize] > 0;
        if !pr.queue.is_empty() || host_waiting {
            pr.wake_pending = true;
            self.events.push(pr.busy_until, Target::TxDone(port));
        }
    }

    fn tx_done(&mut self, port: PortId) {
        let pr = &mut self.fabric.ports[port as usize];
        pr.wake_pending = false;
        if !pr.up {
            return;
        }
        if !pr.queue.is_empty() {
            self.start_tx(port);
        } else if self.topo.nodes[pr.from as usize].kind == NodeKind::Host {
            let host = pr.from;
            self.pull_nic(host);
        }
    }

    fn arrive(&mut self, port: PortId) {
        let pr = &mut self.fabric.ports[port as usize];
        // a wire emptied by a failure leaves a stale event behind
        let Some(&(at, id)) = pr.wire.front() else { return };
        if at != self.now {
            return;
        }
        pr.wire.pop_front();
        if let Some(&(next, _)) = pr.wire.front() {
            self.events.push(next, Target::Arrive(port));
        }
        let to = pr.to;
        let loss = self.scenario.topology.link_loss_rate;
        if loss > 0.0 && self.rng.gen::<f64>() < loss {
            self.fabric.ports[port as usize].queue.count_drop(DropReason::RandomLoss);
            return self.drop(id, DropReason::RandomLoss);
        }
        match self.topo.nodes[to as usize].kind {
            NodeKind::Switch => self.forward(to, id),
            NodeKind::Host => self.receive(to, id),
        }
    }

    fn receive(&mut self, host: NodeId, id: PktId) {
        let p = self.fabric.packets.release(id);
        self.counts.delivered += 1;
        // direction, not packet kind, picks the endpoint: control packets flow both ways
        let Some(spec) = self.workload.flows.get(p.flow as usize) else {
            self.strays += 1;
            return;
        };
        let ep = 2 * p.flow + (host == spec.dst) as u32;
        let live = p.dst == host && self.endpoints[ep as usize].is_some();
        if !live {
            self.strays += 1;
            return;
        }
        if let Some(e) = self.endpoints[ep as usize].as_mut() {
            e.handle_packet(self.now, &p);
        }
        self.drive(ep);
    }

    fn drop(&mut self, id: PktId, reason: DropReason) {
        self.fabric.packets.release(id);
        self.counts.dropped += 1;
        self.drops_by_reason[reason as usize] += 1;
    }

    // ---- failures and sampling -----------------------------------------------------

    fn fail(&mut self, i: u32) {
        let ports = self.failures[i as usize].clone();
        for port in ports {
            let pr = &mut self.fabric.ports[port as usize];
            if !pr.up {
                continue;
            }
            pr.up = false;
            let pool = &mut self.fabric.pools[pr.pool as usize];
            let mut lost = pr.queue.drain(pool);
            lost.extend(pr.wire.drain(..).map(|(_, id)| id));
            for id in lost {
                self.fabric.ports[port as usize].queue.count_drop(DropReason::LinkDown);
                self.drop(id, DropReason::LinkDown);
            }
        }
        self.routes = Routes::compute(&self.topo, &self.fabric.node_ports, &self.fabric.hops());
    }

    fn sample(&mut self) {
        let t = self.now / NS;
        for &port in &self.sampled_ports {
            let q = &self.fabric.ports[port as usize].queue;
            self.queue_samples.push(QueueSample { time_ns: t, port, bytes: q.bytes(), packets: q.packets() as u32 });
        }
        let next = self.now + self.scenario.output.queue_sample_ns * NS;
        self.events.push(next, Target::Sample);
    }
}

/// Deterministic per-(flow, switch) ECMP choice: splitmix64 of the pair and the seed.
fn flow_hash(flow: u32, node: NodeId, seed: u64) -> u64 {
    let mut z = ((flow as u64) << 32 | node as u64) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn resolve_failure(
    topo: &Topology,
    fabric: &Fabric,
    i: usize,
    link: Option<&str>,
    node: Option<&str>,
) -> Result<Vec<PortId>, ScenarioError> {
    let node_id = |key: &str, name: &str| {
        topo.node_by_name(name)
            .ok_or_else(|| ScenarioError::new(format!("failures.{i}.{key}"), format!("no node named `{name}`")))
    };
    let ports: Vec<PortId> = if let Some(l) = link {
        let (a, b) = l.split_once('-').ok_or_else(|| {
            ScenarioError::new(format!("failures.{i}.link"), format!("`{l}` is not of the form `leaf0-spine1`"))
        })?;
        let (a, b) = (node_id("link", a)?, node_id("link", b)?);
        let found: Vec<PortId> = (0..fabric.ports.len() as PortId)
            .filter(|&p| {
                let pr = &fabric.ports[p as usize];
                (pr.from, pr.to) == (a, b) || (pr.from, pr.to) == (b, a)
            })
            .collect();
        if found.is_empty() {
            return Err(ScenarioError::new(format!("failures.{i}.link"), format!("no link between `{l}`'s ends")));
        }
        found
    } else {
        let n = node_id("node", node.unwrap_or_default())?;
        (0..fabric.ports.len() as PortId)
            .filter(|&p| fabric.ports[p as usize].from == n || fabric.ports[p as usize].to == n)
            .collect()
    };
    Ok(ports)
}
