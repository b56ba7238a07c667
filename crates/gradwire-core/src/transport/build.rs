//! Building a transfer: one [`Kind`], one [`Params`], one [`Builder`] for every driver.
//!
//! A driver (the simulator, the socket runtime) describes its transport once as
//! [`Params`], checks it with [`Params::validate`] (its loader forwards the error), and
//! asks a [`Builder`] for the endpoints of each [`Transfer`]. This is the one place that
//! names concrete transports; drivers see `dyn Endpoint`, [`Sender`] and [`Receiver`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use super::dlcp::{CarriedRate, DlcpConfig, DlcpReceiver, DlcpSender, HostLoad, Importance, PairSenders, RateHint};
use super::ltp::{LtThreshold, LtpConfig, LtpReceiver, LtpSender};
use super::pfabric::{PFabricConfig, PFabricReceiver, PFabricSender};
use super::pias::{PiasConfig, PiasSender, WEB_SEARCH_THRESHOLDS};
use super::roles::{Receiver, Sender};
use super::shared::{check_positive, Carried};
use super::tcp::{CongestionControl, TcpConfig, TcpConnState, TcpReceiver, TcpSender};
use super::Endpoint;
use crate::packet::{FlowId, HostId};
use crate::time::Time;

/// `ALL`, `NAMES`, `name`, `from_name`, `Display` and `FromStr` (whose error names the
/// `$what` and lists the known names) for an enum whose variants have names in
/// configuration files (a transport kind, a collective algorithm).
macro_rules! named {
    ($ty:ident $what:literal { $($variant:ident = $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every variant, in the order of `NAMES`.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];
            /// The names configuration files and APIs use.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The name configuration files use.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }

            /// The variant called `name`, if any.
            pub fn from_name(name: &str) -> Option<$ty> {
                match name {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<$ty, String> {
                $ty::from_name(s).ok_or_else(|| {
                    let names: Vec<String> = $ty::NAMES.iter().map(|n| format!("{n:?}")).collect();
                    format!("unknown {} {s:?}: expected one of {}", $what, names.join(", "))
                })
            }
        }
    };
}
pub(crate) use named;

/// Which transport carries the transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// TCP NewReno (a baseline).
    NewReno,
    /// DCTCP (a baseline).
    Dctcp,
    /// DLCP (dlcp.md §3.2.1): zero-RTT start, paced unreliable data, reliable control,
    /// bounded-loss resend rounds; data in its layer's queue.
    Dlcp,
    /// PIAS: DCTCP with sender-side multi-level feedback queue tags (a baseline).
    Pias,
    /// pFabric: line-rate start, remaining-size ranks (a baseline).
    PFabric,
    /// LTP (ltp.md §III–IV): per-packet ACKs, BDP congestion control, Early Close.
    Ltp,
}

named!(Kind "transport" { NewReno = "newreno", Dctcp = "dctcp", Dlcp = "dlcp", Pias = "pias", PFabric = "pfabric", Ltp = "ltp" });

impl Kind {
    /// The receiver places payload ([`Builder::sender`] and [`Builder::receiver`] build
    /// it): DLCP and LTP. The baselines only count bytes.
    pub fn places_payload(self) -> bool {
        matches!(self, Kind::Dlcp | Kind::Ltp)
    }

    /// Data goes in its layer's queue (DLCP §3.2.2), not in one configured queue.
    pub fn priority_by_layer(self) -> bool {
        self == Kind::Dlcp
    }
}

/// A parameter a loader should refuse: which one (a [`Params`] path such as
/// `dlcp.loss_bound`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The parameter, as a path into [`Params`].
    pub field: String,
    /// What is wrong, with the value given.
    pub message: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { field: field.into(), message: message.into() }
    }

    /// The same error one level down in a larger configuration (`"dlcp"` + `loss_bound`).
    pub fn within(self, prefix: &str) -> ConfigError {
        ConfigError { field: format!("{prefix}.{}", self.field), message: self.message }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// State a transfer hands to the next one between the same hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carry {
    /// DLCP's rate-control state, per (sender host, receiver host): a deviation, dlcp.md
    /// starts every tensor at line rate.
    pub dlcp_rate: bool,
    /// With `dlcp_rate`: the transfers of a host pair that have data to send split the
    /// pair's rate evenly instead of each sending at it (a deviation: the pair, not the
    /// tensor, is then the unit of rate control).
    pub dlcp_rate_shared: bool,
    /// With `dlcp_rate_shared`: a transfer splits the pair's rate only with the pair's
    /// transfers at its data priority or a higher one (a deviation: the most important
    /// tensor of a pair paces at the pair's whole rate).
    pub dlcp_rate_by_priority: bool,
    /// With `dlcp_rate_shared`, instead of `dlcp_rate_by_priority`: strict priority inside
    /// the pair's rate (a deviation). The pair's transfers at the highest data priority it
    /// has sending split its rate, less one minimal pace (one packet per rate period) for
    /// each transfer below them, which paces at that minimal pace while any transfer ahead
    /// of it has data, so the pair never paces above its rate; a transfer that stops
    /// sending wakes the others ([`super::EndpointEvent::Wake`]).
    pub dlcp_rate_strict: bool,
    /// LTP's LT threshold, per (sender host, receiver host, transfer size): each link keeps
    /// its own across transfers (ltp.md §III-B1), and a measured duration is only reused
    /// for a transfer of the same size (the same layer next iteration).
    pub ltp_threshold: bool,
    /// NewReno's and DCTCP's window, RTT and congestion state, per (sender host, receiver
    /// host): the pair's flows ride one persistent connection, as Gloo's and NCCL's
    /// sockets do, restarting from the initial window after an idle RTO as Linux does.
    pub tcp_connection: bool,
}

