//! The simulated world: fabric + routes + endpoints + workload, advanced by the event queue.
//!
//! `endpoints.rs` drives transports and the host NIC scheduler; `packets.rs` moves packets
//! through ports and links; this file holds the state, the event loop, failures and sampling.

mod endpoints;
mod eps;
mod fifo_nic;
mod flow_queue_nic;
mod lazy;
mod packets;
pub mod parallel;
mod pause;
mod pcn;
mod ready;

use crate::engine::{EventQueue, Target};
use crate::fabric::{Fabric, Hdr, PktId};
use crate::routing::{Pick, PortId, Routes};
use crate::scenario::{RoutingMode, Scenario, ScenarioError};
use crate::topology::{NodeId, NodeKind, Topology};
use crate::transports::EndpointFactory;
use crate::workload::{self, Workload};
use eps::Pairs;
use gradwire_core::switch::{Admit, DropReason};
use gradwire_core::time::{from_us, Time, MS, NS};
use gradwire_core::transport::{EndpointEvent, EndpointStats, Hosts};
use gradwire_core::Packet;
use lazy::Chunked;
use pause::NodePauses;
pub use pcn::PcnStats;
use pcn::PcnWorld;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use ready::ReadyLists;
use std::sync::Arc;
use std::time::Instant;

/// Run-time state of one flow: 32 bytes, kept for every flow from its start to the end of
/// the run (a flow that has not started has none: see [`Simulation::flow_state`]).
#[derive(Clone, Copy, Debug)]
pub struct FlowState {
    /// `NOT_YET` until it starts / finishes.
    started: Time,
    finished: Time,
    /// The sender's counters as of when it closed (see [`stats`](Self::stats)), in 32
    /// bits: 8 bytes a flow less, at 4 M flows 33 MB, and no flow sends 2^32 packets.
    packets_sent: u32,
    retransmits: u32,
    timeouts: u32,
}

const _: () = assert!(std::mem::size_of::<FlowState>() == 32);

const NOT_YET: Time = Time::MAX;

impl Default for FlowState {
    fn default() -> Self {
        FlowState { started: NOT_YET, finished: NOT_YET, packets_sent: 0, retransmits: 0, timeouts: 0 }
    }
}

impl FlowState {
    /// The sender's counters as of when it closed; while it is live, see
    /// [`Simulation::flow_stats`].
    pub fn stats(&self) -> EndpointStats {
        EndpointStats {
            packets_sent: self.packets_sent.into(),
            retransmits: self.retransmits.into(),
            timeouts: self.timeouts.into(),
        }
    }

    fn set_stats(&mut self, s: EndpointStats) {
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        (self.packets_sent, self.retransmits, self.timeouts) =
            (narrow(s.packets_sent), narrow(s.retransmits), narrow(s.timeouts));
    }

    pub fn started(&self) -> Option<Time> {
        (self.started != NOT_YET).then_some(self.started)
    }

    pub fn finished(&self) -> Option<Time> {
        (self.finished != NOT_YET).then_some(self.finished)
    }

    fn set_started(&mut self, t: Option<Time>) {
        self.started = t.unwrap_or(NOT_YET);
    }

    fn set_finished(&mut self, t: Option<Time>) {
        self.finished = t.unwrap_or(NOT_YET);
    }
}

/// How far a run has got; cheap to call between `step`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Progress {
    pub now_ns: u64,
    pub stop_ns: u64,
    pub flows_done: u64,
    pub flows_total: u64,
    pub events: u64,
    pub finished: bool,
}

