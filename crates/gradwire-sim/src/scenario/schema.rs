//! The typed scenario: every key, its type and default. `docs/scenarios.md` documents
//! each one (a test keeps the two in step).

use serde::{Deserialize, Serialize};

pub use super::transport_cfg::{TransportCfg, TransportKind};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "d_name")]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// Hard stop of simulated time; a run also ends as soon as every flow is done.
    #[serde(default = "d_stop_ms")]
    pub stop_ms: f64,
    #[serde(default)]
    pub topology: TopologyCfg,
    #[serde(default)]
    pub switch: SwitchCfg,
    #[serde(default)]
    pub host: HostCfg,
    #[serde(default)]
    pub routing: RoutingCfg,
    #[serde(default)]
    pub transport: TransportCfg,
    pub workload: WorkloadCfg,
    #[serde(default)]
    pub output: OutputCfg,
    #[serde(default)]
    pub failures: Vec<FailureCfg>,
    #[serde(default)]
    pub pauses: PausesCfg,
    #[serde(default)]
    pub pcn: PcnCfg,
    /// A fluid lower bound of the same workload instead of the packet simulation
    /// (`crate::ideal`); left out of the serialized scenario when off.
    #[serde(default, skip_serializing_if = "crate::ideal::IdealMode::is_off")]
    pub ideal: crate::ideal::IdealMode,
    /// A preset of baseline settings, applied to every key the scenario leaves out
    /// (`super::preset`); left out of the serialized scenario when `modern`.
    #[serde(default, skip_serializing_if = "Baseline::is_modern")]
    pub baseline: Baseline,
    /// Cores one run uses: the network is split into this many parts, each simulated by its
    /// own thread (`crate::sim::parallel`); left out of the serialized scenario when 1.
    #[serde(default = "d_threads", skip_serializing_if = "is_one_thread")]
    pub threads: u32,
    /// `packet` simulates every flow; `fast` a sample of a PS job's servers (`crate::fast`);
    /// left out of the serialized scenario when `packet`.
    #[serde(default, skip_serializing_if = "Fidelity::is_packet")]
    pub fidelity: Fidelity,
    /// What `fidelity = "fast"` samples.
    #[serde(default, skip_serializing_if = "FastCfg::is_default")]
    pub fast: FastCfg,
}

/// How much of the workload is simulated packet by packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Every packet of every flow.
    #[default]
    Packet,
    /// Every packet of the flows of a sample of the servers (`crate::fast`).
    Fast,
}

impl Fidelity {
    pub fn is_packet(&self) -> bool {
        *self == Fidelity::Packet
    }
}

/// `[fast]`: the sample `fidelity = "fast"` simulates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastCfg {
    /// Servers simulated (at most the job's; spread evenly over its server list). A packet
    /// stands for `m` = the job's servers over these, a fraction where they do not divide.
    pub servers: u32,
    /// Which of the interleaved samples: servers `offset`, `offset + m`, ... of the job's
    /// list, each rounded down (`0 ≤ offset < ⌊m⌋`). Where `m` is whole its `m` offsets
    /// together cover every server once.
    pub offset: u32,
    /// Run all `m` samples (offsets 0 to `m - 1`, `threads` of them at once, each on one
    /// thread) and write their flows together: the whole job's flows and iteration
    /// (`crate::cover`; `m` must be whole).
    pub cover: bool,
    /// Scale the ECN threshold of a switch port toward a worker with the worker's link rate.
    pub scale_ecn: bool,
    /// A sampled packet weighs for the missing flows on the core links too, not only on
    /// its worker's own link.
    pub weigh_core: bool,
    /// The flows of a tensor sent whole to one server stand for more too (as if the worker
    /// sent its other servers something meanwhile).
    pub weigh_whole_tensors: bool,
    /// Simulate every server's flows of the tensors sent whole, not only the sampled
    /// servers': they are left out of the results, but their packets share the workers'
    /// links, queues and priorities with the sample's (`crate::fast`). Absent: for the
    /// transports validated with it only ([`crate::fast::KEEP_WHOLE_TENSORS`]).
    pub keep_whole_tensors: Option<bool>,
    /// With the whole tensors kept: those of the servers sampled away as a scale model,
    /// one in `thin_by` of their workers' flows on host links of `1/thin_by` the rate,
    /// buffer and ECN threshold, each standing for `thin_by` on the workers' half
    /// (`crate::fast`).
    pub thin_whole_tensors: bool,
    /// With `thin_whole_tensors`: a thinned server's workers per simulated one, and its
    /// host link's scale (absent: `m`, up to what the transport's scale model was
    /// validated at, [`crate::fast::THIN_VALIDATED`]).
    pub thin_by: Option<u32>,
    /// How the packets a sampled one stands for take the link.
    pub phantom: PhantomModel,
    /// `phantom = "fluid"`: the time its rate is averaged over (default: a quarter of one
    /// round of a worker's NIC over every server, `crate::fast`).
    pub phantom_tau_us: Option<f64>,
    /// `phantom = "fluid"`: a packet that stands for `m` takes `m` times its bytes of the
    /// port's buffer too, as the packets it stands for would queue beside it where the port
    /// is saturated (`stretch` always does).
    pub charge_buffer: bool,
    /// Run a transport whose error `benchmarks/sim_fast` has not found within 5 %.
    pub unvalidated: bool,
}

