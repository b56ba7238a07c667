//! `fidelity = "fast"`: a parameter-server job simulated through a sample of its servers.
//!
//! In a PS job every worker sends to every server (a tensor split over all of them, or a
//! whole one to one server drawn at random), so the servers are alike and each sees the
//! whole fan-in of workers. The fast mode keeps `n = fast.servers` of the `S` servers and
//! only the flows to and from them: the work falls by about `S / n`. On the worker's half
//! of such a flow's path a packet of a tensor split over every server stands for
//! `m = S / n` packets (the worker's shards to the servers left out would have shared
//! those links); on the server's half it is itself (every flow of that server is
//! simulated). Every port stays packet level with its priority queues, ECN and drops.
//!
//! How the packets sampled away take a link (`fast.phantom`): as a fluid whose rate is
//! `m - 1` times that of the packets standing for them at the port, averaged over a short
//! time (`fluid`, the default: a packet at an idle port leaves at the link's rate, one at
//! a port the sample keeps busy takes up to `m` times as long), or right behind each
//! packet (`stretch`: it holds the port and the buffer `m` times as long and as much).
//!
//! Whether a packet stands for more follows its direction in its flow: one heading to the
//! flow's worker (a pull's data, a push's ACK) does on the way down, one leaving it on the
//! way up. In a colocated job a host is a worker and may be a server: a sampled server's
//! host link carries its own server traffic as itself, and the host links of the servers
//! it stands for carry the same traffic as a fluid phantom (its twins).
//!
//! A tensor below `workload.split_bytes` goes whole to one server, so its flows stand for
//! no others, and those to the servers sampled away are simply missing from the workers'
//! links. With `fast.keep_whole_tensors` (the default for [`KEEP_WHOLE_TENSORS`]) they are
//! simulated too, as they are at packet level, and left out of the results
//! ([`crate::Simulation::reported`]). The job's slowest servers are those whose whole
//! tensors' incast takes RTO after RTO, so such a run's last finish estimates the job's
//! iteration (`fast.job_iteration_ns`). With `fast.thin_whole_tensors` those of the
//! servers sampled away run as a scale model at about 0.6 of its cost: one in `thin_by`
//! (`m`, at most [`THIN_VALIDATED`]'s) of their workers' flows, each standing for that
//! many as a spread shard does, into host links of `1/thin_by` the rate, buffer and ECN
//! threshold, which keeps each flow's share of the link and of the buffer, and so the
//! incast's RTO chains (1 024 hosts: the job's iteration within 2.5 and 4.5 % in two
//! seeds; with 16 of 256 servers, thinned by 10, +0.3 / -2.4 / -5.3 % in three seeds at
//! 0.6x the CPU of a sample of 32 alone).
//!
//! What it cannot see without them: a job's iteration is its slowest server's, and a
//! sample's slowest server is faster (where `m` is whole, the `m` samples at `fast.offset`
//! 0 to `m - 1` together cover every server: `fast.cover`, [`crate::cover`]); the racks of the servers left out carry none
//! of their traffic on the core. Measured against packet level by `benchmarks/sim_fast` (docs/notes/fast-mode.md):
//! transports, routing, topologies, colocated servers and chained iterations not found
//! within 5 % ([`VALIDATED`]) are refused by default.

use crate::scenario::{
    BufferMode, DnnPattern, PhantomModel, RoutingMode, Scenario, ScenarioError, TopologyKind, WorkloadKind,
};
use crate::topology::{NodeId, Topology};
use crate::workload::{ps_placement, FlowSpec};
use gradwire_core::time::Time;

/// Transports whose mean and p99 FCT and iteration `benchmarks/sim_fast` found within 5 %
/// of packet level's on the sampled servers (DCTCP at 1 024 hosts; at 128 hosts its p99 is
/// 2x off, in the gap between flows with and without an RTO, where packet level's own seeds
/// differ by 111 %), on fat-trees under ECMP (docs/notes/fast-mode.md);
/// those in [`KEEP_WHOLE_TENSORS`] only with `fast.keep_whole_tensors`. Leaf-spines and
/// spraying: [`FABRICS_VALIDATED`].
pub const VALIDATED: &[&str] = &["dctcp", "dlcp", "ltp", "newreno"];