/// Everything but the transfer itself: the transport and its settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Which transport.
    pub kind: Kind,
    /// NewReno, DCTCP and PIAS (`cc` follows `kind`); pFabric takes its sizes from it.
    pub tcp: TcpConfig,
    /// DCTCP's and PIAS's EWMA gain, `(0, 1]`.
    pub dctcp_g: f64,
    /// NewReno answers ECN marks as RFC 3168 does (ECT data, cwnd halved at most once per
    /// window on ECE); NewReno only.
    pub newreno_ecn: bool,
    /// The NewReno kind grows its window as CUBIC (RFC 9438) instead; NewReno only.
    pub tcp_cubic: bool,
    /// PIAS demotion thresholds, bytes, strictly increasing, at most 7 (empty: PIAS's
    /// web-search set).
    pub pias_thresholds: Vec<u64>,
    /// pFabric's fixed RTO (`None`: 3 × `base_rtt`).
    pub pfabric_rto: Option<Time>,
    /// Propagation round trip of the widest path (pFabric's window and RTO).
    pub base_rtt: Time,
    /// DLCP; `loss_bound`, `data_priority`, `elem_bytes` and `line_rate_bps` come from each
    /// [`Transfer`].
    pub dlcp: DlcpConfig,
    /// LTP; `loss_bound`, `loss_tolerant`, `data_priority`, `elem_bytes` and
    /// `initial_btlbw_bps` come from each [`Transfer`].
    pub ltp: LtpConfig,
    /// What transfers between the same hosts hand on.
    pub carry: Carry,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            kind: Kind::Dlcp,
            tcp: TcpConfig::default(),
            dctcp_g: 1.0 / 16.0,
            newreno_ecn: false,
            tcp_cubic: false,
            pias_thresholds: Vec::new(),
            pfabric_rto: None,
            base_rtt: 0,
            dlcp: DlcpConfig::default(),
            ltp: LtpConfig::default(),
            carry: Carry::default(),
        }
    }
}

