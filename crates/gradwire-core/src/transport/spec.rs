//! What a transport is to the drivers: a [`TransportSpec`] (its name, its configuration
//! keys, whether its receiver places payload, how it builds endpoints) listed once in
//! [`super::registry`]. A driver describes the transport it wants as a [`Config`] (a
//! [`Kind`], the [`Common`] settings every transport shares, and the [`Values`] of every
//! registered key), checks it with [`Config::validate`] and asks a [`Builder`] for each
//! [`Transfer`]'s endpoints. This file names no concrete transport.

use std::any::Any;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

pub use super::error::ConfigError;
use super::host::{HostState, Hosts};
use super::pacer::Pacing;
use super::roles::{Receiver, Sender};
use super::Endpoint;
use crate::packet::{FlowId, HostId};
use crate::time::{Time, US};

/// `ALL`, `NAMES`, `name`, `from_name`, `Display` and `FromStr` (whose error names the
/// `$what` and lists the known names) for an enum whose variants have names in
/// configuration files (a collective algorithm).
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

/// How a key's value is written in a configuration file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// `true` / `false`.
    Bool,
    /// A non-negative integer that fits 32 bits.
    U32,
    /// A number (durations in the unit the key's name ends with: `_us`, `_ms`).
    F64,
    /// One of these names.
    Choice(&'static [&'static str]),
    /// A list of non-negative integers.
    List,
}

/// A key's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Left out (a key whose default is "absent").
    Absent,
    /// [`KeyType::Bool`].
    Bool(bool),
    /// [`KeyType::U32`].
    Int(u64),
    /// [`KeyType::F64`].
    Float(f64),
    /// [`KeyType::Choice`].
    Str(Cow<'static, str>),
    /// [`KeyType::List`].
    List(Vec<u64>),
}

/// One configuration key a transport reads: its name, type and default as written in a
/// configuration file, and its documentation (the rows of docs/scenarios.md's
/// `[transport]` table are generated from it).
#[derive(Debug)]
pub struct Key {
    /// The name in `[transport]`.
    pub name: &'static str,
    /// How its value is written.
    pub ty: KeyType,
    /// May be left absent (its default is then [`Value::Absent`] or a value).
    pub optional: bool,
    /// The value a configuration that leaves it out gets.
    pub default: Value,
    /// A serialized configuration leaves the key out while it holds its default (keys
    /// that are not: always written).
    pub hide_default: bool,
    /// The docs' "type" column.
    pub doc_type: &'static str,
    /// The docs' "default" column.
    pub doc_default: &'static str,
    /// The docs' "meaning" column (the transports that read it are prepended).
    pub doc: &'static str,
}

impl Key {
    /// A key of type `ty` with `default`, always written; `doc`: the docs' type, default
    /// and meaning columns.
    pub const fn new(name: &'static str, ty: KeyType, default: Value, doc: [&'static str; 3]) -> Key {
        let [doc_type, doc_default, doc] = doc;
        Key { name, ty, optional: false, default, hide_default: false, doc_type, doc_default, doc }
    }

    /// As [`Key::new`], left out of a serialized configuration while at its default.
    pub const fn hidden(name: &'static str, ty: KeyType, default: Value, doc: [&'static str; 3]) -> Key {
        let [doc_type, doc_default, doc] = doc;
        Key { name, ty, optional: false, default, hide_default: true, doc_type, doc_default, doc }
    }

    /// A key that may be absent (its default), left out of a serialized configuration while
    /// absent if `hide_default`.
    pub const fn optional(name: &'static str, ty: KeyType, hide_default: bool, doc: [&'static str; 3]) -> Key {
        let [doc_type, doc_default, doc] = doc;
        Key { name, ty, optional: true, default: Value::Absent, hide_default, doc_type, doc_default, doc }
    }
}

/// The keys one module owns, with the checks of their values. A transport reads one or
/// more key sets (the TCP family shares one).
pub struct KeySet {
    /// The owning module, for messages.
    pub name: &'static str,
    /// Its keys.
    pub keys: &'static [Key],
    /// The first value out of range (whatever the configuration's kind: a configuration
    /// is refused as a whole, so a sweep over kinds stays valid), named by its key.
    pub check: fn(&Config) -> Result<(), ConfigError>,
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet").field("name", &self.name).finish_non_exhaustive()
    }
}

