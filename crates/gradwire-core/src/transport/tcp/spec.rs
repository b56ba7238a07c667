//! The TCP family in the registry: NewReno and DCTCP, and the keys every TCP-based
//! transport reads ([`KEYS`]): windows, RTOs, SACK, RACK-TLP, delayed ACKs, and the
//! realism options around a flow (a handshake per flow or per host pair, one persistent
//! connection per host pair).

use std::sync::Arc;

use super::handshake::{Accepting, Connecting, HandshakeConfig};
use super::{CongestionControl, DelayedAck, LossCut, TcpConfig, TcpReceiver, TcpSender};
use crate::time::{from_us, Time};
use crate::transport::shared::check_positive;
use crate::transport::spec::{
    check_positive_number, Build, Config, ConfigError, Info, Key, KeySet, KeyType, Pair, Transfer, TransportSpec, Value,
};
use crate::transport::{Endpoint, HostState, Hosts};

/// Linux's minimum delayed-ACK timeout (`TCP_DELACK_MIN`), µs.
pub const LINUX_DELACK_TIMEOUT_US: f64 = 40_000.0;
/// ns-3's default `TcpSocket::ConnTimeout`, µs.
pub const NS3_CONN_TIMEOUT_US: f64 = 3_000_000.0;

const CC: &[&str] = &["reno", "cubic"];
const CUBIC_VARIANT: &[&str] = &["rfc9438", "linux"];
const CONNECTIONS: &[&str] = &["per_flow", "per_pair", "persistent"];
const SLOW_START: &[&str] = &["per_segment", "per_ack"];
const CONG_AVOID: &[&str] = &["per_ack", "per_segment", "per_segment_ns3"];
const CE_CHANGE_ACK: &[&str] = &["held", "lagged"];
const DCTCP_SSTHRESH: &[&str] = &["linux", "ns3"];
const ECN_CUT: &[&str] = &["at_once", "prr"];
const LOSS_EXIT: &[&str] = &["all", "above_recover"];
const RTO_BACKOFF_RESET: &[&str] = &["rtt_sample", "new_ack"];
const TLP_TIMEOUT: &[&str] = &["rfc8985", "linux"];
const RACK_MIN_RTT: &[&str] = &["samples", "idle_path"];
const LOSS_CUT: &[&str] = &["flight", "cwnd", "pipe"];

