//! Scenario files: TOML in, validated [`Scenario`] out.
//!
//! Every error names the offending key and value (`topology.spines = -1: ...`). Overrides
//! (`--set key=value`) and sweeps (`[sweep]` of dotted keys to lists) are applied to the
//! TOML tree before it is typed, so they get exactly the same checks as the file.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// Dotted key, e.g. `topology.spines`; empty for file-level errors.
    pub key: String,
    pub message: String,
}

impl ScenarioError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ScenarioError { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

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
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostCfg {
    /// NIC queue capacity; 0 = unbounded (the transport's window is the only limit).
    pub nic_queue_bytes: u64,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    Newreno,
    Dctcp,
    /// DLCP bounded-loss transport (dlcp.md §3.2.1); pair with `switch.policy = "dlcp"`
    /// and `routing.mode = "spray"` for the full design.
    Dlcp,
    /// PIAS: DCTCP with sender-side multi-level feedback queue tagging (strict-priority switches).
    Pias,
    /// pFabric: line-rate start, remaining-size ranks; pair with `switch.policy = "pfabric"`
    /// and `routing.mode = "spray"`.
    Pfabric,
    /// LTP loss-tolerant transport (ltp.md §III-IV): Early Close, BDP congestion control;
    /// lossy pushes, fully reliable PS pulls.
    Ltp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportCfg {
    pub kind: TransportKind,
    pub mss_bytes: u32,
    pub header_bytes: u32,
    pub ack_bytes: u32,
    pub init_cwnd_packets: u32,
    pub rto_min_us: f64,
    pub rto_max_us: f64,
    /// RTO before the first RTT sample; defaults to `rto_min_us`.
    pub rto_initial_us: Option<f64>,
    pub dupack_threshold: u32,
    pub dctcp_g: f64,
    /// Switch queue for the flows' packets (0 = highest priority). DLCP ignores it: its
    /// control uses queue 0 and data the layer queue `1 + floor(layer * (queues-1) / layers)`.
    pub priority: u8,
    /// DLCP: share of a transfer that may be lost (push, and every non-PS flow).
    pub loss_bound: f64,
    /// DLCP: loss bound of PS pulls (aggregated, hence more important: tighter).
    pub pull_loss_bound: f64,
    /// DLCP: share of segments tagged important (ECN-capable); 0.5 mimics the median rule.
    pub important_fraction: f64,
    /// DLCP minimal rate control: period, halving factor delta, additive increase.
    pub rate_period_us: f64,
    pub rate_delta: f64,
    pub rate_increase_frac: f64,
    /// DLCP: retransmission timeout of control messages.
    pub ctrl_rto_us: f64,
    /// PIAS: demotion thresholds in bytes sent (at most 7; empty = PIAS's web-search set).
    pub pias_thresholds: Vec<u64>,
    /// pFabric: fixed RTO; default 3 x the topology's base RTT.
    pub pfabric_rto_us: Option<f64>,
    /// LTP: deadline slack C, deadline = max(LT threshold) + C (30 ms in a DC).
    pub ltp_c_ms: f64,
}

impl Default for TransportCfg {
    fn default() -> Self {
        TransportCfg {
            kind: TransportKind::Dctcp,
            mss_bytes: 1460,
            header_bytes: 40,
            ack_bytes: 40,
            init_cwnd_packets: 10,
            rto_min_us: 10_000.0,
            rto_max_us: 60_000_000.0,
            rto_initial_us: None,
            dupack_threshold: 3,
            dctcp_g: 1.0 / 16.0,
            priority: 0,
            loss_bound: 0.1,
            pull_loss_bound: 0.01,
            important_fraction: 0.5,
            rate_period_us: 200.0,
            rate_delta: 2.0,
            rate_increase_frac: 0.05,
            ctrl_rto_us: 1000.0,
            pias_thresholds: Vec::new(),
            pfabric_rto_us: None,
            ltp_c_ms: 30.0,
        }
    }
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
}

impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg { queue_ports: Vec::new(), queue_sample_ns: 1000 }
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
fn d_split_bytes() -> u64 {
    4_000_000
}

/// One concrete simulation of a scenario file: a point of its sweep.
#[derive(Debug, Clone)]
pub struct Run {
    /// Directory-safe name: the scenario name, or `key=value,...` of the sweep point.
    pub name: String,
    /// The sweep point as (dotted key, value) pairs; empty without a sweep.
    pub params: Vec<(String, String)>,
    pub scenario: Scenario,
}

/// Parse a scenario file, apply `key=value` overrides, expand its `[sweep]`, and type and
/// validate every run.
pub fn load(text: &str, overrides: &[String]) -> Result<Vec<Run>, ScenarioError> {
    let mut root: toml::Table =
        toml::from_str(text).map_err(|e| ScenarioError::new("", format!("not valid TOML: {e}")))?;
    for ov in overrides {
        let (key, value) = parse_override(ov)?;
        set_path(&mut root, &key, value)?;
    }
    let sweep = match root.remove("sweep") {
        None => Vec::new(),
        Some(toml::Value::Table(t)) => sweep_axes(t)?,
        Some(v) => return Err(ScenarioError::new("sweep", format!("must be a table of key = [values], got {v}"))),
    };
    let mut runs = Vec::new();
    for point in cartesian(&sweep) {
        let mut tree = root.clone();
        let mut params = Vec::new();
        for (key, value) in &point {
            match value {
                // a bundle: several keys that vary together, e.g. a scheme's transport,
                // switch policy and routing; `name` labels the point
                toml::Value::Table(bundle) => {
                    for (k, v) in bundle.iter().filter(|(k, _)| k.as_str() != "name") {
                        set_path(&mut tree, k, v.clone()).map_err(|e| ScenarioError::new(format!("sweep.{key}"), e.to_string()))?;
                    }
                    let label = bundle.get("name").map(display_value).ok_or_else(|| {
                        ScenarioError::new(format!("sweep.{key}"), "each table in a bundled sweep needs a `name`")
                    })?;
                    params.push((key.clone(), label));
                }
                _ => {
                    set_path(&mut tree, key, (*value).clone())?;
                    params.push((key.clone(), display_value(value)));
                }
            }
        }
        let scenario = from_table(tree)?;
        let name = if params.is_empty() {
            sanitize(&scenario.name)
        } else {
            params
                .iter()
                .map(|(k, v)| format!("{}={}", k.rsplit('.').next().unwrap_or(k), sanitize(v)))
                .collect::<Vec<_>>()
                .join(",")
        };
        runs.push(Run { name, params, scenario });
    }
    Ok(runs)
}

/// Type and validate one run's TOML tree.
pub fn from_table(tree: toml::Table) -> Result<Scenario, ScenarioError> {
    let value = toml::Value::Table(tree.clone());
    let scenario: Scenario = serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." { String::new() } else { key };
        let shown = lookup(&tree, &key).map(|v| format!(" (got {v})")).unwrap_or_default();
        ScenarioError::new(key, format!("{}{shown}", e.inner()))
    })?;
    scenario.validate()?;
    Ok(scenario)
}