/// A port's queue at one sampling instant (`[output] queue_ports`).
#[derive(Clone, Copy, Debug)]
pub struct QueueSample {
    pub time_ns: u64,
    pub port: PortId,
    pub bytes: u64,
    pub packets: u32,
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
    pub(crate) workload: Arc<Workload>,
    barrier_left: Vec<u32>,
    /// Started flows' times and closing counters (chunks allocated as flows start).
    flows: Chunked<FlowState>,
    /// Flow f's sender and receiver, with the driver's state for each, from the flow's
    /// start until it is done with.
    eps: Pairs,
    events: EventQueue,
    rng: Xoshiro256PlusPlus,
    factory: EndpointFactory,
    /// What each host's transfers share (persistent connections, carried path models and
    /// thresholds, DLCP's pair rates and counts, receiving hosts' loads): the core's
    /// `HostState`, handed to the endpoints explicitly (`settle`).
    hosts: Hosts,
    pub(crate) now: Time,
    stop: Time,
    pub(crate) events_processed: u64,
    pub(crate) flows_done: u64,
    pub(crate) counts: Conservation,
    /// Packets that reached a host with no live endpoint for them (late, or misrouted).
    pub(crate) strays: u64,
    /// Endpoint deadlines (other than pacing) served after they were due; always 0 unless
    /// the driver loses a timer (see `settle`).
    late_timeouts: u64,
    pub(crate) drops_by_reason: [u64; DropReason::ALL.len()],
    sampled_ports: Vec<PortId>,
    pub(crate) queue_samples: Vec<QueueSample>,
    counter_ports: Vec<PortId>,
    /// (time ns, port, bytes dequeued so far) of each `counter_ports` port per sample.
    pub(crate) byte_samples: Vec<(u64, PortId, u64)>,
    failures: Vec<Vec<PortId>>,
    /// `[pauses]`, when on.
    pauses: Option<NodePauses>,
    /// `[pcn]`, when on.
    pcn: Option<PcnWorld>,
    /// Ungated flows by (start time, id): 4 bytes each, the time is the spec's;
    /// `next_start` is the first not yet started.
    starts: Vec<u32>,
    next_start: usize,
    /// Per host, per class: endpoints that may have a packet for the NIC.
    ready: ReadyLists,
    /// Flows whose senders an endpoint asked to wake (`EndpointEvent::Wake`), between
    /// draining its events and waking them.
    woken: Vec<u32>,
    /// `host.nic = "fifo"`: endpoints hand their packets to the NIC queue (`fifo_nic.rs`)
    /// instead of waiting in `ready`.
    fifo_nic: bool,
    /// `host.nic = "flow_queues"`: endpoints hand their packets to per-flow queues at
    /// their NIC (`flow_queue_nic.rs`).
    flow_queues: Option<Box<flow_queue_nic::FlowQueues>>,
    pub(crate) wall: std::time::Duration,
    finished: bool,
    /// `threads > 1`: this part of the split (`parallel.rs`); `None` in a single run.
    part: Option<Box<parallel::Part>>,
    /// A parallel run's other parts between `step`s.
    crew: Option<Box<parallel::Crew>>,
    /// Packets handed to / taken from other parts, and (once gathered) the other parts'
    /// packets still in their networks.
    exported: u64,
    imported: u64,
    live_elsewhere: u64,
    /// `fidelity = "fast"`: the servers simulated.
    sample: Option<crate::fast::Sample>,
}

impl Simulation {
    pub fn new(scenario: &Scenario) -> Result<Simulation, ScenarioError> {
        Self::build(scenario, None)
    }