impl Params {
    /// The first parameter out of range, whatever the kind (a configuration is refused
    /// as a whole, not only the part its current kind reads).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.tcp;
        for (field, v) in [("tcp.mss", t.mss), ("tcp.init_cwnd_packets", t.init_cwnd_packets)] {
            if v == 0 {
                return Err(ConfigError::new(field, "must be positive (got 0)"));
            }
        }
        if t.dupack_threshold == 0 {
            return Err(ConfigError::new("tcp.dupack_threshold", "must be positive (got 0)"));
        }
        check_positive("tcp.rto_min", t.rto_min)?;
        if t.delayed_ack.count == 0 {
            return Err(ConfigError::new("tcp.delayed_ack.count", "must be positive (got 0)"));
        }
        if t.delayed_ack.count > 1 {
            check_positive("tcp.delayed_ack.timeout", t.delayed_ack.timeout)?;
        }
        if t.rack_tlp && !t.sack {
            return Err(ConfigError::new("tcp.rack_tlp", "needs SACK (RACK reads the SACK scoreboard)"));
        }
        if self.tcp_cubic && self.newreno_ecn {
            return Err(ConfigError::new("tcp_cubic", "CUBIC here is loss-based: not with newreno_ecn"));
        }
        check_positive("tcp.rto_max", t.rto_max)?;
        check_positive("tcp.rto_initial", t.rto_initial)?;
        if !(self.dctcp_g > 0.0 && self.dctcp_g <= 1.0) {
            return Err(ConfigError::new("dctcp_g", format!("must be in (0, 1] (got {})", self.dctcp_g)));
        }
        let th = &self.pias_thresholds;
        if th.len() > WEB_SEARCH_THRESHOLDS.len() {
            return Err(ConfigError::new("pias_thresholds", format!("at most 7 thresholds (got {})", th.len())));
        }
        if th.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ConfigError::new("pias_thresholds", "must be strictly increasing"));
        }
        if let Some(rto) = self.pfabric_rto {
            check_positive("pfabric_rto", rto)?;
        }
        self.dlcp.validate().map_err(|e| e.within("dlcp"))?;
        self.ltp.validate().map_err(|e| e.within("ltp"))
    }

    /// The queue of a transfer's data for kinds that do not pick it by layer.
    pub fn data_priority(&self) -> u8 {
        match self.kind {
            Kind::Dlcp => self.dlcp.data_priority,
            Kind::Ltp => self.ltp.data_priority,
            _ => self.tcp.priority,
        }
    }
}

/// One transfer: `bytes` from host `src` to host `dst`, named `flow` on the wire.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transfer {
    /// The flow id both ends stamp on their packets.
    pub flow: FlowId,
    /// Sending host.
    pub src: HostId,
    /// Receiving host.
    pub dst: HostId,
    /// Payload bytes.
    pub bytes: u64,
    /// Share that may be missing at completion, `[0, 1]` (DLCP, LTP).
    pub loss_bound: f64,
    /// LTP: the receiver may close early (Early Close); false for the reliable half of a
    /// collective (ltp.md §IV: lossy gather, reliable broadcast).
    pub loss_tolerant: bool,
    /// Queue of the data (DLCP, LTP; the baselines use their configured queue).
    pub priority: u8,
    /// Element size, never split across packets (DLCP, LTP).
    pub elem_bytes: u32,
    /// The sender's NIC rate, bit/s: DLCP's start rate, LTP's first bottleneck estimate,
    /// pFabric's window.
    pub line_rate_bps: u64,
    /// DLCP: the share of this transfer's segments tagged important (`Some`: a seeded
    /// choice at this share, e.g. the median rule's measured share for the transfer's
    /// layer); `None`: the configuration's [`Importance`](super::dlcp::Importance).
    pub important_fraction: Option<f64>,
}

/// The two ends of a transfer, for a driver that runs both (the simulator).
pub type Pair = (Box<dyn Endpoint>, Box<dyn Endpoint>);

/// One cell per link: the builder hands it to each of the link's endpoints in turn.
type Links<K, T> = Mutex<HashMap<K, Carried<T>>>;

fn cell<K: std::hash::Hash + Eq, T>(links: &Links<K, T>, key: K) -> Carried<T> {
    links.lock().expect("not poisoned").entry(key).or_default().clone()
}

/// Builds the endpoints of transfers under one [`Params`], and keeps what transfers
/// between the same hosts hand on ([`Carry`]).
pub struct Builder {
    params: Params,
    /// `params.tcp` with the kind's congestion control.
    tcp: TcpConfig,
    /// The same, shared by every TCP sender this builder makes.
    tcp_shared: Arc<TcpConfig>,
    pias: PiasConfig,
    rates: Links<(HostId, HostId), CarriedRate>,
    /// Per host pair (and data priority, with `Carry::dlcp_rate_by_priority`; else 0), its
    /// DLCP senders with data to send (`Carry::dlcp_rate_shared`).
    sending: Mutex<HashMap<(HostId, HostId, u8), Arc<AtomicU32>>>,
    /// Per host pair, its DLCP senders with data and their priorities
    /// (`Carry::dlcp_rate_strict`).
    strict: Mutex<HashMap<(HostId, HostId), Arc<PairSenders>>>,
    /// Per receiving host, the hosts sending DLCP data into it (`RateHint::ReceiverShare`).
    loads: Mutex<HashMap<HostId, Arc<HostLoad>>>,
    lt: Links<(HostId, HostId, u64), LtThreshold>,
    tcp_conns: Links<(HostId, HostId), TcpConnState>,
}