/// The value of every registered key: those set explicitly, the defaults for the rest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Values {
    pub(super) set: BTreeMap<&'static str, Value>,
}

/// What every transport shares, given by the driver rather than read from a transport's
/// keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Common {
    /// Payload bytes per data packet.
    pub mss: u32,
    /// Header bytes added to each data packet on the wire.
    pub header_bytes: u32,
    /// Wire size of an ACK or control packet.
    pub ack_bytes: u32,
    /// The queue of the flows' packets, for transports that do not pick one per transfer.
    pub priority: u8,
    /// Share of a transfer that may be missing (the loss-tolerant transports); each
    /// [`Transfer`] carries its own.
    pub loss_bound: f64,
    /// Propagation round trip of the widest path.
    pub base_rtt: Time,
    /// The run's seed (seeded choices such as which segments are important).
    pub seed: u64,
}

impl Default for Common {
    fn default() -> Self {
        Common { mss: 1460, header_bytes: 40, ack_bytes: 40, priority: 0, loss_bound: 0.1, base_rtt: 10 * US, seed: 0 }
    }
}

/// A transport and its settings: what a driver hands to [`Builder::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Which transport.
    pub kind: Kind,
    /// What every transport shares.
    pub common: Common,
    /// Every registered key.
    pub values: Values,
}

impl Config {
    /// `kind` with `common` and every key at its default.
    pub fn new(kind: Kind, common: Common) -> Config {
        Config { kind, common, values: Values::new() }
    }
}

/// The socket runtime's settings, for the transports it runs ([`TransportSpec::runtime`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RuntimeKnobs {
    /// Payload bytes per datagram.
    pub mss: u32,
    /// IP + UDP + gradwire header bytes of a datagram.
    pub header_bytes: u32,
    /// The sender's start rate or first bottleneck estimate, bit/s.
    pub line_rate_bps: u64,
    /// How far ahead of its slots a paced sender may send, and how much of a late turn it
    /// may make up.
    pub pacing: Pacing,
    /// Rate-control period.
    pub rate_period: Time,
    /// After a STOP, how long data must have been quiet before a receiver asks for what
    /// is missing.
    pub retx_quiet: Time,
    /// Retransmission timeout of a control message (control rides TCP: only a message
    /// that arrived before its transfer was posted needs it).
    pub ctrl_rto: Time,
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
    /// Share that may be missing at completion, `[0, 1]` (loss-tolerant transports).
    pub loss_bound: f64,
    /// The receiver may close early; false for the reliable half of a collective
    /// (ltp.md §IV: lossy gather, reliable broadcast).
    pub loss_tolerant: bool,
    /// Queue of the data (transports that pick one per transfer).
    pub priority: u8,
    /// Element size, never split across packets (transports that place payload).
    pub elem_bytes: u32,
    /// The sender's NIC rate, bit/s.
    pub line_rate_bps: u64,
    /// The share of this transfer's segments tagged important (`Some`: a seeded choice at
    /// this share, e.g. the median rule's measured share for the transfer's layer);
    /// `None`: the configuration's.
    pub important_fraction: Option<f64>,
    /// The round trip of the transfer's path with every queue empty, where the driver
    /// knows it (the simulator); `None` where it does not. A TCP sender under
    /// `tcp_rack_min_rtt = "idle_path"` starts RACK's minimum RTT there.
    pub idle_rtt: Option<Time>,
}

/// The two ends of a transfer, for a driver that runs both (the simulator).
pub type Pair = (Box<dyn Endpoint>, Box<dyn Endpoint>);

