//! LTP in the registry: its keys, how the keys become an [`LtpConfig`], how it runs in the
//! socket runtime, and its builder (each link's LT threshold and, as asked, its path model
//! or measured RTprop, carried across transfers).

use std::ops::Range;

use super::{LtThreshold, LtpConfig, LtpReceiver, LtpSender};
use crate::cc::BdpConfig;
use crate::packet::Packet;
use crate::time::{from_us, Time, MS};
use crate::transport::pacer::Pacing;
use crate::transport::roles::{reassembling_receiver, Receiver, Sender};
use crate::transport::spec::{
    check_positive_number, Build, Config, ConfigError, Info, Key, KeySet, KeyType, Pair, RuntimeKnobs, Transfer,
    TransportSpec, Value,
};
use crate::transport::{HostState, Hosts};

/// LTP's keys.
pub static KEYS: KeySet = KeySet {
    name: "ltp",
    keys: &[
        Key::new("ltp_c_ms", KeyType::F64, Value::Float(30.0), ["float > 0, ms", "`30.0`", "Deadline slack `C`: a transfer closes at the latest `max(LT threshold) + C` after it starts (30 ms in a datacenter, 100 ms in a WAN)."]),
        Key::hidden("ltp_carry_path", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "`true` starts a transfer from the path model (RTprop, BtlBw) the last transfer between the same two hosts measured: no Startup, opening with BBR's probing phase (gain 1.25), its RTO from the measured RTprop, as a connection's BBR state persists (a deviation: ltp.md §IV-A makes each round a separate flow). At 10 ms RTT a 1.25 MB ring step takes 24 ms instead of 75 ms (`cargo test -p gradwire-sim --test transports ltp_ring`); in `gradwire reproduce ltp-bst --quick` VGG16's median BST at 1 % loss is 259 ms instead of 222 ms (eight warm senders open at 1.25× their share into one port)."]),
        Key::new("ltp_ack_aggregation", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "`true`: after Startup the BDP window also covers ACKs that come in bursts, the bytes acknowledged beyond BtlBw's pace (Linux BBR's extra_acked, over 5–10 rounds, at most 100 ms of BtlBw), as the socket runtime runs LTP (a software host acknowledges in batches) and `gradwire crosscheck`'s twins do. `false` is ltp.md's window, `2 × BtlBw × RTprop`. In `gradwire reproduce ltp-bst`, `true` raises VGG16's median BST from 448 to 513 ms (0 loss; the PS incast compresses each worker's ACKs)."]),
    ],
    check,
};

/// The LTP settings `cfg` describes; each transfer adds its loss bound, tolerance,
/// priority, element size and first bottleneck estimate.
pub fn config(cfg: &Config) -> LtpConfig {
    let (c, v) = (&cfg.common, &cfg.values);
    LtpConfig {
        mss: c.mss,
        header_bytes: c.header_bytes,
        ack_bytes: c.ack_bytes,
        ctrl_bytes: c.ack_bytes,
        loss_bound: c.loss_bound,
        lt_c: from_us(v.f64("ltp_c_ms") * 1000.0),
        initial_rtprop: c.base_rtt,
        ctrl_rto: from_us(v.f64("ctrl_rto_us")),
        cc: BdpConfig { ack_aggregation: v.bool("ltp_ack_aggregation"), ..LtpConfig::default().cc },
        ..LtpConfig::default()
    }
}

fn check(cfg: &Config) -> Result<(), ConfigError> {
    check_positive_number("ltp_c_ms", cfg.values.f64("ltp_c_ms"))?;
    config(cfg).validate().map_err(|e| {
        let key = match e.field.as_str() {
            "mss" | "elem_bytes" => "mss_bytes",
            "loss_bound" => "loss_bound",
            "lt_c" => "ltp_c_ms",
            "initial_rtprop" => "base_rtt",
            "ctrl_rto" => "ctrl_rto_us",
            _ => "",
        };
        e.renamed(key)
    })
}

/// What an LTP link (sender host, receiver host) hands from one transfer to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LtpCarry {
    /// The LT threshold, per transfer size (ltp.md §III-B1).
    pub lt: bool,
    /// The sender's path model: the next transfer skips Startup (`ltp_carry_path`).
    pub path: bool,
    /// Without `path`: the last measured RTprop seeds the next transfer's estimate (its RTO
    /// and its pacing before the first sample), as Linux seeds a new connection's RTO from
    /// `tcp_metrics`; for a driver that does not know the path's RTT (the runtime).
    pub rtt: bool,
}

/// LTP's builder. What a link carries lives in its hosts' [`HostState`]: the path model
/// at the sending host, the LT thresholds at the receiving one.
pub struct LtpBuild {
    cfg: LtpConfig,
    carry: LtpCarry,
}

impl LtpBuild {
    /// A builder of transfers under `cfg`, each link carrying what `carry` says.
    pub fn new(cfg: LtpConfig, carry: LtpCarry) -> LtpBuild {
        LtpBuild { cfg, carry }
    }

    fn config(&self, t: &Transfer) -> LtpConfig {
        LtpConfig {
            initial_btlbw_bps: t.line_rate_bps,
            loss_bound: t.loss_bound,
            loss_tolerant: t.loss_tolerant,
            data_priority: t.priority,
            elem_bytes: t.elem_bytes,
            ..self.cfg.clone()
        }
    }
}