impl Builder {
    /// A builder for `params`, refused if [`Params::validate`] fails.
    pub fn new(params: Params) -> Result<Builder, ConfigError> {
        params.validate()?;
        let cc = match params.kind {
            Kind::Dctcp | Kind::Pias => CongestionControl::Dctcp { g: params.dctcp_g },
            Kind::NewReno if params.newreno_ecn => CongestionControl::NewRenoEcn,
            Kind::NewReno if params.tcp_cubic => CongestionControl::Cubic,
            _ => CongestionControl::NewReno,
        };
        let tcp = TcpConfig { cc, ..params.tcp };
        let thresholds: &[u64] =
            if params.pias_thresholds.is_empty() { &WEB_SEARCH_THRESHOLDS } else { &params.pias_thresholds };
        Ok(Builder {
            pias: PiasConfig::new(tcp, thresholds),
            tcp,
            tcp_shared: Arc::new(tcp),
            params,
            rates: Default::default(),
            sending: Default::default(),
            strict: Default::default(),
            loads: Default::default(),
            lt: Default::default(),
            tcp_conns: Default::default(),
        })
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// LTP's carried LT thresholds, per (sender host, receiver host, transfer size).
    pub fn lt_thresholds(&self) -> HashMap<(HostId, HostId, u64), LtThreshold> {
        let links = self.lt.lock().expect("not poisoned");
        links.iter().filter_map(|(&k, c)| Some((k, c.lock().expect("not poisoned").clone()?))).collect()
    }

    /// Forgets every carried state.
    pub fn forget(&self) {
        self.lt.lock().expect("not poisoned").clear();
        self.rates.lock().expect("not poisoned").clear();
        self.sending.lock().expect("not poisoned").clear();
        self.strict.lock().expect("not poisoned").clear();
        self.loads.lock().expect("not poisoned").clear();
    }

    fn dlcp(&self, t: &Transfer) -> DlcpConfig {
        let importance = match (t.important_fraction, self.params.dlcp.importance) {
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
            ..self.params.dlcp
        }
    }

    fn ltp(&self, t: &Transfer) -> LtpConfig {
        LtpConfig {
            initial_btlbw_bps: t.line_rate_bps,
            loss_bound: t.loss_bound,
            loss_tolerant: t.loss_tolerant,
            data_priority: t.priority,
            elem_bytes: t.elem_bytes,
            ..self.params.ltp.clone()
        }
    }

    fn pfabric(&self, t: &Transfer) -> PFabricConfig {
        let mut cfg = PFabricConfig::for_link(t.line_rate_bps, self.params.base_rtt);
        cfg.mss = self.tcp.mss;
        cfg.header_bytes = self.tcp.header_bytes;
        cfg.ack_bytes = self.tcp.ack_bytes;
        cfg.rto = self.params.pfabric_rto.unwrap_or(cfg.rto);
        cfg
    }

    /// The sending end of `t`, starting at `now`; `None` for a kind whose receiver does not
    /// place payload ([`Kind::places_payload`]).
    pub fn sender(&self, t: &Transfer, now: Time) -> Option<Box<dyn Sender>> {
        Some(match self.params.kind {
            Kind::Dlcp if self.params.carry.dlcp_rate => {
                let rate = cell(&self.rates, (t.src, t.dst));
                let warm = rate.lock().expect("not poisoned").and_then(|c| c.at(now, self.params.dlcp.rate_restart));
                let s = DlcpSender::with_rate(self.dlcp(t), t.flow, t.src, t.dst, t.bytes, now, warm);
                let s = s.leaving_rate_in(rate);
                if self.params.carry.dlcp_rate_shared && self.params.carry.dlcp_rate_strict {
                    let mut pairs = self.strict.lock().expect("not poisoned");
                    let pair = pairs.entry((t.src, t.dst)).or_default().clone();
                    Box::new(s.pacing_strictly_in(pair))
                } else if self.params.carry.dlcp_rate_shared {
                    let mut counts = self.sending.lock().expect("not poisoned");
                    let mut count = |p: u8| counts.entry((t.src, t.dst, p)).or_default().clone();
                    if self.params.carry.dlcp_rate_by_priority {
                        let ahead = (0..t.priority).map(&mut count).collect();
                        Box::new(s.sharing_rate_with(count(t.priority)).sharing_rate_ahead_of(ahead))
                    } else {
                        Box::new(s.sharing_rate_with(count(0)))
                    }
                } else {
                    Box::new(s)
                }
            }
            Kind::Dlcp => Box::new(DlcpSender::new(self.dlcp(t), t.flow, t.src, t.dst, t.bytes, now)),
            Kind::Ltp => Box::new(LtpSender::new(self.ltp(t), t.flow, t.src, t.dst, t.bytes, now)),
            _ => return None,
        })
    }

    /// The receiving end of `t`; `None` for a kind whose receiver does not place payload.
    pub fn receiver(&self, t: &Transfer) -> Option<Box<dyn Receiver>> {
        Some(match self.params.kind {
            Kind::Dlcp => {
                let r = DlcpReceiver::new(self.dlcp(t), t.flow, t.dst, t.src, t.bytes);
                if self.params.dlcp.rate_hint == RateHint::ReceiverShare {
                    // The host's link rate: host links are equal in every network gradwire
                    // drives, so the transfer's (its sender's) line rate is the receiver's.
                    let mut loads = self.loads.lock().expect("not poisoned");
                    let load = loads.entry(t.dst).or_insert_with(|| Arc::new(HostLoad::new(t.line_rate_bps)));
                    Box::new(r.sharing_host_load(load.clone()))
                } else {
                    Box::new(r)
                }
            }
            Kind::Ltp if self.params.carry.ltp_threshold => {
                let (cfg, lt) = (self.ltp(t), cell(&self.lt, (t.src, t.dst, t.bytes)));
                let state = lt.lock().expect("not poisoned").clone().unwrap_or_else(|| LtThreshold::from_config(&cfg));
                Box::new(LtpReceiver::with_lt_state(cfg, t.flow, t.dst, t.src, t.bytes, state).leaving_lt_in(lt))
            }
            Kind::Ltp => Box::new(LtpReceiver::new(self.ltp(t), t.flow, t.dst, t.src, t.bytes)),
            _ => return None,
        })
    }

    /// Sender and receiver of `t`, whatever the kind.
    pub fn build(&self, t: &Transfer, now: Time) -> Pair {
        let (f, src, dst, bytes) = (t.flow, t.src, t.dst, t.bytes);
        match self.params.kind {
            Kind::NewReno | Kind::Dctcp => {
                let mut sender = TcpSender::with_config(self.tcp_shared.clone(), f, src, dst, bytes, now);
                if self.params.carry.tcp_connection {
                    sender = sender.on_connection(cell(&self.tcp_conns, (src, dst)), now);
                }
                (Box::new(sender), Box::new(TcpReceiver::new(self.tcp, f, dst, src, bytes)))
            }
            Kind::Pias => (
                Box::new(PiasSender::new(self.pias, f, src, dst, bytes, now)),
                Box::new(PiasSender::receiver(&self.pias, f, dst, src, bytes)),
            ),
            Kind::PFabric => {
                let cfg = self.pfabric(t);
                (
                    Box::new(PFabricSender::new(cfg, f, src, dst, bytes, now)),
                    Box::new(PFabricReceiver::new(cfg, f, dst, src, bytes)),
                )
            }
            Kind::Dlcp | Kind::Ltp => {
                let receiver = self.receiver(t).expect("places payload");
                (self.sender(t, now).expect("places payload"), receiver)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PacketKind;
    use crate::time::{serialization, US};
    use crate::transport::Pacing;
    use std::str::FromStr;

    fn transfer(bytes: u64) -> Transfer {
        Transfer {
            flow: 3,
            src: 0,
            dst: 1,
            bytes,
            loss_bound: 0.0,
            loss_tolerant: false,
            priority: 1,
            elem_bytes: 4,
            line_rate_bps: 10_000_000_000,
            important_fraction: None,
        }
    }

    /// Every variant's name parses back to it; an unknown name is refused with `what` and
    /// the known names.
    fn names_round_trip<T>(all: &[T], unknown: &str, what: &str)
    where
        T: Copy + std::fmt::Debug + std::fmt::Display + PartialEq + FromStr<Err = String>,
    {
        for &v in all {
            assert_eq!(v.to_string().parse::<T>(), Ok(v));
        }
        let e = unknown.parse::<T>().unwrap_err();
        assert!(e.starts_with(&format!("unknown {what} \"{unknown}\": expected one of ")), "{e}");
        assert!(all.iter().all(|v| e.contains(&format!("\"{v}\""))), "{e}");
    }

    #[test]
    fn named_enums_round_trip_and_unknown_names_list_the_known_ones() {
        names_round_trip(Kind::ALL, "tcp", "transport");
        names_round_trip(crate::collective::Algorithm::ALL, "butterfly", "algorithm");
    }

    #[test]
    fn validate_names_the_parameter() {
        let mut p = Params::default();
        assert_eq!(p.validate(), Ok(()));
        p.dlcp.loss_bound = 1.5;
        let e = p.validate().unwrap_err();
        assert_eq!(e.field, "dlcp.loss_bound");
        assert_eq!(e.to_string(), "dlcp.loss_bound 1.5 is outside [0, 1]");
        let p = Params { pias_thresholds: vec![10, 5], ..Params::default() };
        assert_eq!(p.validate().unwrap_err().field, "pias_thresholds");
        let p = Params { ltp: LtpConfig { lt_c: 0, ..LtpConfig::default() }, ..Params::default() };
        assert_eq!(Builder::new(p).err().map(|e| e.field), Some("ltp.lt_c".to_string()));
    }

    #[test]
    fn only_transports_that_place_payload_have_sender_and_receiver() {
        for &kind in Kind::ALL {
            let b = Builder::new(Params { kind, ..Params::default() }).unwrap();
            let t = transfer(10_000);
            assert_eq!(b.sender(&t, 0).is_some(), kind.places_payload(), "{kind}");
            assert_eq!(b.receiver(&t).is_some(), kind.places_payload(), "{kind}");
            // every kind's pair: the sender starts at once, toward the receiver
            let (mut s, _) = b.build(&t, 0);
            let p = s.poll_transmit(0).expect("something to send at the start");
            assert_eq!((p.flow, p.src, p.dst), (t.flow, t.src, t.dst), "{kind}");
        }
    }

    #[test]
    fn a_posted_dlcp_receiver_wants_data_before_the_senders_start() {
        let b = Builder::new(Params::default()).unwrap();
        let mut r = b.receiver(&transfer(10_000)).unwrap();
        assert!(!r.wants(0, 1440), "DLCP discards data before START");
        r.post(0);
        assert!(r.wants(0, 1440));
        assert_eq!(r.poll_transmit(0), None, "the local START's acknowledgement is dropped");
    }

    #[test]
    fn a_transfers_important_fraction_overrides_the_configured_importance() {
        // the share of ECN-capable data packets a sender of 1 000 segments emits
        let share = |importance, important_fraction| {
            let dlcp = DlcpConfig { importance, ..DlcpConfig::default() };
            let b = Builder::new(Params { dlcp, ..Params::default() }).unwrap();
            let t = Transfer { important_fraction, ..transfer(1440 * 1000) };
            let mut s = b.sender(&t, 0).unwrap();
            let (mut data, mut ect, mut now) = (0u32, 0u32, 0);
            while data < 1000 {
                match s.poll_transmit(now) {
                    Some(p) if p.kind == PacketKind::Data => {
                        data += 1;
                        ect += p.ecn.ect as u32;
                    }
                    Some(_) => {}
                    None => {
                        now = s.poll_timeout().unwrap();
                        s.handle_timeout(now);
                    }
                }
            }
            ect as f64 / data as f64
        };
        let half = Importance::Fraction { fraction: 0.5, seed: 7 };
        assert_eq!(share(Importance::All, None), 1.0);
        assert_eq!(share(Importance::All, Some(0.0)), 0.0);
        assert_eq!(share(half, Some(1.0)), 1.0);
        let s = share(half, Some(0.8));
        assert!((0.75..0.85).contains(&s), "{s}");
        let s = share(half, None);
        assert!((0.45..0.55).contains(&s), "{s}");
    }

    #[test]
    fn a_paced_sender_sends_a_burst_at_now_and_says_when_the_next_may_leave() {
        let burst = 20 * US;
        let dlcp = DlcpConfig { pacing: Pacing { burst, catch_up: 0 }, ..DlcpConfig::default() };
        let b = Builder::new(Params { dlcp, ..Params::default() }).unwrap();
        let t = transfer(10_000_000);
        let mut s = b.sender(&t, 0).unwrap();
        let mut data = 0;
        while let Some(p) = s.poll_transmit(0) {
            data += (p.kind == PacketKind::Data) as u64;
            assert_eq!(p.sent_at, 0, "`now` is now, not now + burst");
        }
        let slot = serialization(1440 + 60, t.line_rate_bps);
        // the slots starting at 0, slot, 2 slot ... up to the burst
        assert_eq!(data, burst / slot + 1);
        assert_eq!(s.poll_timeout(), Some(data * slot), "the next slot: a whole burst may then leave");
    }
}