/// How many packets a packet may stand for (`m`, the job's servers over the sampled ones)
/// as far as `benchmarks/sim_fast` found each transport within 5 % of packet level (mean
/// and p99 FCT and iteration, on the sampled servers; several samples of one packet-level
/// run pooled). DCTCP: within 2.9 % at m = 8 and 16 (1 024 hosts, 32 and 16 of 256
/// servers), at m = 10 (2 000 hosts, 50 of 500) and at m = 9.85 (1 024 hosts, 26 of 256:
/// +2.4 % mean, -0.1 % p99, -0.3 % iteration); at 2 000 hosts the p99 falls 6.1 %
/// short at m = 16 (32 of 512) and m = 20 (25 of 500), where fewer flows take a second RTO
/// in a row than at packet level; +8.4 % mean FCT at m = 32 and +15.7 % at 64. DLCP:
/// within 4.2 % at m = 4, +9.5 % mean FCT at m = 8 and +20 % at m = 9: the spread shards of
/// the servers sampled away are a fluid without priorities, and DLCP's layers wait by
/// priority. NewReno with CUBIC: within 3.8 % in mean and p99 FCT and iteration at m = 8
/// (4 of 32, seeds 1-3 and 4-9; p50 +7.6 and -3.8 %, where packet level's own seeds differ
/// by 35 and 27 %), the most measured. LTP:
/// within 4.6 % at m = 4 (64 of 256, seeds 1-2 pooled; iteration -9.1 and +0.5 % per seed,
/// each its slowest server's slowest push flow, one RTO chain of 768: at packet level seed
/// 1's ended 33 ms behind the runner-up); -5.8 % iteration at m = 8 (one seed).
/// Per layer, not a criterion here: DCTCP's pushes' mean FCT at m = 8 (1 024 hosts) is
/// -12 to +15 % off per layer, where packet level's seeds differ by 2 %; the layers that
/// take few RTOs take fewer and those that take many more, and the two cancel job-wide
/// (`benchmarks/sim_fast/large.py --by-layer`).
pub const VALIDATED_UP_TO_M: &[(&str, u32)] = &[("dctcp", 10), ("dlcp", 4), ("ltp", 4), ("newreno", 8)];

/// Transports validated on a leaf-spine at 1:1 and with per-packet spraying, up to
/// [`FABRICS_VALIDATED_UP_TO_M`]. DCTCP, seeds 1-3, mean / p50 / p99 / iteration / RTOs on
/// the sampled servers: a 128-host leaf-spine (8 x 16, 16 uplinks) -3.2 / +0.9 / 0.0 /
/// +0.6 / +2.3 %; sprayed 128-host fat-tree -1.8 / -4.2 / -0.9 / -3.2 / 0.0 %; 432 hosts
/// (one seed, 27 of 108) +0.4 / +0.5 / -0.0 / -3.3 / -7.5 %. Both were +7 to +11 % mean FCT
/// while RACK's minimum RTT came from a flow's own samples (docs/notes/fast-mode.md).
/// A leaf-spine at 4:1 is not: its core drops, and a fluid phantom holds no buffer there.
pub const FABRICS_VALIDATED: &[&str] = &["dctcp"];

/// The most a packet stands for on those fabrics (measured at m = 4 only).
pub const FABRICS_VALIDATED_UP_TO_M: u32 = 4;

/// A leaf-spine's racks' host bandwidth over their uplinks' (1 for 1:1).
fn oversubscription(s: &Scenario) -> f64 {
    let t = &s.topology;
    (t.hosts_per_leaf as f64 * t.host_link_gbps) / (t.uplinks_per_leaf as f64 * t.uplink_gbps)
}

/// Transports that keep every server's whole tensors by default (`fast.keep_whole_tensors`
/// absent), and are validated only so. DLCP: its line-rate senders' whole tensors to the
/// servers sampled away hold the workers' links at their layers' priorities, which the
/// sample's own layers wait behind (128 hosts, mean FCT -32 % without them, +1.6 % with).
pub const KEEP_WHOLE_TENSORS: &[&str] = &["dlcp"];

/// Transports whose job iteration `benchmarks/sim_fast` found within 5 % of packet level's
/// with `fast.thin_whole_tensors`, and the most workers a thinned flow may stand for
/// (`fast.thin_by`; by default `m`, up to this). The job's iteration is the deepest RTO
/// chain any whole tensor's flow draws, and a scale model draws it from one in `thin_by`
/// flows. DCTCP: within 4.5 % at 8 (1 024 hosts, seeds 1-3; 128 hosts, seeds 1-3) and 10
/// (2 000 hosts +0.2 %; 1 024 hosts with 16 servers sampled, +0.3 / -2.4 / -5.3 %, where 8
/// gave -6.3 % on the third); at 16, 46 % short (1 024 hosts, seed 2, where 10 was -2.4 %).
/// At 432 hosts with 7 of 108 servers sampled, seed 2's job ends 45 % later than any
/// thinned run of it (by 8, 10 or 15.4) and seed 1's within 0.5 %: there the deepest chain
/// is rarer than one in 8 flows draws (docs/notes/fast-mode.md).
pub const THIN_VALIDATED: &[(&str, u32)] = &[("dctcp", 10)];

/// `newreno`'s window growth that was: CUBIC, as the default baseline (`modern`) sets it.
/// Reno's growth (`tcp_cc = "reno"`, as `sackless` and `newreno_ecn` have it) came out
/// +5.0 % in mean FCT and +16 % in p99 at 128 hosts.
pub const VALIDATED_NEWRENO_CC: &str = "cubic";