/// The keys of the TCP family.
pub static KEYS: KeySet = KeySet {
    name: "tcp",
    keys: &[
        Key::new("init_cwnd_packets", KeyType::U32, Value::Int(10), ["integer > 0, packets", "`10`", "Initial congestion window."]),
        Key::new("rto_min_us", KeyType::F64, Value::Float(10_000.0), ["float > 0, µs", "`10000.0` (`200000.0` under `baseline = \"modern\"`, the default)", "Minimum retransmission timeout (RTOmin)."]),
        Key::new("rto_max_us", KeyType::F64, Value::Float(60_000_000.0), ["float > 0, µs", "`60000000.0`", "Maximum retransmission timeout (exponential backoff cap); also the cap of a SYN's backoff."]),
        Key::optional("rto_initial_us", KeyType::F64, false, ["float > 0, µs", "`rto_min_us`", "RTO before the first RTT sample."]),
        Key::new("dupack_threshold", KeyType::U32, Value::Int(3), ["integer > 0", "`3`", "Duplicate ACKs that trigger fast retransmit."]),
        Key::new("dctcp_g", KeyType::F64, Value::Float(1.0 / 16.0), ["float in (0, 1]", "`0.0625` (1/16)", "DCTCP's EWMA gain for the marked fraction α (the kinds that run DCTCP)."]),
        Key::hidden("newreno_ecn", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "`newreno` only: answer ECN marks as RFC 3168 (classic ECN TCP): data packets are ECN-capable and an ACK echoing CE halves cwnd (ssthresh = cwnd/2, at least 2 MSS), at most once per window of data; loss is handled as before. `false`: NewReno reacts to loss only."]),
        Key::hidden("tcp_handshake", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "A connection is opened before data (SYN, SYN-ACK, ACK; `ack_bytes` packets in the flow's queue). A lost SYN or SYN-ACK waits `tcp_conn_timeout_us`, doubling per retry, since no RTT has been measured yet."]),
        Key::hidden("tcp_conn_timeout_us", KeyType::F64, Value::Float(NS3_CONN_TIMEOUT_US), ["float > 0, µs", "`3000000`", "With `tcp_handshake`: the wait for a SYN-ACK before the SYN is sent again (ns-3's `TcpSocket::ConnTimeout`, 3 s)."]),
        Key::hidden("tcp_connections", KeyType::Choice(CONNECTIONS), Value::Str(std::borrow::Cow::Borrowed("per_flow")), ["`\"per_flow\"` \\| `\"per_pair\"` \\| `\"persistent\"`", "`\"per_flow\"`", "With `tcp_handshake`: every flow (tensor) opens its own connection, or the first flow between two hosts opens one that later flows of the pair reuse (they start at once; window and RTT state stay per flow). `persistent` (`newreno`, `dctcp`; with or without `tcp_handshake`): the pair's flows also ride that one connection's window, RTT and congestion state, each starting where the last one left it, as Gloo's and NCCL's sockets do; after more than an RTO without sending, the window restarts as Linux's `tcp_slow_start_after_idle` (halved per idle RTO, not below the initial window). Concurrent flows of one pair each run their own copy of it."]),
        Key::hidden("tcp_sack", KeyType::Bool, Value::Bool(false), ["bool", "`false` (`true` under `baseline = \"modern\"`, the default)", "SACK-based loss recovery (RFC 2018 / 6675): every ACK names the segment it answers, the sender keeps a per-segment scoreboard and resends every hole with 3 SACKed segments above it while `pipe` < cwnd. `false`: NewReno's recovery (RFC 6582), one hole per round trip, as the papers' ns-3 runs had it."]),
        Key::hidden("tcp_rack_tlp", KeyType::Bool, Value::Bool(false), ["bool", "`false` (`true` under `modern`)", "With `tcp_sack`: RACK-TLP (RFC 8985): a segment sent before one that was delivered is lost once an RTT plus the reordering window (0 until reordering is seen, then min_RTT / 4) has passed; a tail loss probe 2 SRTTs after the last ACK (plus the delayed-ACK timeout when one segment is out) replaces most tail RTOs."]),
        Key::hidden("tcp_tlp_timeout", KeyType::Choice(TLP_TIMEOUT), Value::Str(std::borrow::Cow::Borrowed("rfc8985")), ["`\"rfc8985\"` \\| `\"linux\"`", "`\"rfc8985\"`", "With `tcp_rack_tlp`: the tail loss probe's timeout, RFC 8985's (2 SRTT, plus the delayed-ACK timeout when one segment is out; no probe if the RTO comes first) or Linux's `tcp_schedule_loss_probe` (2 SRTT plus `TCP_RTO_MIN`, 200 ms, when one segment is out, else plus `TCP_TIMEOUT_MIN`, 2 jiffies: 8 ms at `HZ = 250`; the probe goes at the RTO's time if that comes first, not counted as a timeout); jiffies are not rounded to. Not set by `modern`: against the kernels it moves `gradwire crosscheck`'s twins by at most 0.11 (docs/validation.md)."]),
        Key::hidden("tcp_rack_min_rtt", KeyType::Choice(RACK_MIN_RTT), Value::Str(std::borrow::Cow::Borrowed("samples")), ["`\"samples\"` \\| `\"idle_path\"`", "`\"samples\"` (`\"idle_path\"` under `modern`)", "With `tcp_rack_tlp`: where RACK's minimum RTT starts. RACK takes an ACK of a resent segment that comes back faster than that minimum as the original's and does not advance on it (RFC 8985 6.2 step 2, Linux's `tcp_rack_advance`). `samples`: the flow's own RTT samples only, so a flow whose first samples met a full queue deems a resend's faster ACK spurious, and segments sent after the last one delivered wait for the RTO (no loss probe in recovery). `idle_path`: from the round trip of the flow's path with empty queues (propagation, and an ACK-sized packet's serialization on each link), as a Linux connection's windowed minimum (`tcp_min_rtt`, 5 minutes) holds from its handshake or earlier traffic on an idle network; the reordering window (min_RTT / 4) starts from it too."]),
        Key::hidden("tcp_loss_cut", KeyType::Choice(LOSS_CUT), Value::Str(std::borrow::Cow::Borrowed("flight")), ["`\"flight\"` \\| `\"cwnd\"` \\| `\"pipe\"`", "`\"flight\"` (`\"cwnd\"` under `modern`; `\"pipe\"` under `ns3` with `tcp_cc = \"reno\"`)", "What a loss (fast recovery or RTO) cuts from: the flight, `snd_nxt - snd_una` (RFC 5681 eq. 4: ssthresh = flight / 2; RFC 6937: PRR's RecoverFS = flight; a timeout cuts again unless it repeats one); the congestion window, as Linux's `tcp_init_cwnd_reduction` and `tcp_enter_loss` do (ssthresh = `cwnd / 2` in whole segments for Reno and DCTCP, `tcp_reno_ssthresh` and `dctcp_react_to_loss`; RecoverFS = `prior_cwnd`; a timeout in a window already cut by recovery or ECN keeps that cut); or, with `tcp_sack`, RFC 6675's pipe (sent less SACKed and lost plus resent), as ns-3.37's `TcpNewReno` halves `BytesInFlight()` (RecoverFS the flight). With SACK they differ: while SACKs arrive before a loss is declared the sender sends beyond cwnd (the pipe leaves SACKed segments out), so the flight is the largest. CUBIC's ssthresh is `beta · cwnd` whichever is set."]),
        Key::hidden("tcp_hystart", KeyType::Bool, Value::Bool(false), ["bool", "`false` (`true` under `modern`)", "With `tcp_cc = \"cubic\"`: Linux's HyStart (`tcp_cubic.c`'s defaults: ACK train and delay detection, from 16 segments) ends slow start, ssthresh = cwnd, once a round's closely spaced ACKs (each within 2 ms) span more than half the minimum RTT plus up to 1 ms, or a round's smallest RTT after 8 samples exceeds the minimum by an eighth of it (4-16 ms)."]),
        Key::hidden("tcp_cubic_variant", KeyType::Choice(CUBIC_VARIANT), Value::Str(std::borrow::Cow::Borrowed("rfc9438")), ["`\"rfc9438\"` \\| `\"linux\"`", "`\"rfc9438\"` (`\"linux\"` under `modern`)", "With `tcp_cc = \"cubic\"`: where Linux's `tcp_cubic.c` departs from RFC 9438, which to follow. `linux`: the Reno-friendly estimate keeps alpha = 3 (1 - beta) / (1 + beta) past `W_max` (the RFC's section 4.3 raises it to 1 there; with fast convergence `W_max` sits below the window most of the time), and with no reduction yet, or a timeout since, the window grows at least 5 % a round trip (`bictcp_update`'s `cnt` of at most 20)."]),
        Key::hidden("tcp_partial_ack_resend", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "With `tcp_sack`: every partial ACK in recovery sends one more segment whatever cwnd says, as ns-3.37's `TcpSocketBase::ProcessAck` does (`DoRetransmit`): nothing if the new head was resent already, else the first segment deemed lost and never resent, else new data, else the head again (Linux does not). `baseline = \"ns3\"` and `validation/compare.py --tcp ns3` set it."]),
        Key::hidden("tcp_cc", KeyType::Choice(CC), Value::Str(std::borrow::Cow::Borrowed("reno")), ["`\"reno\"` \\| `\"cubic\"`", "`\"reno\"`", "`newreno` only: the window's growth, RFC 5681 or CUBIC (RFC 9438: C = 0.4, beta = 0.7, fast convergence, the Reno-friendly region, a timeout forgetting W_max as section 4.8 and Linux do; Linux's HyStart with `tcp_hystart`, Linux's growth with `tcp_cubic_variant`)."]),
        Key::hidden("tcp_delack_count", KeyType::U32, Value::Int(1), ["int >= 1", "`1` (`2` under `modern` and `ns3`)", "In-order segments one ACK answers (Linux: 2). Out-of-order segments, segments that fill a hole, and (DCTCP) a change of CE state are answered at once; a flow's last segment too with `tcp_delack_write_end`."]),
        Key::hidden("tcp_delack_write_end", KeyType::Bool, Value::Bool(false), ["bool", "`false` (`true` under `modern`)", "With `tcp_delack_count` > 1: the segment that completes a flow is answered at once, as Linux answers the end of an application write once the reader drains it (`ICSK_ACK_PUSHED`). `false`: it waits like any other (ns-3), so an odd last segment waits for the timeout."]),
        Key::hidden("tcp_delack_first_at_once", KeyType::Bool, Value::Bool(false), ["bool", "`false` (`true` under `ns3`)", "With `tcp_delack_count` > 1: a flow's first data segment is answered at once, as ns-3.37's `TcpSocketBase::ProcessSynRcvd` arranges (\"Always respond to first data packet to speed up the connection\"); the count starts from the second."]),
        Key::hidden("tcp_ce_seq_check", KeyType::Bool, Value::Bool(false), ["bool", "`false` (`true` under `ns3`)", "The receiver counts a CE mark only on a segment above the last one it counted, as ns-3.37's `TcpSocketBase::ForwardUp` does (`m_ecnCESeq`): a marked resend, or a marked segment that arrives behind a later marked one, counts as unmarked, so its ACK carries no ECE and (DCTCP) it changes the CE state to unmarked. RFC 3168 and Linux count every mark."]),
        Key::hidden("tcp_delack_timeout_us", KeyType::F64, Value::Float(LINUX_DELACK_TIMEOUT_US), ["float > 0, µs", "`40000`", "With `tcp_delack_count` > 1: the longest an ACK waits (Linux's `TCP_DELACK_MIN`; ns-3's `DelAckTimeout` is 200 ms)."]),
        Key::hidden("tcp_recovery_from_cwr", KeyType::Bool, Value::Bool(true), ["bool", "`true` (`false` under `baseline = \"ns3\"`)", "Loss detected in CWR (the round trip after an ECN cut: 3 duplicate ACKs, or with `tcp_sack` a segment deemed lost) starts fast recovery, as in the open state (RFC 5681, RFC 6675, Linux). `false`: as ns-3.37's `TcpSocketBase::DupAck`, which counts duplicate ACKs in `CA_CWR` but enters recovery only from `CA_OPEN`/`CA_DISORDER`: the loss waits for the RTO (with `tcp_sack`, segments deemed lost are still resent while the window has room, as ns-3's `NextSeg` does)."]),
        Key::hidden("tcp_loss_exit_ack", KeyType::Choice(LOSS_EXIT), Value::Str(std::borrow::Cow::Borrowed("all")), ["`\"all\"` \\| `\"above_recover\"`", "`\"all\"` (`\"above_recover\"` under `ns3`)", "What the ACK that ends loss recovery after an RTO (the one reaching the recovery point) counts for window growth: every segment it acknowledges (RFC 5681 slow start, Linux), or only the segments above the recovery point (ns-3.37's `TcpSocketBase::ProcessAck` in `CA_LOSS`): after an RTO with one segment out, the resend's ACK leaves cwnd at one segment, and with delayed ACKs a lone segment waits for the ACK timer."]),
        Key::hidden("tcp_rto_backoff_reset", KeyType::Choice(RTO_BACKOFF_RESET), Value::Str(std::borrow::Cow::Borrowed("rtt_sample")), ["`\"rtt_sample\"` \\| `\"new_ack\"`", "`\"rtt_sample\"` (`\"new_ack\"` under `ns3`)", "What clears the RTO's exponential backoff: a valid RTT sample (RFC 6298 5.7 with Karn's rule, Linux), or every ACK of new data, an ACK of a resend included (ns-3.37's `TcpSocketBase::NewAck` recomputes the RTO from the estimate; before the first sample gradwire goes back to `rto_initial_us`)."]),
        Key::hidden("tcp_slow_start", KeyType::Choice(SLOW_START), Value::Str(std::borrow::Cow::Borrowed("per_segment")), ["`\"per_segment\"` \\| `\"per_ack\"`", "`\"per_segment\"`", "Slow start grows the window by every segment an ACK covers (Linux's `tcp_slow_start`, ns-3's `TcpCubic` and `TcpLinuxReno`/`TcpDctcp`), or by one segment per ACK however many it covers (ns-3's `TcpNewReno::SlowStart`, RFC 5681 without byte counting): with delayed ACKs every 2 segments, 1.5× per round trip instead of 2×."]),
        Key::hidden("tcp_cong_avoid", KeyType::Choice(CONG_AVOID), Value::Str(std::borrow::Cow::Borrowed("per_ack")), ["`\"per_ack\"` \\| `\"per_segment\"` \\| `\"per_segment_ns3\"`", "`\"per_ack\"` (`\"per_segment\"` under `modern`; `\"per_segment_ns3\"` for `dctcp` and `pias` under `ns3`)", "Congestion avoidance adds `mss * mss / cwnd` per ACK however many segments it covers (RFC 5681 eq. 3, ns-3's `TcpNewReno`), or counts the segments acknowledged and adds one segment per window's worth (`per_segment`: Linux's `tcp_cong_avoid_ai`, what an ACK leaves over above ssthresh in slow start counting too; `per_segment_ns3`: ns-3.37's `TcpLinuxReno`, which `TcpDctcp` derives from, where an ACK that ends slow start grows cwnd only to ssthresh; in both an ACK of no whole segment still runs the count's first check): with delayed ACKs every 2 segments, one segment per round trip instead of half of one. CUBIC keeps its own curve."]),
        Key::hidden("tcp_ce_change_ack", KeyType::Choice(CE_CHANGE_ACK), Value::Str(std::borrow::Cow::Borrowed("held")), ["`\"held\"` \\| `\"lagged\"`", "`\"held\"` (`\"lagged\"` for `dctcp` and `pias` under `ns3`)", "With `tcp_delack_count` > 1, when a data packet's CE mark differs from the last one's: the held ACK goes at once and acknowledges everything before that packet (RFC 8257 3.2; Linux also answers the packet itself at once), or (`lagged`, ns-3.37's `TcpDctcp::CeState0to1`/`CeState1to0`) if the last ACK event held a packet or was the timer, an ACK with the old state's ECE acknowledging only what came before the previous packet (ns-3 reads `m_priorRcvNxt` before the packet is added), naming no segment, which cancels the delayed ACK and its count: the held packet waits again with the new one, and with two segments in flight both wait for the timer."]),
        Key::hidden("dctcp_ssthresh", KeyType::Choice(DCTCP_SSTHRESH), Value::Str(std::borrow::Cow::Borrowed("linux")), ["`\"linux\"` \\| `\"ns3\"`", "`\"linux\"` (`\"ns3\"` for `dctcp` and `pias` under `ns3`)", "DCTCP's reductions: an ECN cut to `(1 - α/2) · cwnd`, at least 2 segments (Linux's `dctcp_ssthresh`), and a loss halving the window (RFC 8257 3.5; the flight or cwnd as `tcp_loss_cut` says); or (`ns3`, ns-3.37's `TcpDctcp::GetSsThresh`) `(1 - α/2) · cwnd` with no floor for ECN, fast recovery and RTO alike: windows can fall below one segment, which sends nothing until the RTO, kept armed while data is unsent (ns-3's `NewAck`)."]),
        Key::hidden("tcp_ecn_cut", KeyType::Choice(ECN_CUT), Value::Str(std::borrow::Cow::Borrowed("at_once")), ["`\"at_once\"` \\| `\"prr\"`", "`\"at_once\"` (`\"prr\"` under `ns3`)", "An ECN cut (DCTCP, `newreno_ecn`) sets cwnd to the new ssthresh at once, or (`prr`, ns-3.37's `EnterCwr` with `TcpPrrRecovery`) brings it there over the round trip: on entering CWR and on each ACK of new data in it cwnd is the flight plus PRR's send count (`DoRecovery`: in proportion to what was delivered while the flight is above ssthresh, else up to what the ACK delivered, at least a segment until one was sent), and the ACK that ends CWR sets it to ssthresh."]),
    ],
    check,
};

