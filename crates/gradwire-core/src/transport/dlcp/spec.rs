//! DLCP in the registry: its keys, how they become a [`DlcpConfig`], how it runs in the
//! socket runtime, and its builder (the state a host pair or a receiving host keeps across
//! transfers).

use std::borrow::Cow;
use std::ops::Range;

use super::{DlcpConfig, DlcpReceiver, DlcpSender, Importance, RateHint};
use crate::packet::Packet;
use crate::time::{from_us, Time};
use crate::transport::roles::{reassembling_receiver, Receiver, Sender};
use crate::transport::spec::{
    Build, Config, ConfigError, Info, Key, KeySet, KeyType, Pair, RuntimeKnobs, Transfer, TransportSpec, Value,
};
use crate::transport::{HostState, Hosts};

const RATE_STATES: &[&str] = &["tensor", "pair", "pair_shared", "pair_priority", "pair_strict"];
const RATE_HINTS: &[&str] = &["none", "receiver_share"];
const IMPORTANCE: &[&str] = &["fixed", "median_profile"];

/// The sender's cap under `dlcp_rate_hint = "receiver_share"`, in reported shares.
pub const DEFAULT_SHARE_HEADROOM: f64 = 1.5;

/// DLCP's keys.
pub static KEYS: KeySet = KeySet {
    name: "dlcp",
    keys: &[
        Key::new("important_fraction", KeyType::F64, Value::Float(0.5), ["float in [0, 1]", "`0.5`", "Share of segments tagged important (ECN-capable, never selectively dropped); used with `importance = \"fixed\"`."]),
        Key::hidden("importance", KeyType::Choice(IMPORTANCE), Value::Str(Cow::Borrowed("fixed")), ["`\"fixed\"` \\| `\"median_profile\"`", "`\"fixed\"`", "Which segments are important. `fixed`: `important_fraction` of every transfer's segments. `median_profile`: per layer, the share dlcp.md §3.2.2's median rule (a packet is important iff the mean \\|g\\| it carries is at least its tensor's median \\|g\\|, from a 0.1 % sample) tags in real gradients of the DNN workload's model, `crates/gradwire-sim/models/importance/<model>.json` (written by `tools/dnn_profiles/grad_importance.py`: resnet18, resnet50, inception_v3); a flow takes its (front) layer's share, pulls as pushes; which segments stays a seeded choice. Needs `workload.kind = \"dnn\"` and a model with a profile."]),
        Key::new("rate_period_us", KeyType::F64, Value::Float(200.0), ["float > 0, µs", "`200.0`", "Minimal rate control: control period."]),
        Key::new("rate_delta", KeyType::F64, Value::Float(2.0), ["float > 0", "`2.0`", "Rate control: halve the rate when send rate > Δ × receive rate."]),
        Key::new("rate_increase_frac", KeyType::F64, Value::Float(0.05), ["float in [0, 1]", "`0.05`", "Rate control: additive increase per period, as a fraction of line rate."]),
        Key::hidden("dlcp_rate_state", KeyType::Choice(RATE_STATES), Value::Str(Cow::Borrowed("tensor")), ["`\"tensor\"` \\| `\"pair\"` \\| `\"pair_shared\"` \\| `\"pair_priority\"` \\| `\"pair_strict\"`", "`\"tensor\"`", "Where the rate control's state lives. `tensor`: every transfer starts at line rate (dlcp.md §3.2.1). `pair`: a transfer starts from the state (rate and phase) the last rate decision of any transfer between the same sender and receiver hosts left — a **deviation** from dlcp.md, which is silent on state across tensors. `pair_shared`: as `pair`, and the pair's transfers that have data to send split its rate evenly (each paces at the rate divided by their number) instead of each sending at the whole rate — the pair, not the tensor, is the unit of rate control (a **deviation**). `pair_priority`: as `pair_shared`, but a transfer splits the rate only with the pair's transfers at its layer priority or above, so the pair's most important tensor paces at the whole rate and the host NIC's strict priority orders the rest (a **deviation**). `pair_strict`: as `pair_shared`, but strict priority inside the pair's rate: the transfers at the highest layer priority the pair has sending split the rate, less one minimal pace (one packet per rate period) for each transfer below them, which paces at that minimal pace while any transfer ahead of it has data, so the pair never paces above its rate; a transfer that stops sending wakes the pair's others at once (a **deviation**)."]),
        Key::hidden("dlcp_rate_hint", KeyType::Choice(RATE_HINTS), Value::Str(Cow::Borrowed("none")), ["`\"none\"` \\| `\"receiver_share\"`", "`\"none\"`", "What a receive-rate report carries. `none`: the receive rate (dlcp.md §3.2.1). `receiver_share`: also the receiving host's fair share, its link rate over the hosts whose data reached it in the last 1.5 periods; the sender holds its rate at or below `dlcp_share_headroom` × that share — a **deviation** ([reproductions.md](notes/reproductions-dlcp.md#the-receiver-informed-rate-dlcp-share)). Simulator only: the socket runtime runs DLCP without it."]),
        Key::hidden("dlcp_share_headroom", KeyType::F64, Value::Float(DEFAULT_SHARE_HEADROOM), ["float > 0", "`1.5`", "With `dlcp_rate_hint = \"receiver_share\"`: the sender's cap in reported shares. Above 1 the receiver's queue can still form, where DLCP's layer priority acts."]),
        Key::hidden("dlcp_start_rate_frac", KeyType::F64, Value::Float(1.0), ["float in (0, 1]", "`1.0`", "The rate a transfer without a carried rate state starts at, as a share of line rate. `1.0`: line rate (dlcp.md §3.2.1). Below 1 the transfer starts in congestion avoidance at that rate and grows additively from there — a **deviation**, e.g. the fair share `1/(N−1)` of an N-worker PS incast, so a tensor does not send `line rate × rate_period_us` before its first feedback. With `dlcp_rate_state = \"pair\"` only a pair's first transfer uses it."]),
        Key::optional("dlcp_rate_restart_us", KeyType::F64, true, ["float > 0 (µs), or absent", "absent", "With a carried rate state (`dlcp_rate_state` other than `\"tensor\"`): a host pair that has sent nothing for longer than this starts its next transfer fresh, at the start rate, as dlcp.md starts every tensor, instead of at the rate it had learned before going idle — a **deviation**, after RFC 5681 §4.1 (a TCP connection idle for longer than its RTO restarts its window). The pair's activity is noted every rate period while it sends. Absent: the state never expires. The `dlcp-strict` series uses 1000 (DLCP's `ctrl_rto_us`)."]),
        Key::hidden("dlcp_resend_at_line_rate", KeyType::Bool, Value::Bool(true), ["bool", "`true`", "A retransmission request puts the rate back to line rate, once per resend round (dlcp.md §3.2.1, \"line rate start\"). `false` keeps the rate the control had reached — a **deviation**."]),
        Key::hidden("dlcp_retx_quiet_us", KeyType::F64, Value::Float(0.0), ["float ≥ 0", "`0`", "After a STOP, the receiver requests what is missing only once no data has arrived for this long. `0` requests at once, as dlcp.md §3.2.1 reads; a positive value is a **deviation** that keeps a STOP, which travels on the top control queue and overtakes the transfer's data still queued in the network, from asking for data about to arrive."]),
        Key::hidden("dlcp_stop_behind_data", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "Send STOP in the transfer's own data queue, ECN-capable (so selective dropping spares it), instead of the control queue: every switch port then forwards it after the data queued before it. A **deviation** (dlcp.md sends control at the top priority); sprayed packets on other paths can still arrive after it."]),
    ],
    check,
};