/// The servers a fast run simulates, and the workers whose links its packets share with
/// the flows sampled away.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Hosts of the sampled servers.
    pub servers: Vec<u32>,
    /// The job's servers.
    pub of: u32,
    /// Per node: a worker of a thinned job (none when every server is sampled).
    worker: Vec<bool>,
    /// Per node: a sampled server.
    kept: Vec<bool>,
    /// `fast.keep_whole_tensors`: the flows of every tensor sent whole are simulated.
    keep_whole: bool,
    /// Per node: a server sampled away whose whole tensors run as a scale model, one in
    /// `m` of their workers on host links of `1/m` the rate (`fast.thin_whole_tensors`).
    thinned: Vec<bool>,
    /// Racks of the fabric: the job's workers are placed round-robin over them.
    racks: usize,
    /// `servers / S`.
    pub rate: f64,
    /// A thinned server's workers per simulated one (`fast.thin_by`; `m` by default).
    pub thin_by: f64,
    /// Servers per sampled server, `S / servers` (a whole number when they divide `S`).
    pub m: f64,
    /// Disjoint samples of this size (`fast.offset` 0 to `samples - 1`): `m` rounded down.
    pub samples: u32,
    pub scale_ecn: bool,
    weigh_core: bool,
    phantom: PhantomModel,
    tau_ps: f64,
    charge: bool,
    /// A colocated job: each sampled server's host and the hosts of the servers it stands
    /// for, whose host links carry its server traffic as a phantom.
    twins: Vec<(u32, Vec<u32>)>,
}

/// How long a fast run's packet holds a port: a packet between a worker and a sampled
/// server stands for `S / servers` packets on the worker's half of its path (there the
/// worker's flows to the other servers would share the links), and for itself on the
/// server's half (every flow of that server is simulated). Only the host links of a
/// worker with `fast.weigh_core = false`.
#[derive(Debug, Clone)]
pub struct Weights {
    hop: Vec<Hop>,
    /// Per flow, a bit: it stands for more (see [`Weights::weigh_flows`]).
    flows: Vec<u64>,
    /// Per flow, a bit: a thinned whole tensor's, which stands for `thin_by`, where that
    /// is not `m` (empty where it is).
    thin: Vec<u64>,
    /// Per flow, its worker's host (a packet heading there is on its way to the worker,
    /// data of a pull or an ACK of a push).
    worker_of: Vec<u32>,
    /// Per port of a sampled server's host link (colocated jobs): the same port of the
    /// servers it stands for, which carry its server traffic as a phantom.
    twins: Vec<Vec<u32>>,
    /// Servers per sampled server.
    m: f64,
    /// What a thinned flow's packet adds to the phantom against a spread shard's:
    /// `(thin_by - 1) / (m - 1)`, 1 where `thin_by = m`.
    thin_share: f64,
    /// `fast.phantom = "fluid"`: per port, the load of the packets sampled away.
    fluid: Option<Vec<PhantomLoad>>,
    /// Its averaging time, ps.
    tau: f64,
    /// A packet that stands for `m` takes `m` times its bytes of the buffer (`stretch`, or
    /// `fast.charge_buffer`).
    charge: bool,
}

/// A port's phantom load: the packets of the flows sampled away, as a fluid whose rate is
/// `m - 1` times that of the packets that stand for them at the port, averaged over `tau`
/// (an exponentially decayed byte count: a steady rate `r` holds `r * tau` bytes).
#[derive(Debug, Clone, Copy, Default)]
struct PhantomLoad {
    bytes: f64,
    at: Time,
}

/// Where a port lies on the paths it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    /// Every packet weighs itself.
    Own,
    /// On the worker's half of the path of a packet to a worker (a down link).
    TowardWorkers,
    /// On the worker's half of the path of a packet from a worker (an up link).
    TowardServers,
    /// A sampled server's host link in a colocated job: its server traffic stands for
    /// itself here and for its twins' at theirs; its worker traffic as `TowardWorkers` /
    /// `TowardServers`.
    Twinned { down: bool },
}

impl Weights {
    /// Which flows stand for more ([`Sample::stands_for_more`]), and which of them are
    /// thinned whole tensors' ([`Sample::thinned`]).
    pub fn weigh_flows(
        &mut self,
        flows: &[FlowSpec],
        stands_for_more: impl Fn(&FlowSpec) -> bool,
        thinned: impl Fn(&FlowSpec) -> bool,
    ) {
        self.flows = vec![0; flows.len().div_ceil(64)];
        self.thin = vec![0; if self.thin_share == 1.0 { 0 } else { flows.len().div_ceil(64) }];
        self.worker_of = flows.iter().map(|f| if f.pull { f.dst } else { f.src }).collect();
        for (f, spec) in flows.iter().enumerate() {
            if stands_for_more(spec) {
                self.flows[f / 64] |= 1 << (f % 64);
            }
            if !self.thin.is_empty() && thinned(spec) {
                self.thin[f / 64] |= 1 << (f % 64);
            }
        }
    }

    #[inline]
    fn bit(bits: &[u64], flow: u32) -> bool {
        bits.get(flow as usize / 64).is_some_and(|w| w >> (flow % 64) & 1 == 1)
    }

    /// Is a packet of `flow` to `dst` heading to the flow's worker?
    #[inline]
    fn to_worker(&self, dst: u32, flow: u32) -> bool {
        self.worker_of.get(flow as usize) == Some(&dst)
    }