/// The TCP settings every TCP-based kind reads, with congestion control `cc`.
pub fn config(cfg: &Config, cc: CongestionControl) -> TcpConfig {
    let (c, v) = (&cfg.common, &cfg.values);
    let rto_min_us = v.f64("rto_min_us");
    TcpConfig {
        mss: c.mss,
        header_bytes: c.header_bytes,
        ack_bytes: c.ack_bytes,
        init_cwnd_packets: v.u32("init_cwnd_packets"),
        rto_min: from_us(rto_min_us),
        rto_max: from_us(v.f64("rto_max_us")),
        rto_initial: from_us(v.opt_f64("rto_initial_us").unwrap_or(rto_min_us)),
        dupack_threshold: v.u32("dupack_threshold"),
        priority: c.priority,
        sack: v.bool("tcp_sack"),
        rack_tlp: v.bool("tcp_rack_tlp"),
        tlp_linux: v.str("tcp_tlp_timeout") == "linux",
        rack_min_rtt_idle_path: v.str("tcp_rack_min_rtt") == "idle_path",
        partial_ack_resend: v.bool("tcp_partial_ack_resend"),
        delayed_ack: DelayedAck {
            count: v.u32("tcp_delack_count"),
            timeout: from_us(v.f64("tcp_delack_timeout_us")),
            at_write_end: v.bool("tcp_delack_write_end"),
        },
        slow_start_per_ack: v.str("tcp_slow_start") == "per_ack",
        cong_avoid_per_segment: v.str("tcp_cong_avoid") != "per_ack",
        cong_avoid_after_slow_start_ns3: v.str("tcp_cong_avoid") == "per_segment_ns3",
        ce_ack_lagged: v.str("tcp_ce_change_ack") == "lagged",
        dctcp_ssthresh_ns3: v.str("dctcp_ssthresh") == "ns3",
        ecn_cut_prr: v.str("tcp_ecn_cut") == "prr",
        delack_first_at_once: v.bool("tcp_delack_first_at_once"),
        ce_seq_check: v.bool("tcp_ce_seq_check"),
        recovery_from_cwr: v.bool("tcp_recovery_from_cwr"),
        loss_exit_above_recover: v.str("tcp_loss_exit_ack") == "above_recover",
        rto_reset_on_new_ack: v.str("tcp_rto_backoff_reset") == "new_ack",
        hystart: v.bool("tcp_hystart"),
        cubic_linux: v.str("tcp_cubic_variant") == "linux",
        loss_cut: match v.str("tcp_loss_cut") {
            "cwnd" => LossCut::Cwnd,
            "pipe" => LossCut::Pipe,
            _ => LossCut::Flight,
        },
        cc,
    }
}