/// The DLCP settings `cfg` describes; each transfer adds its loss bound, priority, element
/// size and line rate.
pub fn config(cfg: &Config) -> DlcpConfig {
    let (c, v) = (&cfg.common, &cfg.values);
    DlcpConfig {
        mss: c.mss,
        header_bytes: c.header_bytes,
        ctrl_bytes: c.ack_bytes,
        loss_bound: c.loss_bound,
        rate_period: from_us(v.f64("rate_period_us")),
        delta: v.f64("rate_delta"),
        additive_increase_frac: v.f64("rate_increase_frac"),
        ctrl_priority: 0,
        importance: Importance::Fraction { fraction: v.f64("important_fraction"), seed: c.seed },
        ctrl_rto: from_us(v.f64("ctrl_rto_us")),
        resend_at_line_rate: v.bool("dlcp_resend_at_line_rate"),
        retx_quiet: from_us(v.f64("dlcp_retx_quiet_us")),
        stop_behind_data: v.bool("dlcp_stop_behind_data"),
        start_rate_frac: v.f64("dlcp_start_rate_frac"),
        rate_restart: v.opt_f64("dlcp_rate_restart_us").map(from_us),
        rate_hint: match v.str("dlcp_rate_hint") {
            "receiver_share" => RateHint::ReceiverShare,
            _ => RateHint::None,
        },
        share_headroom: v.f64("dlcp_share_headroom"),
        ..DlcpConfig::default()
    }
}