fn parse_override(ov: &str) -> Result<(String, toml::Value), ScenarioError> {
    let Some((key, raw)) = ov.split_once('=') else {
        return Err(ScenarioError::new("", format!("override `{ov}` is not key=value")));
    };
    let key = key.trim().to_string();
    let raw = raw.trim();
    // A TOML literal if it is one (numbers, booleans, arrays, quoted strings), else a bare string.
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    Ok((key, value))
}

fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), ScenarioError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ScenarioError::new(key, "is not a valid dotted key"));
    }
    let mut table = root;
    for part in &parts[..parts.len() - 1] {
        let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            other => return Err(ScenarioError::new(key, format!("`{part}` is {other}, not a table"))),
        };
    }
    table.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

fn lookup<'a>(root: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut cur = root.get(parts.next()?)?;
    for part in parts {
        cur = match cur {
            toml::Value::Table(t) => t.get(part)?,
            toml::Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn sweep_axes(t: toml::Table) -> Result<Vec<(String, Vec<toml::Value>)>, ScenarioError> {
    let mut axes = Vec::new();
    for (k, v) in t {
        match v {
            toml::Value::Array(vals) if !vals.is_empty() => axes.push((k, vals)),
            other => {
                return Err(ScenarioError::new(format!("sweep.{k}"), format!("must be a non-empty list, got {other}")))
            }
        }
    }
    Ok(axes)
}

fn cartesian(axes: &[(String, Vec<toml::Value>)]) -> Vec<Vec<(String, &toml::Value)>> {
    let mut points: Vec<Vec<(String, &toml::Value)>> = vec![Vec::new()];
    for (key, vals) in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((key.clone(), v));
                    q
                })
            })
            .collect();
    }
    points
}

fn display_value(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.=".contains(c) { c } else { '_' }).collect()
}