/// DCTCP's congestion control under `cfg`.
pub fn dctcp(cfg: &Config) -> CongestionControl {
    CongestionControl::Dctcp { g: cfg.values.f64("dctcp_g") }
}

fn check(cfg: &Config) -> Result<(), ConfigError> {
    let (v, kind) = (&cfg.values, cfg.kind.name());
    if v.str("tcp_connections") == "persistent" && !matches!(kind, "newreno" | "dctcp") {
        return Err(ConfigError::new(
            "tcp_connections",
            format!(
                "\"persistent\" carries TCP state across a host pair's flows: kind = \"newreno\" or \"dctcp\" (got {kind:?}; a kind that tags each flow by its own bytes cannot share one)"
            ),
        ));
    }
    if v.str("tcp_cc") != "reno" && kind != "newreno" {
        return Err(ConfigError::new(
            "tcp_cc",
            format!(
                "the window growth of the loss-based TCP baseline (kind = \"newreno\", got {kind:?}); the DCTCP-based kinds grow as DCTCP"
            ),
        ));
    }
    if v.bool("newreno_ecn") && kind != "newreno" {
        return Err(ConfigError::new(
            "newreno_ecn",
            format!("RFC 3168 ECN is a NewReno option (kind = \"newreno\", got {kind:?})"),
        ));
    }
    // durations are written in µs: positive numbers before they become picoseconds (a
    // negative one would turn into 0)
    for key in ["rto_min_us", "rto_max_us", "rto_initial_us"] {
        if let Some(x) = v.opt_f64(key) {
            check_positive_number(key, x)?;
        }
    }
    let t = config(cfg, CongestionControl::NewReno);
    for (key, x) in [("init_cwnd_packets", t.init_cwnd_packets), ("dupack_threshold", t.dupack_threshold)] {
        if x == 0 {
            return Err(ConfigError::new(key, "must be positive (got 0)"));
        }
    }
    check_positive("rto_min_us", t.rto_min)?;
    if t.delayed_ack.count == 0 {
        return Err(ConfigError::new("tcp_delack_count", "must be positive (got 0)"));
    }
    if t.delayed_ack.count > 1 {
        check_positive("tcp_delack_timeout_us", t.delayed_ack.timeout)?;
    }
    if t.rack_tlp && !t.sack {
        return Err(ConfigError::new("tcp_rack_tlp", "needs SACK (RACK reads the SACK scoreboard)"));
    }
    if v.str("tcp_cc") == "cubic" && v.bool("newreno_ecn") {
        return Err(ConfigError::new("tcp_cc", "CUBIC here is loss-based: not with newreno_ecn"));
    }
    check_positive("rto_max_us", t.rto_max)?;
    check_positive("rto_initial_us", t.rto_initial)?;
    let g = v.f64("dctcp_g");
    if !(g > 0.0 && g <= 1.0) {
        return Err(ConfigError::new("dctcp_g", format!("must be in (0, 1] (got {g})")));
    }
    check_positive_number("tcp_conn_timeout_us", v.f64("tcp_conn_timeout_us"))
}