impl Build for LtpBuild {
    fn build(&self, t: &Transfer, now: Time, hosts: &mut Hosts) -> Pair {
        let receiver = self.receiver(t, hosts.host(t.dst)).expect("places payload");
        (self.sender(t, now, hosts.host(t.src)).expect("places payload"), receiver)
    }

    fn sender(&self, t: &Transfer, now: Time, host: &mut HostState) -> Option<Box<dyn Sender>> {
        let (cfg, (f, src, dst, bytes)) = (self.config(t), (t.flow, t.src, t.dst, t.bytes));
        if !(self.carry.path || self.carry.rtt) {
            return Some(Box::new(LtpSender::new(cfg, f, src, dst, bytes, now)));
        }
        let s = match host.ltp_path(dst) {
            Some(p) if self.carry.path => LtpSender::with_path(cfg, f, src, dst, bytes, now, p),
            Some(p) => LtpSender::new(LtpConfig { initial_rtprop: p.rtprop, ..cfg }, f, src, dst, bytes, now),
            None => LtpSender::new(cfg, f, src, dst, bytes, now),
        };
        Some(Box::new(s.leaving_path()))
    }

    fn receiver(&self, t: &Transfer, host: &mut HostState) -> Option<Box<dyn Receiver>> {
        if !self.carry.lt {
            return Some(Box::new(LtpReceiver::new(self.config(t), t.flow, t.dst, t.src, t.bytes)));
        }
        let cfg = self.config(t);
        let carried = host.peer(t.src).and_then(|p| p.ltp_lt.get(&t.bytes)).cloned();
        let state = carried.unwrap_or_else(|| LtThreshold::from_config(&cfg));
        Some(Box::new(LtpReceiver::with_lt_state(cfg, t.flow, t.dst, t.src, t.bytes, state).leaving_lt()))
    }

    fn data_priority(&self) -> u8 {
        self.cfg.data_priority
    }
}

static SETS: [&KeySet; 2] = [&crate::transport::ctrl::KEYS, &KEYS];

/// LTP in the registry.
pub struct Ltp;

impl TransportSpec for Ltp {
    fn info(&self) -> Info {
        Info { places_payload: true, wire_code: Some(1), ack_clocked: true, ..Info::new("ltp", "LTP, the loss-tolerant transport (LTP §III–IV: per-packet ACKs, loss after 3 later ACKs, Early Close once the LT threshold has passed and `1 − loss_bound` is in, deadline `max(LT) + ltp_c_ms`, BDP congestion control) — PS pushes are lossy, PS pulls fully reliable.", &SETS) }
    }

    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        // each link's LT threshold lives across transfers (ltp.md §III-B1); the simulator
        // knows the path's RTT (`initial_rtprop` is the topology's base RTT)
        let path = cfg.values.bool("ltp_carry_path");
        Ok(Box::new(LtpBuild::new(config(cfg), LtpCarry { lt: true, path, rtt: false })))
    }

    fn runtime(&self, k: &RuntimeKnobs) -> Result<Box<dyn Build>, ConfigError> {
        let cfg = LtpConfig {
            mss: k.mss,
            header_bytes: k.header_bytes,
            ack_bytes: k.header_bytes,
            ctrl_bytes: k.header_bytes,
            initial_btlbw_bps: k.line_rate_bps,
            ctrl_rto: k.ctrl_rto,
            min_rto: 5 * MS,
            // The paper's hard deadline closes with whatever arrived, short of the bound if
            // loss is heavy (5 % loss: 11 % missing under a 2 % bound). A runtime call
            // promises its loss bound, so the receiver closes early only once the bound is
            // met: no deadline (an hour is never reached; the stall timeout comes first).
            lt_c: 3600 * 1000 * MS,
            // LTP's window bounds its bursts; slots missed in a gap are not made up.
            pacing: Pacing { burst: k.pacing.burst, catch_up: 0 },
            // A software host reads and acknowledges datagrams in batches: without BBR's
            // allowance for ACK aggregation, 2 × BDP of a 20 µs path (the 6 KB floor) idles
            // the sender between batches (emulated 20 µs ring: 1.8× its twin, 1.1× with it).
            cc: BdpConfig { ack_aggregation: true, ..BdpConfig::default() },
            ..LtpConfig::default()
        };
        cfg.validate()?;
        // The runtime does not know the path's RTT: each transfer to a peer starts from the
        // RTprop the last one measured. LT thresholds stay per transfer: carried, they made
        // the emulated 10 ms-RTT ring 15-22 s an iteration (docs/notes/emulation-measurements.md).
        Ok(Box::new(LtpBuild::new(cfg, LtpCarry { rtt: true, ..LtpCarry::default() })))
    }
}

reassembling_receiver!(LtpReceiver {
    fn needs_close_notice(&self) -> bool {
        true
    }
});

impl Sender for LtpSender {
    fn released(&self) -> bool {
        self.stop_received()
    }

    fn is_closed(&self) -> bool {
        self.is_done()
    }

    fn pacing_rate_bps(&self) -> u64 {
        self.congestion_control().pacing_bps()
    }
}