/// The key a [`DlcpConfig::validate`] field is written as.
fn key_of(field: &str) -> &'static str {
    match field {
        "mss" | "elem_bytes" => "mss_bytes",
        "loss_bound" => "loss_bound",
        "rate_period" => "rate_period_us",
        "delta" => "rate_delta",
        "additive_increase_frac" => "rate_increase_frac",
        "importance" => "important_fraction",
        "start_rate_frac" => "dlcp_start_rate_frac",
        "rate_restart" => "dlcp_rate_restart_us",
        "share_headroom" => "dlcp_share_headroom",
        "ctrl_rto" => "ctrl_rto_us",
        _ => "",
    }
}

fn check(cfg: &Config) -> Result<(), ConfigError> {
    let v = &cfg.values;
    crate::transport::spec::check_positive_number("rate_period_us", v.f64("rate_period_us"))?;
    config(cfg).validate().map_err(|e| {
        let key = key_of(&e.field);
        e.renamed(key)
    })?;
    let quiet = v.f64("dlcp_retx_quiet_us");
    if !(quiet >= 0.0 && quiet.is_finite()) {
        return Err(ConfigError::new(
            "dlcp_retx_quiet_us",
            format!("must be a non-negative number of µs (got {quiet})"),
        ));
    }
    Ok(())
}

/// Where DLCP's rate-control state lives (`dlcp_rate_state`): per transfer (dlcp.md), or
/// per host pair and how the pair's transfers with data split its rate (deviations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RateState {
    /// Every transfer starts afresh.
    #[default]
    Tensor,
    /// A transfer starts from the state the pair's last one left.
    Pair,
    /// As `Pair`, and the pair's transfers with data split its rate evenly.
    PairShared,
    /// As `PairShared`, split only with the transfers at the same data priority or above.
    PairPriority,
    /// As `PairShared`, strict priority inside the pair's rate.
    PairStrict,
}

impl RateState {
    fn named(name: &str) -> RateState {
        match name {
            "pair" => RateState::Pair,
            "pair_shared" => RateState::PairShared,
            "pair_priority" => RateState::PairPriority,
            "pair_strict" => RateState::PairStrict,
            _ => RateState::Tensor,
        }
    }
}

/// DLCP's builder. What transfers share lives in their hosts' [`HostState`]: per host
/// pair at the sending host with a [`RateState`] other than `Tensor` (the rate state, the
/// pair's senders with data), per receiving host with [`RateHint::ReceiverShare`] (its
/// load).
pub struct DlcpBuild {
    cfg: DlcpConfig,
    state: RateState,
    layer_importance: bool,
}

impl DlcpBuild {
    /// A builder of transfers under `cfg`, keeping rate state as `state` says.
    pub fn new(cfg: DlcpConfig, state: RateState) -> DlcpBuild {
        DlcpBuild { cfg, state, layer_importance: false }
    }

    fn config(&self, t: &Transfer) -> DlcpConfig {
        let importance = match (t.important_fraction, self.cfg.importance) {
            (None, configured) => configured,
            (Some(fraction), Importance::Fraction { seed, .. }) => Importance::Fraction { fraction, seed },
            (Some(fraction), _) => Importance::Fraction { fraction, seed: 0 },
        };
        DlcpConfig {
            line_rate_bps: t.line_rate_bps,
            loss_bound: t.loss_bound,
            data_priority: t.priority,
            elem_bytes: t.elem_bytes,
            importance,
            ..self.cfg
        }
    }
}