/// Opens TCP connections in front of flows (`tcp_handshake`), per flow or once per host
/// pair.
pub struct Handshakes {
    cfg: HandshakeConfig,
    /// `tcp_connections = "per_pair"` or `"persistent"`: a pair's first flow opens the
    /// connection, noted in the sending host's [`HostState`].
    per_pair: bool,
}

impl Handshakes {
    /// `Some` when `cfg` opens connections.
    pub fn new(cfg: &Config) -> Option<Handshakes> {
        let v = &cfg.values;
        v.bool("tcp_handshake").then(|| Handshakes {
            cfg: HandshakeConfig {
                conn_timeout: from_us(v.f64("tcp_conn_timeout_us")),
                max_timeout: from_us(v.f64("rto_max_us")),
                bytes: cfg.common.ack_bytes,
                priority: cfg.common.priority,
            },
            per_pair: v.str("tcp_connections") != "per_flow",
        })
    }

    /// `t`'s pair, behind a handshake if its connection must be opened; `src` is the
    /// sending host's state.
    pub fn wrap(&self, t: &Transfer, (s, r): Pair, src: &mut HostState) -> Pair {
        if self.per_pair {
            let open = &mut src.peer_mut(t.dst).tcp_open;
            if std::mem::replace(open, true) {
                return (s, r);
            }
        }
        let (f, src, dst) = (t.flow, t.src, t.dst);
        (
            Box::new(Connecting::new(s, self.cfg, f, src, dst, t.bytes)),
            Box::new(Accepting::new(r, self.cfg, f, dst, src)),
        )
    }
}