    /// A simulation of `scenario`, on `workload` if given (the parts of a parallel run
    /// share one), else on the workload the scenario draws from its seed.
    fn build(scenario: &Scenario, workload: Option<Arc<Workload>>) -> Result<Simulation, ScenarioError> {
        scenario.validate()?;
        if scenario.fast.cover {
            return Err(ScenarioError::new(
                "fast.cover",
                "runs several simulations: build it as a `gradwire_sim::Runner`",
            ));
        }
        let s = scenario.clone();
        let topo = Topology::build(&s.topology);
        let sample = crate::fast::Sample::plan(&s, &topo)?;
        let mut fabric = Fabric::build_sampled(&s, &topo, sample.as_ref());
        let routes = Routes::compute(&topo, &fabric.node_ports, &fabric.hops());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(s.seed);
        let workload = match workload {
            Some(w) => w,
            None => Arc::new(match &sample {
                Some(sample) => workload::build_for(&s, &topo, &mut rng, &|h, spread, i| sample.keeps(h, spread, i))?,
                None => workload::build(&s, &topo, &mut rng)?,
            }),
        };
        if let (Some(weights), Some(x)) = (&mut fabric.weights, &sample) {
            weights.weigh_flows(
                &workload.flows,
                |f| x.stands_for_more(f, s.fast.weigh_whole_tensors),
                |f| x.thinned(f),
            );
        }

        let port_list = |key: &str, names: &[String]| {
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    fabric.port_by_name(name).map(|p| p as PortId).ok_or_else(|| {
                        ScenarioError::new(
                            format!("output.{key}.{i}"),
                            format!("no port named `{name}` (ports are named like `leaf0->host3` or `host0->leaf0`)"),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let sampled_ports = port_list("queue_ports", &s.output.queue_ports)?;
        let counter_ports = port_list("counter_ports", &s.output.counter_ports)?;
        let failures = s
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| resolve_failure(&topo, &fabric, i, f.link.as_deref(), f.node.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;

        if s.threads > 1 && s.ideal.is_off() {
            parallel::check(&s, &topo, &workload)?;
        }
        let mut factory = EndpointFactory::new(&s)?;
        factory.see_workload(workload.flows.iter().map(|f| f.bytes), s.switch.queues)?;
        let nflows = workload.flows.len();
        let mut sim = Simulation {
            stop: (s.stop_ms * MS as f64).round() as Time,
            barrier_left: workload.barriers.iter().map(|b| b.waiting_for).collect(),
            flows: Chunked::new(nflows),
            eps: Pairs::new(nflows),
            events: EventQueue::new(),
            rng,
            factory,
            hosts: Hosts::new(),
            now: 0,
            events_processed: 0,
            flows_done: 0,
            counts: Conservation::default(),
            strays: 0,
            late_timeouts: 0,
            drops_by_reason: [0; DropReason::ALL.len()],
            sampled_ports,
            queue_samples: Vec::new(),
            counter_ports,
            byte_samples: Vec::new(),
            failures,
            pauses: NodePauses::new(&s.pauses, s.seed, topo.hosts),
            pcn: PcnWorld::new(&s, &workload, fabric.ports.len()),
            starts: Vec::new(),
            next_start: 0,
            ready: ReadyLists::new(topo.hosts as usize, s.switch.queues as usize),
            woken: Vec::new(),
            fifo_nic: s.host.nic == crate::scenario::NicDiscipline::Fifo,
            flow_queues: (s.host.nic == crate::scenario::NicDiscipline::FlowQueues).then(Default::default),
            wall: Default::default(),
            finished: false,
            part: None,
            crew: None,
            exported: 0,
            imported: 0,
            live_elsewhere: 0,
            sample,
            scenario: s,
            topo,
            fabric,
            routes,
            workload,
        };
        // Ungated flows wait in a time-sorted list rather than in the event heap, which
        // stays small: a DNN iteration schedules ~10^5 starts up front.
        let specs = &sim.workload.flows;
        sim.starts = (0..nflows as u32)
            .filter(|&f| specs[f as usize].gate.is_none_or(|b| sim.barrier_left[b as usize] == 0))
            .collect();
        sim.starts.sort_unstable_by_key(|&f| (specs[f as usize].start, f));
        if let Some(&f) = sim.starts.first() {
            sim.events.push(specs[f as usize].start, Target::Starts);
        }
        for (i, f) in sim.scenario.failures.iter().enumerate() {
            sim.events.push(from_us(f.at_us), Target::Failure(i as u32));
        }
        if !sim.sampled_ports.is_empty() || !sim.counter_ports.is_empty() {
            sim.events.push(0, Target::Sample);
        }
        if sim.pauses.is_some() {
            sim.events.push(NodePauses::first_draw(&sim.scenario.pauses), Target::Pause(pause::PAUSE_DRAW));
        }
        Ok(sim)
    }

    /// Process up to `max_events` events; returns `true` once the run is over (every flow
    /// finished, nothing left to do, or the stop time reached).
    pub fn step(&mut self, max_events: u64) -> bool {
        if self.finished {
            return true;
        }
        if !self.scenario.ideal.is_off() {
            return self.run_fluid();
        }
        if self.scenario.threads > 1 {
            return self.step_parallel(max_events);
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
            self.process(t, target);
        }
        self.wall += t0.elapsed();
        self.finished
    }

    /// An `ideal` run: the flows' times come from the fluid model, no packet moves.
    /// Cold and out of line: the packet loop in `step` must not change shape for it.
    #[cold]
    #[inline(never)]
    fn run_fluid(&mut self) -> bool {
        let t0 = Instant::now();
        let r = crate::ideal::solve(&self.scenario, &self.topo, &self.workload, self.scenario.ideal);
        for (i, (s, f)) in r.started.into_iter().zip(r.finished).enumerate() {
            let st = self.flows.get_or_alloc(i as u32, FlowState::default);
            st.set_started(s);
            st.set_finished(f.filter(|_| s.is_some()));
        }
        self.flows_done = self.flow_states().filter(|f| f.finished().is_some()).count() as u64;
        self.now = self.flow_states().filter_map(|f| f.finished()).max().unwrap_or(0);
        self.events_processed = r.events;
        self.wall += t0.elapsed();
        self.finished = true;
        true
    }

    /// Flow f's times and counters so far (all unset before it starts).
    #[inline]
    pub fn flow_state(&self, f: u32) -> FlowState {
        self.flows.get(f).copied().unwrap_or_default()
    }

    /// Every flow's [`flow_state`](Self::flow_state), in flow order.
    pub fn flow_states(&self) -> impl ExactSizeIterator<Item = FlowState> + '_ {
        (0..self.flows.len() as u32).map(|f| self.flow_state(f))
    }

    /// With `fidelity = "fast"`: the servers this run simulates.
    pub fn fast_sample(&self) -> Option<&crate::fast::Sample> {
        self.sample.as_ref()
    }

    /// Flows of the workload.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// The last finish of any flow, once every flow has finished.
    pub fn last_finish(&self) -> Option<Time> {
        self.flow_states().map(|f| f.finished()).try_fold(0, |last, at| at.map(|t| last.max(t)))
    }

    /// Is flow `f` one of the run's results? Not in a fast run, a flow it keeps only for the
    /// load it puts on the workers' links (another server's whole tensor, with
    /// `fast.keep_whole_tensors`).
    pub fn reported(&self, f: u32) -> bool {
        let Some(x) = &self.sample else { return true };
        let spec = &self.workload.flows[f as usize];
        x.reports(if spec.pull { spec.src } else { spec.dst })
    }

    /// How many of the job's flows flow `f` stands for, in [`Self::job_weight_unit`]s (a
    /// whole number where `m` is a fraction): the `m` shards of its tensor to the servers
    /// of its group in a fast run (every server gets a shard of every tensor split over
    /// them all) or the `thin_by` of its server's workers (a thinned whole tensor's,
    /// `fast.thin_whole_tensors`), else itself (a whole tensor's flow, or any at packet level).
    pub fn job_weight(&self, f: u32) -> u64 {
        match &self.sample {
            Some(x) if x.thinned(&self.workload.flows[f as usize]) => x.thinned_weight(),
            Some(x) if x.stands_for_more(&self.workload.flows[f as usize], false) => x.of as u64,
            Some(x) => x.servers.len() as u64,
            None => 1,
        }
    }

    /// One flow in [`Self::job_weight`]'s units: the sampled servers (a spread shard weighs
    /// `S` of them, `m` flows).
    pub fn job_weight_unit(&self) -> u64 {
        self.sample.as_ref().map_or(1, |x| x.servers.len() as u64)
    }

    /// Flows whose endpoint pair exists now (started, and not yet done with).
    pub fn open_endpoint_pairs(&self) -> u64 {
        self.eps.open_pairs()
    }

    /// The most endpoint pairs open at once so far (what their slab holds).
    pub fn endpoint_pairs_peak(&self) -> u32 {
        self.eps.slab_len()
    }

    /// Run to the end.
    pub fn run(&mut self) {
        while !self.step(1 << 20) {}
    }

    pub fn progress(&self) -> Progress {
        // midway through a parallel run, part 0 knows every part's counts as of its last window
        let (flows_done, events) = match &self.part {
            Some(p) => p.progress(),
            None => (self.flows_done, self.events_processed),
        };
        Progress {
            now_ns: self.now / NS,
            stop_ns: self.stop / NS,
            flows_done,
            flows_total: self.flows.len() as u64,
            events,
            finished: self.finished,
        }
    }

    /// Endpoint deadlines served late (0 in a correct driver: every control timeout and
    /// rate period fires at its time).
    pub fn late_timeouts(&self) -> u64 {
        self.late_timeouts
    }

    pub fn conservation(&self) -> Conservation {
        // packets between parts (none once a parallel run is over) are in flight too
        let crossing = self.exported - self.imported;
        Conservation { in_flight: self.fabric.packets.live() + self.live_elsewhere + crossing, ..self.counts }
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Counters of the egress port named `from->to` (e.g. `host0->leaf0`).
    pub fn port_counters(&self, name: &str) -> Option<&gradwire_core::switch::PortCounters> {
        self.fabric.port_by_name(name).map(|p| self.fabric.ports[p as usize].queue.counters())
    }

    /// Run one event at `t`, loading what the next one touches meanwhile.
    #[inline]
    fn process(&mut self, t: Time, target: Target) {
        self.now = t;
        self.events_processed += 1;
        match self.events.peek_target() {
            Some(Target::Timer(next)) => eps::prefetch_endpoint(&self.eps, next),
            Some(Target::Arrive(p) | Target::TxDone(p)) => self.fabric.prefetch_port(p),
            _ => {}
        }
        self.dispatch(target);
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
            Target::Pause(i) => self.pause_event(i),
        }
    }

    fn fail(&mut self, i: u32) {
        if let Some(pause) = self.scenario.failures[i as usize].pause_us {
            return self.pause_ports(i, from_us(pause));
        }
        let ports = self.failures[i as usize].clone();
        for port in ports {
            let pr = &mut self.fabric.ports[port as usize];
            if !pr.up {
                continue;
            }
            pr.up = false;
            let pool = &mut self.fabric.pools[pr.pool as usize];
            let mut lost = pr.queue.drain(pool);
            lost.extend(pr.wire.drain(..).map(|(_, h)| h));
            for h in lost {
                self.fabric.ports[port as usize].queue.count_drop(DropReason::LinkDown);
                self.drop(h.id, h.flow, DropReason::LinkDown);
            }
        }
        self.routes = Routes::compute(&self.topo, &self.fabric.node_ports, &self.fabric.hops());
    }

    fn sample(&mut self) {
        let t = self.now / NS;
        // a part of a parallel run samples the ports it serializes on
        let here = |p: PortId| self.part.as_ref().is_none_or(|part| part.owns(self.fabric.ports[p as usize].from));
        for &port in self.sampled_ports.iter().filter(|&&p| here(p)) {
            let q = &self.fabric.ports[port as usize].queue;
            self.queue_samples.push(QueueSample { time_ns: t, port, bytes: q.bytes(), packets: q.packets() as u32 });
        }
        for &port in self.counter_ports.iter().filter(|&&p| here(p)) {
            self.byte_samples.push((t, port, self.fabric.ports[port as usize].queue.counters().dequeued_bytes));
        }
        let next = self.now + self.scenario.output.queue_sample_ns * NS;
        self.events.push(next, Target::Sample);
    }
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