impl Build for DlcpBuild {
    fn build(&self, t: &Transfer, now: Time, hosts: &mut Hosts) -> Pair {
        let receiver = self.receiver(t, hosts.host(t.dst)).expect("places payload");
        (self.sender(t, now, hosts.host(t.src)).expect("places payload"), receiver)
    }

    fn sender(&self, t: &Transfer, now: Time, host: &mut HostState) -> Option<Box<dyn Sender>> {
        if self.state == RateState::Tensor {
            return Some(Box::new(DlcpSender::new(self.config(t), t.flow, t.src, t.dst, t.bytes, now)));
        }
        let warm = host.dlcp_rate(t.dst).and_then(|c| c.at(now, self.cfg.rate_restart));
        let s = DlcpSender::with_rate(self.config(t), t.flow, t.src, t.dst, t.bytes, now, warm);
        let s = s.leaving_rate();
        Some(match self.state {
            RateState::PairStrict => Box::new(s.pacing_strictly()),
            RateState::PairPriority => Box::new(s.sharing_rate(t.priority)),
            RateState::PairShared => Box::new(s.sharing_rate(0)),
            _ => Box::new(s),
        })
    }

    fn receiver(&self, t: &Transfer, host: &mut HostState) -> Option<Box<dyn Receiver>> {
        let r = DlcpReceiver::new(self.config(t), t.flow, t.dst, t.src, t.bytes);
        Some(if self.cfg.rate_hint == RateHint::ReceiverShare {
            // The host's link rate: host links are equal in every network gradwire drives,
            // so the transfer's (its sender's) line rate is the receiver's.
            host.load_mut(t.line_rate_bps);
            Box::new(r.sharing_host_load())
        } else {
            Box::new(r)
        })
    }

    fn data_priority(&self) -> u8 {
        self.cfg.data_priority
    }

    fn wants_layer_importance(&self) -> bool {
        self.layer_importance
    }
}

static SETS: [&KeySet; 2] = [&crate::transport::ctrl::KEYS, &KEYS];

/// DLCP in the registry.
pub struct Dlcp;

impl TransportSpec for Dlcp {
    fn info(&self) -> Info {
        Info { places_payload: true, priority_by_layer: true, wire_code: Some(0), ..Info::new("dlcp", "DLCP, the bounded-loss transport (DLCP §3.2.1: per-packet ACKs, a transfer completes once at most `loss_bound` of it is missing, minimal rate control; data in its layer's queue) — pair it with `switch.policy = \"dlcp\"` and `routing.mode = \"spray\"` for the full design.", &SETS) }
    }

    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        let mut b = DlcpBuild::new(config(cfg), RateState::named(cfg.values.str("dlcp_rate_state")));
        b.layer_importance = cfg.values.str("importance") == "median_profile";
        Ok(Box::new(b))
    }

    fn runtime(&self, k: &RuntimeKnobs) -> Result<Box<dyn Build>, ConfigError> {
        let cfg = DlcpConfig {
            mss: k.mss,
            header_bytes: k.header_bytes,
            ctrl_bytes: k.header_bytes,
            line_rate_bps: k.line_rate_bps,
            ctrl_rto: k.ctrl_rto,
            rate_period: k.rate_period,
            retx_quiet: k.retx_quiet,
            pacing: k.pacing,
            ..DlcpConfig::default()
        };
        cfg.validate()?;
        Ok(Box::new(DlcpBuild::new(cfg, RateState::Tensor)))
    }
}

impl Sender for DlcpSender {
    fn released(&self) -> bool {
        self.finish_received()
    }

    fn is_closed(&self) -> bool {
        self.is_done()
    }

    fn set_importance_mask(&mut self, mask: Vec<bool>) {
        DlcpSender::set_importance_mask(self, mask)
    }

    fn pacing_rate_bps(&self) -> u64 {
        self.rate_bps()
    }
}

reassembling_receiver!(DlcpReceiver {
    fn post(&mut self, now: Time) {
        DlcpReceiver::post(self, now)
    }
});