/// Wraps `pair` in `handshakes`, if any; `src` is the sending host's state.
pub fn opened(handshakes: &Option<Handshakes>, t: &Transfer, pair: Pair, src: &mut HostState) -> Pair {
    match handshakes {
        None => pair,
        Some(h) => h.wrap(t, pair, src),
    }
}

/// How every TCP-based transport opens a flow, as the [`KEYS`] say: the sender (RACK's
/// minimum RTT from the path, the pair's persistent connection), the receiver, and the
/// handshake in front of them. NewReno, DCTCP and PIAS share it, so no TCP key is read by
/// one of them and ignored by another.
pub struct TcpOpener {
    tcp: TcpConfig,
    /// The same, shared by every sender this opener makes (a sender keeps a pointer, not
    /// a copy: per-flow state stays small at 10^6 flows).
    tcp_shared: Arc<TcpConfig>,
    /// `tcp_connections = "persistent"`: a flow starts from, and leaves, its pair's window,
    /// RTT and congestion state (in the sending host's [`HostState`]).
    persistent: bool,
    handshakes: Option<Handshakes>,
}

impl TcpOpener {
    /// The opener for `cfg`'s keys with congestion control `cc`.
    pub fn new(cfg: &Config, cc: CongestionControl) -> TcpOpener {
        let tcp = config(cfg, cc);
        TcpOpener {
            tcp,
            tcp_shared: Arc::new(tcp),
            persistent: cfg.values.str("tcp_connections") == "persistent",
            handshakes: Handshakes::new(cfg),
        }
    }