    /// Does a packet of `flow` to `dst` at port `p` stand for the flows sampled away? On
    /// the worker's half of its path: down toward its worker, or up from it.
    #[inline]
    fn stands_for_more(&self, p: u32, dst: u32, flow: u32) -> bool {
        Self::bit(&self.flows, flow)
            && match self.hop[p as usize] {
                Hop::Own => false,
                Hop::TowardWorkers | Hop::Twinned { down: true } => self.to_worker(dst, flow),
                Hop::TowardServers | Hop::Twinned { down: false } => !self.to_worker(dst, flow),
            }
    }

    /// Is a packet of `flow` to `dst` at port `p` a sampled server's own traffic, which
    /// its twins' ports carry too (into it as the flow's server, or out of it)?
    #[inline]
    fn mirrored(&self, p: u32, dst: u32, flow: u32) -> bool {
        match self.hop[p as usize] {
            Hop::Twinned { down } => down != self.to_worker(dst, flow),
            _ => false,
        }
    }

    /// Do the packets sampled away take a link as a fluid (not by stretching the sample's)?
    #[inline]
    pub fn is_fluid(&self) -> bool {
        self.fluid.is_some()
    }

    /// How long a packet of `flow` to `dst`, `tx` long by itself, holds port `p` (of
    /// `bits_per_sec`) when it starts at `now`: with a fluid phantom, as long as a link
    /// whose rate the phantom load shares (a packet at an idle port leaves at the link's
    /// rate; at a port the sample keeps saturated it takes `m` times as long); with
    /// `stretch`, `tx` (its bytes were multiplied where it was queued).
    #[inline]
    pub fn serialization(&mut self, p: u32, dst: u32, flow: u32, tx: Time, bits_per_sec: u64, now: Time) -> Time {
        let stands = self.stands_for_more(p, dst, flow);
        let (m, tau) = (self.m, self.tau);
        let mirrored = self.mirrored(p, dst, flow);
        let Some(fluid) = &mut self.fluid else { return tx };
        if mirrored {
            // its twins' ports carry as much: the load counts `m - 1` times per byte added
            let bytes = tx as f64 * bits_per_sec as f64 / 8.0 / 1e12 / (m - 1.0);
            for &q in &self.twins[p as usize] {
                let ph = &mut fluid[q as usize];
                ph.bytes = ph.bytes * (-((now - ph.at) as f64) / tau).exp() + bytes;
                ph.at = now;
            }
        }
        let ph = &mut fluid[p as usize];
        if ph.bytes == 0.0 && !stands {
            return tx;
        }
        ph.bytes *= (-((now - ph.at) as f64) / tau).exp();
        ph.at = now;
        let bytes_per_ps = bits_per_sec as f64 / 8.0 / 1e12;
        let share = ((m - 1.0) * ph.bytes / tau / bytes_per_ps).min(1.0 - 1.0 / m);
        let held = (tx as f64 / (1.0 - share)).round() as Time;
        if stands {
            let share = if Self::bit(&self.thin, flow) { self.thin_share } else { 1.0 };
            ph.bytes += tx as f64 * bytes_per_ps * share;
        }
        held
    }

    /// The bytes a packet to `dst` of `wire_bytes` is queued with at port `p`: where it
    /// stands for `m` packets it takes `m` times its bytes of the buffer, with
    /// `fast.phantom = "stretch"` (and of the link) or `fast.charge_buffer`.
    #[inline]
    pub fn at_port(&self, p: u32, dst: u32, flow: u32, wire_bytes: u16) -> u16 {
        if self.charge && self.stands_for_more(p, dst, flow) {
            wire_bytes * self.m as u16 // `plan` refused a charge that would overflow
        } else {
            wire_bytes
        }
    }

    /// The bytes it leaves port `p` with: its own again.
    #[inline]
    pub fn leaving(&self, p: u32, dst: u32, flow: u32, wire_bytes: u16) -> u16 {
        if self.charge && self.stands_for_more(p, dst, flow) {
            wire_bytes / self.m as u16
        } else {
            wire_bytes
        }
    }
}