impl Scenario {
    /// Checks serde cannot express: ranges, cross-field requirements.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        positive("stop_ms", self.stop_ms)?;
        if self.stop_ms > 1_000_000.0 {
            return Err(ScenarioError::new("stop_ms", format!("must be at most 1000000 (1000 s of simulated time; got {})", self.stop_ms)));
        }
        let t = &self.topology;
        match t.kind {
            TopologyKind::LeafSpine => {
                nonzero("topology.spines", t.spines)?;
                nonzero("topology.leaves", t.leaves)?;
                nonzero("topology.hosts_per_leaf", t.hosts_per_leaf)?;
                nonzero("topology.uplinks_per_leaf", t.uplinks_per_leaf)?;
                positive("topology.host_link_gbps", t.host_link_gbps)?;
                positive("topology.uplink_gbps", t.uplink_gbps)?;
            }
            TopologyKind::FatTree => {
                if t.k < 2 || t.k % 2 != 0 {
                    return Err(ScenarioError::new("topology.k", format!("must be an even number >= 2 (got {})", t.k)));
                }
                positive("topology.link_gbps", t.link_gbps)?;
            }
        }
        if !(0.0..1.0).contains(&t.link_loss_rate) {
            return Err(ScenarioError::new("topology.link_loss_rate", format!("must be in [0, 1) (got {})", t.link_loss_rate)));
        }
        let s = &self.switch;
        nonzero("switch.buffer_bytes", s.buffer_bytes)?;
        positive("switch.dt_alpha", s.dt_alpha)?;
        if !(1..=8).contains(&s.queues) {
            return Err(ScenarioError::new("switch.queues", format!("must be 1..=8 (got {})", s.queues)));
        }
        let tr = &self.transport;
        nonzero("transport.mss_bytes", tr.mss_bytes as u64)?;
        nonzero("transport.init_cwnd_packets", tr.init_cwnd_packets as u64)?;
        nonzero("transport.dupack_threshold", tr.dupack_threshold as u64)?;
        positive("transport.rto_min_us", tr.rto_min_us)?;
        positive("transport.rto_max_us", tr.rto_max_us)?;
        if let Some(v) = tr.rto_initial_us {
            positive("transport.rto_initial_us", v)?;
        }
        if !(tr.dctcp_g > 0.0 && tr.dctcp_g <= 1.0) {
            return Err(ScenarioError::new("transport.dctcp_g", format!("must be in (0, 1] (got {})", tr.dctcp_g)));
        }
        for (key, v) in [("transport.loss_bound", tr.loss_bound), ("transport.pull_loss_bound", tr.pull_loss_bound),
                         ("transport.important_fraction", tr.important_fraction)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ScenarioError::new(key, format!("must be in [0, 1] (got {v})")));
            }
        }
        positive("transport.rate_period_us", tr.rate_period_us)?;
        positive("transport.rate_delta", tr.rate_delta)?;
        positive("transport.ctrl_rto_us", tr.ctrl_rto_us)?;
        if !(0.0..=1.0).contains(&tr.rate_increase_frac) {
            return Err(ScenarioError::new("transport.rate_increase_frac", format!("must be in [0, 1] (got {})", tr.rate_increase_frac)));
        }
        if !(s.dlcp_d.is_finite() && s.dlcp_d >= 0.0) {
            return Err(ScenarioError::new("switch.dlcp_d", format!("must be >= 0 (got {})", s.dlcp_d)));
        }
        if tr.pias_thresholds.len() > 7 {
            return Err(ScenarioError::new("transport.pias_thresholds", format!("at most 7 thresholds (got {})", tr.pias_thresholds.len())));
        }
        if tr.pias_thresholds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ScenarioError::new("transport.pias_thresholds", "must be strictly increasing"));
        }
        positive("transport.ltp_c_ms", tr.ltp_c_ms)?;
        if let Some(v) = tr.pfabric_rto_us {
            positive("transport.pfabric_rto_us", v)?;
        }
        if matches!(tr.kind, TransportKind::Dlcp | TransportKind::Ltp) && s.queues < 2 {
            return Err(ScenarioError::new("switch.queues", "DLCP needs at least 2 queues (control + data)"));
        }
        if tr.priority >= s.queues {
            return Err(ScenarioError::new(
                "transport.priority",
                format!("must be below switch.queues = {} (got {})", s.queues, tr.priority),
            ));
        }
        nonnegative("workload.start_us", self.workload.start_us)?;
        nonzero("output.queue_sample_ns", self.output.queue_sample_ns)?;
        for (i, f) in self.failures.iter().enumerate() {
            nonnegative(&format!("failures.{i}.at_us"), f.at_us)?;
            if f.link.is_some() == f.node.is_some() {
                return Err(ScenarioError::new(format!("failures.{i}"), "needs exactly one of `link` or `node`"));
            }
        }
        self.validate_workload()
    }

    /// Propagation round trip across the widest path (leaf-spine: 4 links each way;
    /// fat-tree: 6), used to default RTT-scaled parameters.
    pub fn base_rtt_ns(&self) -> u64 {
        let t = &self.topology;
        let hops = match t.kind {
            TopologyKind::LeafSpine => 4,
            TopologyKind::FatTree => 6,
        };
        2 * hops * t.link_delay_ns
    }

    /// Hosts in the topology (needed to range-check workloads).
    pub fn host_count(&self) -> u32 {
        let t = &self.topology;
        match t.kind {
            TopologyKind::LeafSpine => t.leaves * t.hosts_per_leaf,
            TopologyKind::FatTree => t.k * t.k * t.k / 4,
        }
    }

    fn validate_workload(&self) -> Result<(), ScenarioError> {
        let w = &self.workload;
        let n = self.host_count();
        let host = |key: &str, h: u32| {
            if h < n {
                Ok(())
            } else {
                Err(ScenarioError::new(key, format!("host {h} is out of range: the topology has {n} hosts (0..{n})")))
            }
        };
        match w.kind {
            WorkloadKind::Flows => {
                if w.flows.is_empty() {
                    return Err(ScenarioError::new("workload.flows", "is empty: list at least one flow"));
                }
                for (i, f) in w.flows.iter().enumerate() {
                    host(&format!("workload.flows.{i}.src"), f.src)?;
                    host(&format!("workload.flows.{i}.dst"), f.dst)?;
                    if f.src == f.dst {
                        return Err(ScenarioError::new(format!("workload.flows.{i}.dst"), "equals src"));
                    }
                    nonnegative(&format!("workload.flows.{i}.start_us"), f.start_us)?;
                    for &a in &f.after {
                        if a as usize >= i {
                            return Err(ScenarioError::new(
                                format!("workload.flows.{i}.after"),
                                format!("flow {a} must come earlier in the list than flow {i}"),
                            ));
                        }
                    }
                }
            }
            WorkloadKind::Incast => {
                host("workload.receiver", w.receiver)?;
                nonzero("workload.flow_bytes", w.flow_bytes)?;
                match (&w.senders, &w.sender_list) {
                    (Some(_), Some(_)) | (None, None) => {
                        return Err(ScenarioError::new("workload.senders", "give exactly one of `senders` or `sender_list`"))
                    }
                    (Some(c), None) => {
                        if *c == 0 || *c >= n {
                            return Err(ScenarioError::new(
                                "workload.senders",
                                format!("must be 1..{} for {n} hosts (got {c})", n - 1),
                            ));
                        }
                    }
                    (None, Some(list)) => {
                        for (i, &h) in list.iter().enumerate() {
                            host(&format!("workload.sender_list.{i}"), h)?;
                            if h == w.receiver {
                                return Err(ScenarioError::new(format!("workload.sender_list.{i}"), "is the receiver"));
                            }
                        }
                    }
                }
            }
            WorkloadKind::Permutation => nonzero("workload.flow_bytes", w.flow_bytes)?,
            WorkloadKind::AllToAll => {
                nonzero("workload.flow_bytes", w.flow_bytes)?;
                if let Some(hosts) = &w.hosts {
                    for (i, &h) in hosts.iter().enumerate() {
                        host(&format!("workload.hosts.{i}"), h)?;
                    }
                }
            }
            WorkloadKind::Dnn => {
                crate::models::load(&w.model)?;
                nonzero("workload.iterations", w.iterations as u64)?;
                nonzero("workload.workers", w.workers as u64)?;
                if w.pattern == DnnPattern::Ps {
                    nonzero("workload.servers", w.servers as u64)?;
                }
                let hosts_needed = if w.colocated || w.pattern == DnnPattern::Ring { w.workers } else { w.workers + w.servers };
                if hosts_needed > n {
                    return Err(ScenarioError::new(
                        "workload.workers",
                        format!("{hosts_needed} hosts needed but the topology has {n}"),
                    ));
                }
                if w.colocated && w.servers > w.workers {
                    return Err(ScenarioError::new(
                        "workload.servers",
                        format!("colocated servers ({}) cannot outnumber workers ({})", w.servers, w.workers),
                    ));
                }
            }
            WorkloadKind::Ps => {
                nonzero("workload.workers", w.workers as u64)?;
                nonzero("workload.servers", w.servers as u64)?;
                nonzero("workload.push_bytes", w.push_bytes)?;
                let hosts_needed = if w.colocated { w.workers } else { w.workers + w.servers };
                if hosts_needed > n {
                    return Err(ScenarioError::new(
                        "workload.workers",
                        format!("{hosts_needed} hosts needed but the topology has {n}"),
                    ));
                }
                if w.colocated && w.servers > w.workers {
                    return Err(ScenarioError::new(
                        "workload.servers",
                        format!("colocated servers ({}) cannot outnumber workers ({})", w.servers, w.workers),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn positive(key: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ScenarioError::new(key, format!("must be a positive number (got {v})")))
    }
}

fn nonnegative(key: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(ScenarioError::new(key, format!("must be >= 0 (got {v})")))
    }
}

fn nonzero(key: &str, v: impl Into<u64>) -> Result<(), ScenarioError> {
    let v = v.into();
    if v > 0 {
        Ok(())
    } else {
        Err(ScenarioError::new(key, "must be greater than 0 (got 0)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[workload]\nkind = \"incast\"\nsenders = 4\nflow_bytes = 1000\n";

    fn err(text: &str, ov: &[&str]) -> ScenarioError {
        let ov: Vec<String> = ov.iter().map(|s| s.to_string()).collect();
        load(text, &ov).unwrap_err()
    }

    #[test]
    fn minimal_file_gets_dlcp_defaults() {
        let runs = load(MIN, &[]).unwrap();
        assert_eq!(runs.len(), 1);
        let s = &runs[0].scenario;
        assert_eq!(s.host_count(), 144);
        assert_eq!(s.switch.ecn_threshold_packets, 65);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = err(&format!("{MIN}bogus = 1\n"), &[]);
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = err(&format!("[topology]\nspinez = 3\n{MIN}"), &[]);
        assert!(e.to_string().contains("spinez"), "{e}");
    }

    #[test]
    fn wrong_type_names_key_and_value() {
        let e = err(&format!("[topology]\nspines = \"four\"\n{MIN}"), &[]);
        assert_eq!(e.key, "topology.spines");
        assert!(e.message.contains("four"), "{e}");
    }

    #[test]
    fn negative_rate_and_out_of_range_host() {
        let e = err(MIN, &["topology.host_link_gbps=-100"]);
        assert_eq!(e.key, "topology.host_link_gbps");
        assert!(e.message.contains("-100"), "{e}");
        let e = err(MIN, &["workload.receiver=144"]);
        assert_eq!(e.key, "workload.receiver");
        assert!(e.message.contains("144"), "{e}");
    }

    #[test]
    fn overrides_and_sweeps_expand() {
        let text = format!("{MIN}[sweep]\n\"transport.kind\" = [\"newreno\", \"dctcp\"]\n\"workload.senders\" = [2, 8]\n");
        let runs = load(&text, &["seed=7".into()]).unwrap();
        assert_eq!(runs.len(), 4);
        assert_eq!(runs[0].name, "kind=newreno,senders=2");
        assert!(runs.iter().all(|r| r.scenario.seed == 7));
        assert_eq!(runs[3].scenario.transport.kind, TransportKind::Dctcp);
        assert_eq!(runs[3].scenario.workload.senders, Some(8));
    }

    #[test]
    fn bundled_sweep_sets_several_keys_per_point() {
        let text = format!(
            "{MIN}[sweep]\nscheme = [{{ name = \"reno\", \"transport.kind\" = \"newreno\" }}, \
             {{ name = \"spray-dctcp\", \"transport.kind\" = \"dctcp\", \"routing.mode\" = \"spray\" }}]\n"
        );
        let runs = load(&text, &[]).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].name, "scheme=spray-dctcp");
        assert_eq!(runs[1].params, vec![("scheme".to_string(), "spray-dctcp".to_string())]);
        assert_eq!(runs[1].scenario.routing.mode, RoutingMode::Spray);
        assert_eq!(runs[0].scenario.transport.kind, TransportKind::Newreno);
        let e = load(&format!("{MIN}[sweep]\nscheme = [{{ \"transport.kind\" = \"dctcp\" }}]\n"), &[]).unwrap_err();
        assert_eq!(e.key, "sweep.scheme");
    }

    #[test]
    fn bad_override_value_is_rejected_with_key() {
        let e = err(MIN, &["transport.kind=cubic"]);
        assert_eq!(e.key, "transport.kind");
        assert!(e.message.contains("cubic"), "{e}");
    }
}