    /// The settings its flows get.
    pub fn config(&self) -> &TcpConfig {
        &self.tcp
    }

    /// `t`'s pair: `wrap` may dress the sender (PIAS sets its packets' queues), then the
    /// handshake, if any, goes in front.
    pub fn open(
        &self,
        t: &Transfer,
        now: Time,
        hosts: &mut Hosts,
        wrap: impl FnOnce(TcpSender) -> Box<dyn Endpoint>,
    ) -> Pair {
        let (f, src, dst, bytes) = (t.flow, t.src, t.dst, t.bytes);
        let mut sender = TcpSender::with_config(self.tcp_shared.clone(), f, src, dst, bytes, now);
        if self.tcp.rack_min_rtt_idle_path {
            sender = sender.with_idle_rtt(t.idle_rtt);
        }
        let host = hosts.host(src);
        if self.persistent {
            sender = sender.on_connection(host.peer(dst).and_then(|p| p.tcp), now);
        }
        let pair: Pair = (wrap(sender), Box::new(TcpReceiver::new(self.tcp, f, dst, src, bytes)));
        opened(&self.handshakes, t, pair, host)
    }
}

/// NewReno's and DCTCP's builder.
pub struct TcpBuild(TcpOpener);

impl Build for TcpBuild {
    fn build(&self, t: &Transfer, now: Time, hosts: &mut Hosts) -> Pair {
        self.0.open(t, now, hosts, |s| Box::new(s))
    }