impl Sample {
    /// The sample `s` asks for, `None` at packet fidelity; refuses by name what it cannot
    /// sample.
    pub fn plan(s: &Scenario, topo: &Topology) -> Result<Option<Sample>, ScenarioError> {
        if s.fidelity.is_packet() {
            return Ok(None);
        }
        let refuse = |key: &str, why: &str| {
            Err(ScenarioError::new(key, format!("fidelity = \"fast\" {why}; run it with fidelity = \"packet\"")))
        };
        let w = &s.workload;
        let ps = w.kind == WorkloadKind::Ps || (w.kind == WorkloadKind::Dnn && w.pattern == DnnPattern::Ps);
        if !ps {
            return refuse("workload.kind", "samples the servers of a PS job, and this workload is not one");
        }
        if w.colocated && s.fast.phantom == PhantomModel::Stretch {
            return refuse("fast.phantom", "= \"stretch\" has no phantom to carry a colocated server's traffic");
        }
        if !s.ideal.is_off() {
            return refuse("ideal", "simulates packets; an ideal row has none");
        }
        if s.pauses.hosts > 0 {
            return refuse("pauses.hosts", "cannot pause hosts it does not simulate");
        }
        if s.pcn.enabled {
            return refuse("pcn.enabled", "does not model PCN's announcements");
        }
        if !s.failures.is_empty() {
            return refuse("failures", "keeps no load on the links it samples away");
        }
        // what benchmarks/sim_fast did not find within 5 % of packet level runs only when asked
        let unmeasured = |key: &str, what: String| {
            Err(ScenarioError::new(
                key,
                format!(
                    "fidelity = \"fast\" has not been found within 5 % of packet level {what} \
                     (benchmarks/sim_fast); set fast.unvalidated = true to run it anyway, or use \
                     fidelity = \"packet\""
                ),
            ))
        };
        let transport = s.transport.kind.name();
        if !s.fast.unvalidated {
            if !VALIDATED.contains(&transport) {
                return unmeasured(
                    "transport.kind",
                    format!("for `{transport}` (validated: {})", VALIDATED.join(", ")),
                );
            }
            if transport == "newreno" && s.transport.keys.str("tcp_cc") != VALIDATED_NEWRENO_CC {
                let why = "for `newreno` with Reno's window growth (128 hosts: +5.0 % mean FCT, +16 % p99; \
                           CUBIC's, the default baseline's, is validated)";
                return unmeasured("transport.tcp_cc", why.into());
            }
            let fabric = FABRICS_VALIDATED.contains(&transport);
            if s.topology.kind == TopologyKind::LeafSpine && !(fabric && oversubscription(s) <= 1.0) {
                let why = format!(
                    "on a leaf-spine {} (128 hosts, DCTCP: within 3.2 % at 1:1, -16 % mean FCT and -52 % RTOs at 4:1; \
                     fat-trees are validated, and leaf-spines at 1:1 for {})",
                    if fabric { "oversubscribed" } else { "with this transport" },
                    FABRICS_VALIDATED.join(", ")
                );
                return unmeasured("topology.kind", why);
            }
            if s.routing.mode == RoutingMode::Spray && !fabric {
                let why = format!("with spraying for `{transport}` (validated for {})", FABRICS_VALIDATED.join(", "));
                return unmeasured("routing.mode", why);
            }
            if w.iterations > 1 {
                let why = "over chained iterations (a worker's next one waits for its sampled servers only; \
                           DLCP Fig. 14's DCTCP row at 64 workers: -27 % iteration time on the same servers)";
                return unmeasured("workload.iterations", why.into());
            }
            if w.colocated {
                let why = "with colocated servers (128 hosts: +5.7 % p50 FCT; dedicated servers are validated)";
                return unmeasured("workload.colocated", why.into());
            }
        }
        let thin = s.fast.thin_whole_tensors;
        if thin && s.fast.keep_whole_tensors == Some(false) {
            return Err(ScenarioError::new(
                "fast.thin_whole_tensors",
                "thins the whole tensors fast.keep_whole_tensors keeps, and it is false",
            ));
        }
        if thin && w.colocated {
            return refuse(
                "fast.thin_whole_tensors",
                "cannot slow a colocated server's host link (its worker traffic shares it)",
            );
        }
        if thin && s.switch.buffer == BufferMode::Shared {
            return refuse(
                "fast.thin_whole_tensors",
                "scales a server's port buffer, and switch.buffer = \"shared\" has none of its own",
            );
        }
        let thin_most = THIN_VALIDATED.iter().find(|&&(t, _)| t == transport).map(|&(_, most)| most);
        if thin && thin_most.is_none() && !s.fast.unvalidated {
            let names: Vec<&str> = THIN_VALIDATED.iter().map(|&(t, _)| t).collect();
            let why = format!("with thinned whole tensors for `{transport}` (validated: {})", names.join(", "));
            return unmeasured("fast.thin_whole_tensors", why);
        }
        if s.fast.thin_by.is_some() && !thin {
            return Err(ScenarioError::new(
                "fast.thin_by",
                "thins the whole tensors, and fast.thin_whole_tensors is false",
            ));
        }
        if s.fast.thin_by == Some(0) {
            return Err(ScenarioError::new("fast.thin_by", "must be at least 1 (got 0)"));
        }
        let keep_whole = thin || s.fast.keep_whole_tensors.unwrap_or(KEEP_WHOLE_TENSORS.contains(&transport));
        if !keep_whole && KEEP_WHOLE_TENSORS.contains(&transport) && !s.fast.unvalidated {
            let why = format!(
                "for `{transport}` without every server's whole tensors (128 hosts: -32 % mean FCT; \
                 fast.keep_whole_tensors, the default for it, is validated)"
            );
            return unmeasured("fast.keep_whole_tensors", why);
        }
        if keep_whole && s.fast.weigh_whole_tensors {
            return Err(ScenarioError::new(
                "fast.weigh_whole_tensors",
                "cannot weigh the whole tensors the sample keeps (fast.keep_whole_tensors simulates every server's)",
            ));
        }
        if s.fast.servers == 0 {
            return Err(ScenarioError::new("fast.servers", "must be at least 1 (got 0)"));
        }
        let (workers, all) = ps_placement(s, topo);
        let of = all.len() as u32;
        // a packet stands for `S / n` packets, a fraction where n does not divide S: the fluid
        // phantom is a rate, and a shard of every tensor goes to every server either way
        let n = s.fast.servers.min(of);
        let m = of as f64 / n as f64;
        let whole = of.is_multiple_of(n);
        let mut most = VALIDATED_UP_TO_M.iter().find(|(t, _)| *t == transport).map(|&(_, most)| most);
        if s.topology.kind == TopologyKind::LeafSpine || s.routing.mode == RoutingMode::Spray {
            most = most.map(|most| most.min(FABRICS_VALIDATED_UP_TO_M));
        }
        if let Some(most) = most.filter(|&most| m > most as f64 && !s.fast.unvalidated) {
            return unmeasured(
                "fast.servers",
                format!(
                    "for `{transport}` with a packet standing for {m:.2} ({n} of {of} servers; validated up to {most}: \
                     sample at least {})",
                    of.div_ceil(most)
                ),
            );
        }
        // a thinned whole tensor's flow stands for `m` of its server's workers, or for as
        // many as its transport's scale model was validated at
        let thin_by = match (s.fast.thin_by, thin_most) {
            (Some(by), _) => by as f64,
            (None, Some(most)) => m.min(most as f64),
            (None, None) => m,
        };
        if let Some(most) = thin_most.filter(|&most| thin && thin_by > most as f64 && !s.fast.unvalidated) {
            let why = format!(
                "for `{transport}` with a thinned flow standing for {thin_by:.2} workers (validated up to {most}: \
                 the job's iteration 46 % short at 16, where one in 16 flows draws the deepest RTO chain too rarely)"
            );
            return unmeasured("fast.thin_by", why);
        }
        let biggest = s.transport.mss_bytes as u64 + s.transport.header_bytes as u64;
        let charge = s.fast.phantom == PhantomModel::Stretch || s.fast.charge_buffer;
        if charge && thin && thin_by != m {
            return Err(ScenarioError::new(
                "fast.thin_by",
                format!(
                    "{thin_by} is not m = {m:.2}: a packet charged to the buffer (phantom = \"stretch\" or \
                     charge_buffer) stands for m"
                ),
            ));
        }
        if charge && !whole {
            return Err(ScenarioError::new(
                "fast.servers",
                format!(
                    "{n} of {of} servers: a packet charged to the buffer (phantom = \"stretch\" or charge_buffer) \
                     stands for a whole number of packets; sample a number of servers that divides {of}"
                ),
            ));
        }
        if charge && m as u64 * biggest > u16::MAX as u64 {
            return Err(ScenarioError::new(
                "fast.servers",
                format!(
                    "{n} of {of} servers: a packet charged to the buffer for {m} would take more than \
                     a 65535-byte frame; sample more servers, or use phantom = \"fluid\" without \
                     charge_buffer"
                ),
            ));
        }
        // groups of m servers (m rounded down or up where it is a fraction), one sampled from each
        let samples = of / n;
        if s.fast.offset >= samples {
            return Err(ScenarioError::new(
                "fast.offset",
                format!(
                    "{n} of {of} servers make {samples} disjoint samples, offsets 0 to {} (got {})",
                    samples - 1,
                    s.fast.offset
                ),
            ));
        }
        let k = s.fast.offset as usize;
        let start = |i: usize| (i as u64 * of as u64 / n as u64) as usize;
        let servers: Vec<u32> = (0..n as usize).map(|i| all[start(i) + k]).collect();
        // colocated: the hosts of the other servers of its group carry a sampled one's traffic
        let twins = if w.colocated && n < of {
            let group = |i: usize| &all[start(i)..start(i + 1)];
            (0..n as usize).map(|i| (group(i)[k], [&group(i)[..k], &group(i)[k + 1..]].concat())).collect()
        } else {
            Vec::new()
        };
        // a quarter of one round of a worker's NIC over every server, by default
        let tau_ps = match s.fast.phantom_tau_us {
            Some(us) => us * 1e6,
            None => {
                let nic = workers.first().and_then(|&w| topo.links.iter().find(|l| l.a == w || l.b == w));
                let bits_per_ps = nic.map_or(0.1, |l| l.bits_per_sec as f64 / 1e12);
                of as f64 * biggest as f64 * 8.0 / bits_per_ps / 4.0
            }
        };
        let mut worker = vec![false; topo.nodes.len()];
        let mut kept = vec![false; topo.nodes.len()];
        for &w in &workers {
            worker[w as usize] = n < of;
        }
        for &h in &servers {
            kept[h as usize] = true;
        }
        let mut thinned = vec![false; topo.nodes.len()];
        for &h in all.iter().filter(|_| thin && n < of) {
            thinned[h as usize] = !kept[h as usize];
        }
        Ok(Some(Sample {
            servers,
            of,
            worker,
            kept,
            rate: n as f64 / of as f64,
            m,
            thin_by,
            samples,
            scale_ecn: s.fast.scale_ecn,
            weigh_core: s.fast.weigh_core,
            phantom: s.fast.phantom,
            tau_ps,
            charge,
            twins,
            keep_whole,
            thinned,
            racks: topo.racks.max(1) as usize,
        }))
    }