/// A builder as [`Any`], for tests that look at a transport's carried state (every
/// builder has it, through the blanket impl).
pub trait AsAny {
    /// Itself as [`Any`], to downcast to the concrete builder.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A transport's builder under one configuration: it makes the endpoints of transfers
/// and keeps what transfers between the same hosts hand on.
pub trait Build: Send + AsAny {
    /// Sender and receiver of `t`, the sender starting at `now`; each reads (and a build
    /// may note) what its end's host shares in `hosts` ([`HostState`]).
    fn build(&self, t: &Transfer, now: Time, hosts: &mut Hosts) -> Pair;
    /// The sending end alone, for a transport whose receiver places payload; `host` is
    /// the sending host's state.
    fn sender(&self, _t: &Transfer, _now: Time, _host: &mut HostState) -> Option<Box<dyn Sender>> {
        None
    }
    /// The receiving end alone, for a transport whose receiver places payload; `host` is
    /// the receiving host's state.
    fn receiver(&self, _t: &Transfer, _host: &mut HostState) -> Option<Box<dyn Receiver>> {
        None
    }
    /// The queue of a transfer's data (transports that do not pick it by layer).
    fn data_priority(&self) -> u8;
    /// The workload's flow sizes, before any flow starts, and the switch's queue count: a
    /// transport may tune itself to them (the error names the key that asked for it).
    fn see_workload(&mut self, _flow_sizes: &mut dyn Iterator<Item = u64>, _queues: u8) -> Result<(), ConfigError> {
        Ok(())
    }
    /// Transfers should carry each layer's measured important share
    /// ([`Transfer::important_fraction`]).
    fn wants_layer_importance(&self) -> bool {
        false
    }
}

/// A transport's name, docs and traits, as its [`TransportSpec::info`] declares them.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// Its name in configuration files and APIs.
    pub name: &'static str,
    /// One sentence for the docs' `kind` row.
    pub about: &'static str,
    /// The key sets it reads (validated whatever the kind).
    pub keys: &'static [&'static KeySet],
    /// Its receiver places payload ([`Builder::sender`] and [`Builder::receiver`] build
    /// it); the others only count bytes.
    pub places_payload: bool,
    /// Data goes in its layer's queue, not in one configured queue.
    pub priority_by_layer: bool,
    /// Its code in the socket runtime's call descriptors, if the runtime runs it.
    pub wire_code: Option<u8>,
    /// Its sender's window waits on per-packet ACKs (sending follows the ACK clock): the
    /// socket runtime reads arriving datagrams at once, not once per pacing burst, since a
    /// read held back adds to every window's round trip what the window does not cover.
    pub ack_clocked: bool,
}

impl Info {
    /// A transport that counts bytes, queues by configuration and runs in the simulator only.
    pub const fn new(name: &'static str, about: &'static str, keys: &'static [&'static KeySet]) -> Info {
        Info { name, about, keys, places_payload: false, priority_by_layer: false, wire_code: None, ack_clocked: false }
    }
}

/// A transport, as the registry lists it.
pub trait TransportSpec: Sync {
    /// What the registry and the docs know of it without building it.
    fn info(&self) -> Info;
    /// Its name in configuration files and APIs.
    fn name(&self) -> &'static str {
        self.info().name
    }
    /// One sentence for the docs' `kind` row.
    fn about(&self) -> &'static str {
        self.info().about
    }
    /// The key sets it reads (validated whatever the kind).
    fn keys(&self) -> &'static [&'static KeySet] {
        self.info().keys
    }
    /// [`Info::places_payload`].
    fn places_payload(&self) -> bool {
        self.info().places_payload
    }
    /// [`Info::priority_by_layer`].
    fn priority_by_layer(&self) -> bool {
        self.info().priority_by_layer
    }
    /// [`Info::wire_code`].
    fn wire_code(&self) -> Option<u8> {
        self.info().wire_code
    }
    /// [`Info::ack_clocked`].
    fn ack_clocked(&self) -> bool {
        self.info().ack_clocked
    }
    /// Checks that hold only for this kind (the key sets' own checks always run).
    fn check(&self, _cfg: &Config) -> Result<(), ConfigError> {
        Ok(())
    }
    /// Its builder under `cfg` (validated).
    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError>;
    /// Its builder under the socket runtime's settings, refused (with why) unless the
    /// runtime runs it: the transports with a [`Self::wire_code`].
    fn runtime(&self, _knobs: &RuntimeKnobs) -> Result<Box<dyn Build>, ConfigError> {
        Err(ConfigError::new(
            "kind",
            format!("{:?} is a simulator baseline: the socket runtime does not run it", self.name()),
        ))
    }
}