/// How a fast run's links carry the packets of the flows it samples away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhantomModel {
    /// As a fluid sharing the link: a packet at an idle port leaves at the link's rate.
    #[default]
    Fluid,
    /// Right behind each sampled packet: it holds the port `m` times as long.
    Stretch,
}

impl Default for FastCfg {
    fn default() -> Self {
        FastCfg {
            servers: 32,
            offset: 0,
            cover: false,
            scale_ecn: true,
            weigh_core: true,
            weigh_whole_tensors: false,
            keep_whole_tensors: None,
            thin_whole_tensors: false,
            thin_by: None,
            phantom: PhantomModel::Fluid,
            phantom_tau_us: None,
            charge_buffer: false,
            unvalidated: false,
        }
    }
}

impl FastCfg {
    pub fn is_default(&self) -> bool {
        *self == FastCfg::default()
    }
}

fn d_threads() -> u32 {
    1
}

fn is_one_thread(v: &u32) -> bool {
    *v == 1
}

/// How the baselines around a transport are configured (each key's source: `preset.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Baseline {
    /// TCP as Linux runs it by default (SACK, RACK-TLP, CUBIC for plain TCP, delayed
    /// ACKs, Linux's RTOmin); round-robin NICs, no handshake. `"linux"` is the same.
    #[default]
    #[serde(alias = "linux")]
    Modern,
    /// ns-3.37's TCP defaults (SACK, PRR, delayed ACKs every 2 segments, its RTOmin) and
    /// what an ns-3 run of dlcp.md §5.2 would have had around it (FIFO NICs, handshakes).
    Ns3,
    /// The TCP of the papers' ns-3 runs and of gradwire before SACK: NewReno recovery
    /// (RFC 6582) without SACK, every segment ACKed at once.
    Sackless,
}

impl Baseline {
    pub fn is_modern(&self) -> bool {
        *self == Baseline::Modern
    }
}

/// PCN (pcn.md §3): bursts of `kind = "ddlgen"` are announced by a PCN-START to the server;
/// every switch port on the way lowers its ECN threshold from `switch.ecn_threshold_packets`
/// to the PCN threshold until the burst arrives; the worker sends after the server's ACK,
/// or after `fallback_us` without one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcnCfg {
    pub enabled: bool,
    /// Ratio k of Eq. (2): `h_PCN = RTT · C / (√N · MTU) · k`, rounded up to a multiple of 5.
    pub k: f64,
    /// N of Eq. (1): concurrent long flows per bottleneck.
    pub long_flows: u32,
    /// The PCN threshold in packets (a multiple of 5, at most 75) instead of Eq. (2).
    pub threshold: Option<u32>,
    /// RTT of Eq. (1); default: the topology's base RTT.
    pub rtt_us: Option<f64>,
    /// How long a worker waits for the ACK; default `worker_fallback` (twice the base RTT
    /// plus every buffer on a leaf-spine path full, both ways).
    pub fallback_us: Option<f64>,
    /// Size of a PCN-START and of its ACK on the wire.
    pub packet_bytes: u32,
    /// The worker starts its burst this long after the ACK (0: at once, pcn.md §3.2); a
    /// real sender adds its own start-up here (an iperf3 burst opens a TCP connection).
    #[serde(skip_serializing_if = "is_zero")]
    pub burst_delay_us: f64,
}