    /// Does the ECN threshold of a port toward `node` scale with the sample's share of the
    /// servers? Toward a worker of a thinned job with `fast.scale_ecn`, unless it is a
    /// sampled server too (its pushes all arrive).
    pub fn scales_ecn_toward(&self, node: NodeId) -> bool {
        self.scale_ecn && self.worker[node as usize] && !self.kept[node as usize]
    }

    /// What the packets of each port, given as (from, to), weigh.
    pub fn weights(&self, ports: impl Iterator<Item = (NodeId, NodeId)>) -> Weights {
        let ports: Vec<(NodeId, NodeId)> = ports.collect();
        let twinned = |h: NodeId| !self.twins.is_empty() && self.kept[h as usize];
        let hop: Vec<Hop> = ports
            .iter()
            .map(|&(from, to)| {
                // node ids grow with the tier: a port to a lower id leads toward the hosts
                let down = from > to;
                if twinned(if down { to } else { from }) {
                    return Hop::Twinned { down };
                }
                let here = self.weigh_core || self.worker[from as usize] || self.worker[to as usize];
                match (here, down) {
                    (false, _) => Hop::Own,
                    (true, true) => Hop::TowardWorkers,
                    (true, false) => Hop::TowardServers,
                }
            })
            .collect();
        // a host's up port and down port, by host
        let mut host_ports: std::collections::HashMap<NodeId, [u32; 2]> = Default::default();
        for (i, &(from, to)) in ports.iter().enumerate() {
            let (host, dir) = if from > to { (to, 1) } else { (from, 0) };
            host_ports.entry(host).or_insert([u32::MAX; 2])[dir] = i as u32;
        }
        let mut twins = vec![Vec::new(); if self.twins.is_empty() { 0 } else { ports.len() }];
        for (server, others) in &self.twins {
            for dir in 0..2 {
                let port_of = |h: &NodeId| host_ports.get(h).map(|p| p[dir]).filter(|&p| p != u32::MAX);
                if let Some(p) = port_of(server) {
                    twins[p as usize] = others.iter().filter_map(port_of).collect();
                }
            }
        }
        let fluid = (self.phantom == PhantomModel::Fluid).then(|| vec![PhantomLoad::default(); hop.len()]);
        let (m, tau, charge) = (self.m, self.tau_ps, self.charge);
        // a thinned flow's packets add `thin_by - 1` packets' worth to the phantom, not `m - 1`
        let thin_share = if self.thin_by == m { 1.0 } else { (self.thin_by - 1.0) / (m - 1.0) };
        Weights {
            hop,
            flows: Vec::new(),
            thin: Vec::new(),
            worker_of: Vec::new(),
            twins,
            m,
            thin_share,
            fluid,
            tau,
            charge,
        }
    }

