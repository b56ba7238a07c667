//! What a `bytesched` job is: the model, the cluster, the scheduler's knobs and the
//! conditions that change while it trains. Deserialized from JSON (the Python entry point)
//! with every key but `model` defaulted.

use serde::{Deserialize, Serialize};

/// How gradients are synchronized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Parameter server, one server per worker host (the paper's PS setup, §IV-A): a worker
    /// pushes each partition to its server and pulls the aggregate back.
    #[default]
    Ps,
    /// Ring all-reduce of each partition over all workers (2(N-1) steps of 1/N of it).
    Ring,
}

/// PS: when a worker's partition gives its credit back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PsCredit {
    /// When the worker's own push of it has arrived at the server(s), plus the round trip.
    #[default]
    Push,
    /// When the server(s) hold every worker's push of it, plus the round trip: MXNet's
    /// `dist_sync` kvstore answers a push only once all workers' pushes of that key are
    /// aggregated, and ByteScheduler's MXNet plugin waits for that answer (a fork returns
    /// the credit on it; bytedance/byteps holds it until the pull is done too). A partition
    /// then holds its credit while the other workers catch up with it, and windows that hold
    /// different partitions deadlock (the job reports "stalled").
    Aggregated,
}

/// Which directions of a host's NIC `host_gbps` (and `rate_changes`) limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shaping {
    /// Both directions run at `host_gbps`: a link of that speed.
    #[default]
    Both,
    /// Only what the host sends is limited (a rate limiter on the NIC's egress: tc, or the
    /// NIC's own per-port limit); what it receives arrives at `port_gbps`, the switch port's
    /// speed. The paper's testbed has 100 Gbit/s ports and rates (0.5, 3, 5 Gbit/s) that no
    /// Ethernet link negotiates, so its NICs were limited this way (§IV-A).
    Egress,
}

/// ⟨S_p, S_c⟩ in bytes, or no scheduling at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedCfg {
    /// `None`: no scheduling (whole tensors in the framework's FIFO order, no window).
    pub partition_bytes: Option<u64>,
    /// Credit in bytes; default: one partition.
    #[serde(default)]
    pub credit_bytes: Option<u64>,
    /// Partitions in posting order instead of front layer first (an ablation of the priority).
    #[serde(default)]
    pub fifo: bool,
}

impl SchedCfg {
    pub const UNSCHEDULED: SchedCfg = SchedCfg { partition_bytes: None, credit_bytes: None, fifo: true };

    /// `⟨S_p, k×⟩`, front layer first.
    pub fn new(partition_bytes: u64, credit_multiple: u64) -> SchedCfg {
        SchedCfg {
            partition_bytes: Some(partition_bytes),
            credit_bytes: Some(partition_bytes.saturating_mul(credit_multiple)),
            fifo: false,
        }
    }
}

/// A change of host link rates when an iteration starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateChange {
    pub iteration: u32,
    /// New rate, Gbit/s, of the directions `shaping` limits.
    pub gbps: f64,
    /// Worker hosts affected; default: all.
    #[serde(default)]
    pub workers: Option<Vec<u32>>,
}

/// Another job sharing the hosts from `join_iteration` until `leave_iteration`: `flows`
/// long-lived flows on each of its hosts' links in each direction (sharing max-min fairly
/// with this job's flows, as TCP flows do), and its compute on the same GPUs, which slows
/// this job's compute by `compute_factor`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundJob {
    pub join_iteration: u32,
    #[serde(default)]
    pub leave_iteration: Option<u32>,
    #[serde(default = "d_one")]
    pub flows: u32,
    #[serde(default = "d_factor")]
    pub compute_factor: f64,
    /// Worker hosts it runs on; default: all.
    #[serde(default)]
    pub workers: Option<Vec<u32>>,
}

/// A worker's compute slowed by `factor` in iterations `from_iteration..to_iteration`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    pub worker: u32,
    pub from_iteration: u32,
    #[serde(default)]
    pub to_iteration: Option<u32>,
    pub factor: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobCfg {
    /// An embedded profile (`crate::models::names`).
    pub model: String,
    #[serde(default = "d_workers")]
    pub workers: u32,
    #[serde(default)]
    pub pattern: Pattern,
    /// Every host's NIC rate, Gbit/s, in the directions `shaping` limits (both by default).
    #[serde(default = "d_gbps")]
    pub host_gbps: f64,
    /// Which directions `host_gbps` limits (default: both).
    #[serde(default)]
    pub shaping: Shaping,
    /// The switch ports' speed, Gbit/s: a host's receive rate under `shaping = "egress"`.
    #[serde(default = "d_port")]
    pub port_gbps: f64,
    /// Fixed cost of each partition (one push-pull or all-reduce operation), paid serially by
    /// the worker's communication thread before the partition's bytes move. It is what makes
    /// infinitesimal partitions not pay (autobyte.md §II-D). Default [`DEFAULT_OVERHEAD_US`].
    #[serde(default = "d_overhead")]
    pub partition_overhead_us: f64,
    /// The round trip a partition's credit waits for after its bytes have arrived (PS: the
    /// server's response to the push; ring: the hand-off between two steps), during which
    /// the link idles unless the credit admits other partitions: what makes a one-partition
    /// credit stop-and-wait (autobyte.md Fig. 2(a)). Default [`DEFAULT_LATENCY_US`].
    #[serde(default = "d_latency")]
    pub partition_latency_us: f64,
    /// PS: a partition larger than this is striped evenly over all servers, as MXNet's
    /// kvstore does above `MXNET_KVSTORE_BIGARRAY_BOUND` (10^6 floats = 4 MB); smaller ones
    /// go whole to one server chosen by hashing their key.
    #[serde(default = "d_split")]
    pub ps_split_bytes: u64,
    /// PS: each server's one thread spends this long on every push piece it receives
    /// (ps-lite's request handling and the merge) before it counts towards the aggregate;
    /// serial per server, pieces in arrival order. Default 0: Fig. 6's bound in
    /// docs/notes/reproductions-autobyte.md ablates it.
    #[serde(default)]
    pub ps_server_overhead_us: f64,
    /// PS: when a partition's credit returns (default: its own push arrived).
    #[serde(default)]
    pub ps_credit: PsCredit,
    #[serde(default = "d_sched")]
    pub sched: SchedCfg,
    /// Samples per worker per iteration; default: the profile's batch size.
    #[serde(default)]
    pub batch_size: Option<u32>,
    #[serde(default)]
    pub rate_changes: Vec<RateChange>,
    #[serde(default)]
    pub background: Vec<BackgroundJob>,
    #[serde(default)]
    pub slowdowns: Vec<Slowdown>,
}