impl Default for PcnCfg {
    fn default() -> Self {
        PcnCfg {
            enabled: false,
            k: 0.25,
            long_flows: 3,
            threshold: None,
            rtt_us: None,
            fallback_us: None,
            packet_bytes: 64,
            burst_delay_us: 0.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    LeafSpine,
    FatTree,
}

/// Defaults are the DLCP §5.2.1 network: 4 spines, 9 leaves x 16 hosts, 100G everywhere.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyCfg {
    pub kind: TopologyKind,
    pub spines: u32,
    pub leaves: u32,
    pub hosts_per_leaf: u32,
    pub host_link_gbps: f64,
    /// Leaf-to-spine links per leaf; link j goes to spine `j % spines`.
    pub uplinks_per_leaf: u32,
    pub uplink_gbps: f64,
    /// Fat-tree arity (k pods, k^3/4 hosts).
    pub k: u32,
    /// Fat-tree link rate (all links).
    pub link_gbps: f64,
    /// Propagation delay of every link.
    pub link_delay_ns: u64,
    /// Random non-congestion loss: each packet crossing any link is lost with this
    /// probability (ltp.md §V-C sweeps 0 to 1%).
    pub link_loss_rate: f64,
}

impl Default for TopologyCfg {
    fn default() -> Self {
        TopologyCfg {
            kind: TopologyKind::LeafSpine,
            spines: 4,
            leaves: 9,
            hosts_per_leaf: 16,
            host_link_gbps: 100.0,
            uplinks_per_leaf: 4,
            uplink_gbps: 100.0,
            k: 4,
            link_gbps: 100.0,
            link_delay_ns: 10_650,
            link_loss_rate: 0.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferMode {
    PerPort,
    Shared,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchCfg {
    pub buffer: BufferMode,
    /// Per port (`per_port`) or per switch (`shared`).
    pub buffer_bytes: u64,
    /// Dynamic-threshold alpha for the shared buffer.
    pub dt_alpha: f64,
    /// Mark ECT packets CE when the queue holds more than this many packets; 0 = off.
    pub ecn_threshold_packets: u32,
    /// Drop when a queue holds this many packets; 0 = only the buffer limits.
    pub drop_threshold_packets: u32,
    /// Strict-priority queues per port (1..=8).
    pub queues: u8,
    /// `plain`: ECN marking per queue. `dlcp`: queue 0 for control, data queue i marks
    /// important and drops unimportant packets above `ecn_threshold_packets * (1 + (i-1) d)`.
    pub policy: SwitchPolicy,
    /// DLCP threshold step `d`.
    pub dlcp_d: f64,
    /// Bytes of each switch buffer pool only queue 0 (DLCP's control queue) may use.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub queue0_reserve_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchPolicy {
    #[default]
    Plain,
    Dlcp,
    /// pFabric: one queue served smallest-rank first, evicting the largest rank when full
    /// (hosts' NICs schedule the same way).
    Pfabric,
}

impl Default for SwitchCfg {
    fn default() -> Self {
        SwitchCfg {
            buffer: BufferMode::PerPort,
            buffer_bytes: 512_000,
            dt_alpha: 1.0,
            ecn_threshold_packets: 65,
            drop_threshold_packets: 0,
            queues: 8,
            policy: SwitchPolicy::Plain,
            dlcp_d: 0.5,
            queue0_reserve_bytes: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostCfg {
    /// NIC queue capacity; 0 = unbounded (the transport's window is the only limit).
    pub nic_queue_bytes: u64,
    /// How the NIC chooses what to send next.
    pub nic: NicDiscipline,
    /// The share of its link's rate a host NIC sends at, (0, 1]: the socket runtime's
    /// NIC clock runs below the link's (`gradwire emulate` paces at 0.95), and a twin of
    /// an emulated run models that here.
    #[serde(skip_serializing_if = "is_one")]
    pub nic_rate_share: f64,
}

impl Default for HostCfg {
    fn default() -> Self {
        HostCfg { nic_queue_bytes: 0, nic: NicDiscipline::default(), nic_rate_share: 1.0 }
    }
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

/// A host NIC's queueing discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicDiscipline {
    /// Per-flow queues with socket backpressure: when the link is free the NIC asks its
    /// ready endpoints, highest class first and round robin within a class, for one packet.
    #[default]
    RoundRobin,
    /// One drop-tail queue in the order the endpoints hand packets over, each endpoint
    /// sending whatever its window and pacing allow (ns-3's default NIC); bounded by
    /// `nic_queue_bytes`, overflow dropped as `host_nic`.
    Fifo,
    /// Per-flow queues without backpressure, served round robin one packet per turn: each
    /// endpoint hands over whatever its window and pacing allow into its own queue (the
    /// round-robin queue disc of ns-3 runs in `validation/ns3/leafspine.cc`). Classes ignored.
    FlowQueues,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingMode {
    /// Per-flow hash over equal-cost next hops.
    #[default]
    Ecmp,
    /// Per-packet uniform random choice among equal-cost next hops.
    Spray,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingCfg {
    pub mode: RoutingMode,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    Flows,
    Incast,
    Permutation,
    AllToAll,
    Ps,
    /// One iteration of DNN gradient synchronization from a model profile.
    Dnn,
    /// An allreduce schedule from `gradwire_core::collective` (ring, tree, RAT, PS).
    Collective,
    /// pcn.md §4's DDLgen: every worker of `sender_list` sends a `flow_bytes` burst to
    /// `receiver`, the network idles `idle_us`, repeat `iterations` times; `flows` run
    /// beside it as background traffic.
    Ddlgen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DnnPattern {
    /// Parameter server, workers push then servers pull (dlcp.md §5.2.1).
    #[default]
    Ps,
    /// Ring allreduce per bucket.
    Ring,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadCfg {
    pub kind: WorkloadKind,
    #[serde(default)]
    pub start_us: f64,
    /// Each flow not gated by a barrier starts later by a uniform draw in
    /// [0, start_jitter_us) from its own seeded generator, so hosts do not act in lockstep.
    #[serde(default)]
    pub start_jitter_us: f64,
    /// incast, permutation, all_to_all: bytes per flow.
    #[serde(default)]
    pub flow_bytes: u64,
    /// incast: the receiving host.
    #[serde(default)]
    pub receiver: u32,
    /// incast: hosts receiver+1 .. receiver+senders (mod host count).
    #[serde(default)]
    pub senders: Option<u32>,
    /// incast: explicit sender hosts (instead of `senders`).
    #[serde(default)]
    pub sender_list: Option<Vec<u32>>,
    /// all_to_all: participating hosts (default: all).
    #[serde(default)]
    pub hosts: Option<Vec<u32>>,
    /// ps: worker count; worker i is host (i % leaves) * hosts_per_leaf + i / leaves.
    #[serde(default)]
    pub workers: u32,
    /// ps: server count.
    #[serde(default)]
    pub servers: u32,
    /// ps: server j runs on worker j * workers / servers (else on the next free hosts).
    #[serde(default = "d_true")]
    pub colocated: bool,
    /// ps: bytes each worker pushes in total, split evenly over the servers.
    #[serde(default)]
    pub push_bytes: u64,
    /// ps: bytes each worker pulls in total (default: push_bytes).
    #[serde(default)]
    pub pull_bytes: Option<u64>,
    /// flows: explicit list.
    #[serde(default)]
    pub flows: Vec<FlowCfg>,
    /// dnn: embedded model profile (resnet18, resnet50, inception_v3, vgg16, alexnet, transformer).
    #[serde(default = "d_model")]
    pub model: String,
    /// dnn: `ps` or `ring`.
    #[serde(default)]
    pub pattern: DnnPattern,
    /// dnn/ps: tensors larger than this are split evenly over all servers.
    #[serde(default = "d_split_bytes")]
    pub split_bytes: u64,
    /// dnn: fuse consecutive layers into buckets of at least this many bytes (0 = per layer).
    #[serde(default)]
    pub bucket_bytes: u64,
    /// dnn: training iterations; iteration k+1 of a worker starts (forward, then backward)
    /// once it has all of iteration k's aggregated gradients.
    #[serde(default = "d_one")]
    pub iterations: u32,
    /// dnn: start each layer's transfers when backward makes its gradient ready
    /// (false: everything starts at `start_us`).
    #[serde(default = "d_true")]
    pub compute: bool,
    /// collective: `ring`, `tree`, `rat` or `ps`.
    #[serde(default)]
    #[serde(with = "super::names::algorithm")]
    pub algorithm: Option<gradwire_core::collective::Algorithm>,
    /// collective: bytes every rank allreduces.
    #[serde(default)]
    pub bytes: u64,
    /// collective: element size; transfers are cut on element boundaries.
    #[serde(default = "d_elem_bytes")]
    pub elem_bytes: u32,
    /// collective (tree): children per node.
    #[serde(default = "d_tree_arity")]
    pub tree_arity: u32,
    /// collective (tree): pieces the buffer is cut into, each reduced and broadcast on its own.
    #[serde(default = "d_one")]
    pub pipeline_chunks: u32,
    /// ddlgen: network-idle period between one iteration's last burst and the next.
    #[serde(default)]
    pub idle_us: f64,
    /// ddlgen: each idle period is longer by a uniform draw in [0, idle_jitter_us)
    /// (seeded), so bursts meet the background at varied phases.
    #[serde(default)]
    pub idle_jitter_us: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowCfg {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    #[serde(default)]
    pub start_us: f64,
    /// Indices (in this list) of flows that must finish before this one starts.
    #[serde(default)]
    pub after: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputCfg {
    /// Egress ports whose queue length is sampled, named `from->to` (e.g. `leaf0->host3`).
    pub queue_ports: Vec<String>,
    pub queue_sample_ns: u64,
    /// Egress ports whose transmitted bytes (cumulative) are sampled every
    /// `queue_sample_ns` into `port_bytes.csv` (throughput over any interval).
    pub counter_ports: Vec<String>,
    /// Add `link_bytes` to summary.json: packets and bytes carried per link tier
    /// (`host->leaf`, `leaf->spine`, ...), e.g. to check cross-rack traffic.
    pub link_bytes: bool,
}

impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg { queue_ports: Vec::new(), queue_sample_ns: 1000, counter_ports: Vec::new(), link_bytes: false }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureCfg {
    pub at_us: f64,
    /// A link by its two ends, `leaf0-spine1` (both directions go down).
    #[serde(default)]
    pub link: Option<String>,
    /// A node (switch or host) by name, e.g. `spine1`: all its links go down.
    #[serde(default)]
    pub node: Option<String>,
    /// Pause instead of failing: the ports stop transmitting (rate 0) for this long and
    /// keep what they hold (a full buffer still drops), then resume; routes do not change.
    #[serde(default)]
    pub pause_us: Option<f64>,
}

/// What a paused host's NIC holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseHold {
    /// Its flows' data: it keeps receiving, and its ACKs and control still leave.
    #[default]
    Data,
    /// Everything it would send, ACKs included.
    All,
}

/// Node pauses (rat.md §4.1): every `period_us`, `hosts` hosts drawn at random (seeded,
/// without replacement) among `among` stop sending for `duration_us`; their NICs hold
/// the packets, nothing is dropped. Off while `hosts = 0`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PausesCfg {
    /// k: hosts paused at a time.
    pub hosts: u32,
    /// d: a new set is drawn every this long.
    pub period_us: f64,
    /// How long each set stays paused; default (and at most) `period_us`.
    pub duration_us: Option<f64>,
    /// First draw.
    pub start_us: f64,
    /// No draw at or after this time (default: none; draws go on until the run ends).
    pub stop_us: Option<f64>,
    /// Candidate hosts (default: every host).
    pub among: Option<Vec<u32>>,
    pub hold: PauseHold,
}

impl Default for PausesCfg {
    fn default() -> Self {
        PausesCfg {
            hosts: 0,
            period_us: 1000.0,
            duration_us: None,
            start_us: 0.0,
            stop_us: None,
            among: None,
            hold: PauseHold::Data,
        }
    }
}

fn d_name() -> String {
    "scenario".into()
}
fn d_seed() -> u64 {
    1
}
fn d_stop_ms() -> f64 {
    10_000.0
}
fn d_true() -> bool {
    true
}
fn d_one() -> u32 {
    1
}
fn d_model() -> String {
    "resnet50".into()
}
fn d_elem_bytes() -> u32 {
    4
}
fn d_tree_arity() -> u32 {
    2
}
fn d_split_bytes() -> u64 {
    4_000_000
}