    /// Does the workload keep the flows of a shard on server `h` (of a tensor `spread`
    /// over every server, or sent whole)? A sampled server's, and with
    /// `fast.keep_whole_tensors` every whole tensor's.
    /// With `fast.thin_whole_tensors`, a server sampled away keeps one in `thin_by` (`m`
    /// by default) of its workers: by `worker`, its index in the job's worker list (round-robin over the
    /// racks), plus its place in its rack, so that they spread over the racks (every
    /// `m`-th index alone takes whole racks where `m` divides their number), plus the
    /// server's host, so that each worker is kept for some servers.
    pub fn keeps(&self, h: u32, spread: bool, worker: usize) -> bool {
        let turned = worker + worker / self.racks + h as usize;
        self.kept[h as usize] || (self.keep_whole && !spread && (!self.thins(h) || self.one_in_m(turned)))
    }

    /// Is `i` one of every `thin_by` (about `1 / thin_by` of the integers, evenly, where it
    /// is a fraction)?
    fn one_in_m(&self, i: usize) -> bool {
        ((i + 1) as f64 / self.thin_by).floor() > (i as f64 / self.thin_by).floor()
    }

    /// A thinned server's host link's rate, buffer and ECN threshold over the job's.
    pub fn thin_rate(&self) -> f64 {
        if self.thin_by == self.m {
            self.rate
        } else {
            1.0 / self.thin_by
        }
    }

    /// Is host `h` a server sampled away whose whole tensors run as a scale model, its host
    /// link at `1/thin_by` the rate, buffer and ECN threshold (`fast.thin_whole_tensors`)?
    pub fn thins(&self, h: u32) -> bool {
        self.thinned[h as usize]
    }

    /// Does a flow stand for more on the worker's half of its path, and for the `m` flows
    /// of its group in the job's figures? A shard of a tensor split over every server does
    /// (its worker sends the other shards at the same time), and a thinned whole tensor's
    /// (the `m - 1` workers left out send theirs); one of a tensor sent whole to one server
    /// does only with `whole_too` (its worker sends nothing else for it, and its packets
    /// leave at the link's rate).
    pub fn stands_for_more(&self, f: &FlowSpec, whole_too: bool) -> bool {
        f.spread || whole_too || self.thinned(f)
    }