/// The default per-partition overhead, µs. The paper gives no number, only bounds: in its
/// Fig. 3(b) the smallest partition tried (1 MB) is the best one at 20 Gbit/s, so one
/// partition's overhead cannot exceed the 400 µs that 1 MB takes on a 20 Gbit/s wire (a
/// larger overhead would make 2 MB faster there). Half of that bound is the default;
/// docs/scheduling.md ablates 0, 50, 200 and 400 µs.
pub const DEFAULT_OVERHEAD_US: f64 = 200.0;

/// The default per-partition round trip, µs: a small message's round trip over TCP through a
/// user-space messaging layer (ps-lite over ZeroMQ, NCCL's proxy) is tens to a few hundred
/// µs; the paper gives no number. docs/scheduling.md ablates 0, 100 and 500 µs.
pub const DEFAULT_LATENCY_US: f64 = 100.0;

fn d_latency() -> f64 {
    DEFAULT_LATENCY_US
}

fn d_one() -> u32 {
    1
}
fn d_factor() -> f64 {
    1.0
}
fn d_workers() -> u32 {
    8
}
fn d_gbps() -> f64 {
    10.0
}
fn d_port() -> f64 {
    100.0
}
fn d_overhead() -> f64 {
    DEFAULT_OVERHEAD_US
}
fn d_split() -> u64 {
    4_000_000
}
fn d_sched() -> SchedCfg {
    SchedCfg::new(4_000_000, 2)
}

impl JobCfg {
    /// Refuse what cannot run: the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("workers: need at least one worker".into());
        }
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{key}: must be a positive number, got {v}"))
            }
        };
        positive("host_gbps", self.host_gbps)?;
        positive("port_gbps", self.port_gbps)?;
        if !(self.partition_overhead_us.is_finite() && self.partition_overhead_us >= 0.0) {
            return Err(format!("partition_overhead_us: must be ≥ 0, got {}", self.partition_overhead_us));
        }
        if !(self.partition_latency_us.is_finite() && self.partition_latency_us >= 0.0) {
            return Err(format!("partition_latency_us: must be ≥ 0, got {}", self.partition_latency_us));
        }
        if !(self.ps_server_overhead_us.is_finite() && self.ps_server_overhead_us >= 0.0) {
            return Err(format!("ps_server_overhead_us: must be ≥ 0, got {}", self.ps_server_overhead_us));
        }
        if self.ps_split_bytes == 0 {
            return Err("ps_split_bytes: must be at least 1".into());
        }
        self.sched.to_core().map_err(|e| format!("sched: {e}"))?;
        let in_range = |key: &str, list: &Option<Vec<u32>>| match list {
            Some(ws) if ws.iter().any(|&w| w >= self.workers) => {
                Err(format!("{key}: worker index out of range (workers = {})", self.workers))
            }
            _ => Ok(()),
        };
        for r in &self.rate_changes {
            positive("rate_changes.gbps", r.gbps)?;
            in_range("rate_changes.workers", &r.workers)?;
        }
        for b in &self.background {
            positive("background.compute_factor", b.compute_factor)?;
            in_range("background.workers", &b.workers)?;
        }
        for s in &self.slowdowns {
            positive("slowdowns.factor", s.factor)?;
            if s.worker >= self.workers {
                return Err(format!("slowdowns.worker: {} out of range (workers = {})", s.worker, self.workers));
            }
        }
        Ok(())
    }
}

impl SchedCfg {
    /// The core scheduler's config and order: no partition size means no scheduling.
    pub fn to_core(self) -> Result<(gradwire_core::sched::Config, gradwire_core::sched::Order), String> {
        use gradwire_core::sched::{Config, Order};
        match self.partition_bytes {
            None => Ok((Config::UNSCHEDULED, Order::Fifo)),
            Some(p) => {
                let c = Config { partition_bytes: p, credit_bytes: self.credit_bytes.unwrap_or(p) };
                c.validate().map_err(|e| e.to_string())?;
                Ok((c, if self.fifo { Order::Fifo } else { Order::FrontLayerFirst }))
            }
        }
    }
}