/// Which transport carries the transfers: a registered [`TransportSpec`].
#[derive(Clone, Copy)]
pub struct Kind(&'static dyn TransportSpec);

impl Kind {
    /// The transport of `spec`.
    pub fn of(spec: &'static dyn TransportSpec) -> Kind {
        Kind(spec)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Its spec.
    pub fn spec(self) -> &'static dyn TransportSpec {
        self.0
    }

    /// [`TransportSpec::places_payload`].
    pub fn places_payload(self) -> bool {
        self.0.places_payload()
    }

    /// [`TransportSpec::priority_by_layer`].
    pub fn priority_by_layer(self) -> bool {
        self.0.priority_by_layer()
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Kind {}

impl std::hash::Hash for Kind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.name())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds the endpoints of transfers under one [`Config`], for a driver that names no
/// concrete transport.
pub struct Builder {
    kind: Kind,
    inner: Box<dyn Build>,
}

impl Builder {
    /// A builder for `cfg`, refused if [`Config::validate`] or the kind's own check fails.
    pub fn new(cfg: &Config) -> Result<Builder, ConfigError> {
        cfg.validate()?;
        cfg.kind.spec().check(cfg)?;
        Ok(Builder { kind: cfg.kind, inner: cfg.kind.spec().builder(cfg)? })
    }

    /// A builder of `kind` under the socket runtime's settings; refused for a transport
    /// the runtime does not run.
    pub fn for_runtime(kind: Kind, knobs: &RuntimeKnobs) -> Result<Builder, ConfigError> {
        Ok(Builder { kind, inner: kind.spec().runtime(knobs)? })
    }

    /// The transport.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Sender and receiver of `t`, whatever the kind, each seeded from (and noting in) its
    /// host's state in `hosts`.
    pub fn build(&self, t: &Transfer, now: Time, hosts: &mut Hosts) -> Pair {
        self.inner.build(t, now, hosts)
    }

    /// The sending end of `t`, starting at `now`, `host` being the sending host's state;
    /// `None` for a kind whose receiver does not place payload ([`Kind::places_payload`]).
    pub fn sender(&self, t: &Transfer, now: Time, host: &mut HostState) -> Option<Box<dyn Sender>> {
        self.inner.sender(t, now, host)
    }

    /// The receiving end of `t`, `host` being the receiving host's state; `None` for a kind
    /// whose receiver does not place payload.
    pub fn receiver(&self, t: &Transfer, host: &mut HostState) -> Option<Box<dyn Receiver>> {
        self.inner.receiver(t, host)
    }

    /// The queue of a transfer's data for kinds that do not pick it by layer.
    pub fn data_priority(&self) -> u8 {
        self.inner.data_priority()
    }

    /// [`Build::see_workload`].
    pub fn see_workload(&mut self, flow_sizes: &mut dyn Iterator<Item = u64>, queues: u8) -> Result<(), ConfigError> {
        self.inner.see_workload(flow_sizes, queues)
    }

    /// [`Build::wants_layer_importance`].
    pub fn wants_layer_importance(&self) -> bool {
        self.inner.wants_layer_importance()
    }

    /// The kind's own builder, for tests.
    pub fn inner(&self) -> &dyn Any {
        AsAny::as_any(&*self.inner)
    }
}

/// `v` (a duration or rate written in a file) is a positive number.
pub fn check_positive_number(key: &str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(key, format!("must be a positive number (got {v})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PacketKind;
    use crate::time::serialization;
    use crate::transport::dlcp::{DlcpBuild, DlcpConfig, Importance, RateState};
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
            idle_rtt: None,
        }
    }

    /// Every name parses back to its value; an unknown name is refused with `what` and the
    /// known names.
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

    fn config(name: &str) -> Config {
        Config::new(Kind::named(name), Common::default())
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        names_round_trip(&Kind::all(), "tcp", "transport");
        names_round_trip(crate::collective::Algorithm::ALL, "butterfly", "algorithm");
    }

    #[test]
    fn validate_names_the_key() {
        let mut c = config("dlcp");
        assert_eq!(c.validate(), Ok(()));
        c.common.loss_bound = 1.5;
        let e = c.validate().unwrap_err();
        assert_eq!(e.to_string(), "loss_bound 1.5 is outside [0, 1]");
        // every key set is checked, whatever the kind
        let mut c = config("dlcp");
        c.values.set("pias_thresholds", Value::List(vec![10, 5]));
        assert_eq!(c.validate().unwrap_err().field, "pias_thresholds");
        let mut c = config("dctcp");
        c.values.set("ltp_c_ms", Value::Float(0.0));
        assert_eq!(Builder::new(&c).err().map(|e| e.field), Some("ltp_c_ms".to_string()));
        let mut c = config("dctcp");
        c.values.set("rate_delta", Value::Float(0.0));
        assert_eq!(c.validate().unwrap_err().field, "rate_delta");
    }

    #[test]
    fn every_key_belongs_to_one_key_set_and_reads_back_its_default() {
        let mut seen = std::collections::HashSet::new();
        for set in super::super::registry::key_sets() {
            assert!(!super::super::registry::readers(set).is_empty(), "{}", set.name);
            for k in set.keys {
                assert!(seen.insert(k.name), "{} twice", k.name);
                assert!(!k.doc.is_empty() && !k.doc_type.is_empty(), "{} undocumented", k.name);
                assert_eq!(Values::new().get(k.name), &k.default);
                assert_eq!(k.default == Value::Absent, k.optional && k.default == Value::Absent);
            }
        }
    }

    #[test]
    fn only_transports_that_place_payload_have_sender_and_receiver() {
        for kind in Kind::all() {
            let b = Builder::new(&Config::new(kind, Common::default())).unwrap();
            let t = transfer(10_000);
            let host = &mut HostState::new();
            assert_eq!(b.sender(&t, 0, host).is_some(), kind.places_payload(), "{kind}");
            assert_eq!(b.receiver(&t, host).is_some(), kind.places_payload(), "{kind}");
            assert_eq!(kind.spec().wire_code().is_some(), kind.places_payload(), "{kind}");
            // every kind's pair: the sender starts at once, toward the receiver
            let (mut s, _) = b.build(&t, 0, &mut Hosts::new());
            let p = s.poll_transmit(0).expect("something to send at the start");
            assert_eq!((p.flow, p.src, p.dst), (t.flow, t.src, t.dst), "{kind}");
        }
    }

    fn dlcp(cfg: DlcpConfig) -> DlcpBuild {
        DlcpBuild::new(cfg, RateState::Tensor)
    }

    #[test]
    fn a_posted_dlcp_receiver_wants_data_before_the_senders_start() {
        let b = dlcp(DlcpConfig::default());
        let mut r = b.receiver(&transfer(10_000), &mut HostState::new()).unwrap();
        assert!(!r.wants(0, 1440), "DLCP discards data before START");
        r.post(0);
        assert!(r.wants(0, 1440));
        assert_eq!(r.poll_transmit(0), None, "the local START's acknowledgement is dropped");
    }

    #[test]
    fn a_transfers_important_fraction_overrides_the_configured_importance() {
        // the share of ECN-capable data packets a sender of 1 000 segments emits
        let share = |importance, important_fraction| {
            let b = dlcp(DlcpConfig { importance, ..DlcpConfig::default() });
            let t = Transfer { important_fraction, ..transfer(1440 * 1000) };
            let mut s = b.sender(&t, 0, &mut HostState::new()).unwrap();
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
        let b = dlcp(DlcpConfig { pacing: Pacing { burst, catch_up: 0 }, ..DlcpConfig::default() });
        let t = transfer(10_000_000);
        let mut s = b.sender(&t, 0, &mut HostState::new()).unwrap();
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

    #[test]
    fn the_runtime_runs_the_transports_with_a_wire_code_only() {
        let knobs = RuntimeKnobs {
            mss: 1440,
            header_bytes: 60,
            line_rate_bps: 10_000_000_000,
            pacing: Pacing::default(),
            rate_period: 2_000 * US,
            retx_quiet: 0,
            ctrl_rto: 50_000 * US,
        };
        for kind in Kind::all() {
            assert_eq!(Builder::for_runtime(kind, &knobs).is_ok(), kind.spec().wire_code().is_some(), "{kind}");
        }
    }
}