    fn data_priority(&self) -> u8 {
        self.0.tcp.priority
    }
}

static SETS: [&KeySet; 1] = [&KEYS];

/// TCP NewReno (a baseline), optionally with RFC 3168 ECN or CUBIC's growth.
pub struct NewReno;

impl TransportSpec for NewReno {
    fn info(&self) -> Info {
        Info::new("newreno", "TCP NewReno (a baseline): reacts to loss only (with `newreno_ecn`, to ECN marks as RFC 3168; with `tcp_cc = \"cubic\"`, grows as CUBIC).", &SETS)
    }

    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        let cc = if cfg.values.bool("newreno_ecn") {
            CongestionControl::NewRenoEcn
        } else if cfg.values.str("tcp_cc") == "cubic" {
            CongestionControl::Cubic
        } else {
            CongestionControl::NewReno
        };
        Ok(Box::new(TcpBuild(TcpOpener::new(cfg, cc))))
    }
}

/// DCTCP (a baseline).
pub struct Dctcp;

impl TransportSpec for Dctcp {
    fn info(&self) -> Info {
        Info::new(
            "dctcp",
            "DCTCP (a baseline): sends ECT packets and reacts to the fraction of CE-marked bytes (RFC 8257).",
            &SETS,
        )
    }

    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        Ok(Box::new(TcpBuild(TcpOpener::new(cfg, dctcp(cfg)))))
    }
}