    /// The flows of the job a thinned flow stands for, in units of a sampled server's
    /// ([`crate::Simulation::job_weight`]): `thin_by` flows.
    pub fn thinned_weight(&self) -> u64 {
        if self.thin_by == self.m {
            self.of as u64
        } else {
            (self.thin_by * self.servers.len() as f64).round() as u64
        }
    }

    /// Is `f` a thinned whole tensor's flow, standing for `thin_by` of its server's workers?
    pub fn thinned(&self, f: &FlowSpec) -> bool {
        !f.spread && self.thins(if f.pull { f.src } else { f.dst })
    }

    /// Does it simulate every server's whole tensors (`fast.keep_whole_tensors`)?
    pub fn keeps_whole_tensors(&self) -> bool {
        self.keep_whole
    }

    /// Does it simulate those of the servers sampled away as a scale model
    /// (`fast.thin_whole_tensors`)?
    pub fn thins_whole_tensors(&self) -> bool {
        self.thinned.contains(&true)
    }

    /// Is host `h` a sampled server, whose flows are the run's results?
    pub fn reports(&self, h: u32) -> bool {
        self.kept[h as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fabric of one host-to-switch port (port 0, up) whose host is a worker, with `m`.
    fn weights(m: f64, fluid: bool) -> Weights {
        let mut w = Weights {
            hop: vec![Hop::TowardServers],
            flows: Vec::new(),
            thin: Vec::new(),
            worker_of: Vec::new(),
            twins: Vec::new(),
            m,
            thin_share: 1.0,
            fluid: fluid.then(|| vec![PhantomLoad::default()]),
            tau: 100e6,
            charge: !fluid,
        };
        let spec = |spread, pull: bool| FlowSpec {
            src: pull as u32,
            dst: !pull as u32,
            bytes: 1,
            start: 0,
            gate_delay: 0,
            gate: None,
            layer: 0,
            layers: 1,
            iteration: 0,
            pull,
            spread,
        };
        w.weigh_flows(&[spec(true, false), spec(false, false), spec(true, true)], |f| f.spread, |_| false);
        w
    }

    #[test]
    fn a_stretched_packet_holds_m_times_its_bytes_on_the_workers_half_only() {
        let w = weights(4.0, false);
        assert_eq!(w.at_port(0, 1, 0, 1500), 6000, "a shard toward its server: stands for 4");
        assert_eq!(w.leaving(0, 1, 0, 6000), 1500, "and leaves as itself");
        assert_eq!(w.at_port(0, 1, 1, 1500), 1500, "a whole tensor's flow stands for itself");
        assert_eq!(w.at_port(0, 1, 2, 1500), 6000, "a pull's ACK up from its worker stands for 4");
        assert_eq!(w.at_port(0, 0, 0, 1500), 1500, "toward the worker on an up link: the server's half");
    }

    #[test]
    fn a_colocated_servers_traffic_loads_its_twins_links() {
        // port 0: down to a sampled server (host 1), port 1: down to its twin's host (2)
        let mut w = weights(4.0, true);
        w.hop = vec![Hop::Twinned { down: true }, Hop::TowardWorkers];
        w.twins = vec![vec![1], Vec::new()];
        w.fluid = Some(vec![PhantomLoad::default(); 2]);
        let (tx, bps) = (120_000, 100_000_000_000);
        // pushes into the sampled server at half the link's rate: its own, at the link's rate
        let mut t = 0;
        for _ in 0..5_000 {
            assert_eq!(w.serialization(0, 1, 0, tx, bps, t), tx, "a server's own pushes stand for themselves");
            t += 2 * tx;
        }
        // its twin's link carries as much: a packet of its own there takes twice as long
        let held = w.serialization(1, 0, 2, tx, bps, t);
        assert!((held as f64 / tx as f64 - 2.0).abs() < 0.05, "{held} ps for a {tx} ps packet");
        // a pull to the sampled server's worker stands for more, and loads no twin
        assert!(w.stands_for_more(0, 0, 2) && !w.mirrored(0, 0, 2));
    }

    #[test]
    fn a_fluid_phantom_leaves_an_idle_port_at_its_rate_and_a_busy_one_at_a_share() {
        let mut w = weights(4.0, true);
        let (tx, bps) = (120_000, 100_000_000_000); // 1500 B at 100 G, ps
        assert_eq!(w.serialization(0, 1, 0, tx, bps, 0), tx, "nothing sampled away has been seen yet");
        // back to back for a long while: the phantom takes its 3 of 4 shares
        let mut t = 0;
        let mut held = 0;
        for _ in 0..20_000 {
            held = w.serialization(0, 1, 0, tx, bps, t);
            t += held;
        }
        assert!((held as f64 / tx as f64 - 4.0).abs() < 0.05, "saturated: {held} ps for a {tx} ps packet");
        // long idle: the phantom's rate has decayed, a packet leaves at the link's rate again
        let later = w.serialization(0, 1, 1, tx, bps, t + 10_000_000_000);
        assert_eq!(later, tx);
    }
}
