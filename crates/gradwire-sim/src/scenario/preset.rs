//! Presets of the baselines' settings. Each fills a key the scenario (after overrides and
//! sweep) leaves out, so anything set explicitly wins. Only TCP's keys (and, for `ns3`,
//! the hosts' and pFabric's/PIAS's) are touched; DLCP and LTP ignore them.
//!
//! `baseline = "modern"` (the default; `"linux"` is the same): TCP as a Linux 6.x host runs
//! it with its default sysctls, for comparisons with what users run (Gloo, NCCL's socket
//! transport). Round-robin host NICs, no handshake.
//!
//! | key | value | Linux's source |
//! |---|---|---|
//! | `transport.tcp_sack` | `true` | `net.ipv4.tcp_sack = 1` |
//! | `transport.tcp_rack_tlp` | `true` | `net.ipv4.tcp_recovery = 1` (RACK, `tcp_recovery.c`), `net.ipv4.tcp_early_retrans = 3` (TLP) |
//! | `transport.tcp_rack_min_rtt` | `"idle_path"` | `tcp_rack_advance` (`tcp_recovery.c`) compares a resend's RTT with `tcp_min_rtt`, the socket's 5-minute windowed minimum (`tcp_min_rtt_wlen = 300`), which `tcp_ack_update_rtt` feeds from every sample, the handshake's (`FLAG_SYN_ACKED`) included: a connection opened on an idle network holds the path's idle round trip |
//! | `transport.tcp_cc` | `"cubic"` (kind `newreno` without `newreno_ecn`; DCTCP and PIAS keep DCTCP's) | `net.ipv4.tcp_congestion_control = cubic` (`tcp_cubic.c`) |
//! | `transport.tcp_hystart` | `true` | `tcp_cubic.c`'s module defaults: `hystart = 1`, `hystart_detect = 3` (ACK train and delay), `hystart_low_window = 16`, `hystart_ack_delta_us = 2000` |
//! | `transport.tcp_cubic_variant` | `"linux"` | `bictcp_update` (`tcp_cubic.c`): the Reno-friendly estimate grows by `beta_scale` (alpha = 3 (1 − beta) / (1 + beta)) past `W_max` too, and with `last_max_cwnd` 0 `cnt` is at most 20 |
//! | `transport.tcp_delack_count` | 2 | `__tcp_ack_snd_check` (`tcp_input.c`): ACK once more than one full segment is unacknowledged |
//! | `transport.tcp_delack_timeout_us` | 40 000 | `TCP_DELACK_MIN` (HZ / 25) |
//! | `transport.tcp_delack_write_end` | `true` | `tcp_measure_rcv_mss` marks a write's last segment (PSH) `ICSK_ACK_PUSHED`; `__tcp_cleanup_rbuf` ACKs it once read |
//! | `transport.rto_min_us` | 200 000 | `TCP_RTO_MIN` (HZ / 5) |
//! | `transport.tcp_partial_ack_resend` | `false` | only what the scoreboard deems lost is resent (`tcp_xmit_retransmit_queue`) |
//! | `transport.tcp_slow_start` | `"per_segment"` | `tcp_slow_start` (`tcp_cong.c`): cwnd grows by the segments acknowledged |
//! | `transport.tcp_cong_avoid` | `"per_segment"` | `tcp_reno_cong_avoid` (Reno, DCTCP's `.cong_avoid`) calls `tcp_cong_avoid_ai` with the segments acknowledged or SACKed: one segment per window's worth, however many segments an ACK covers (CUBIC has its own curve) |
//! | `transport.tcp_recovery_from_cwr` | `true` | `tcp_fastretrans_alert` (`tcp_input.c`): `tcp_time_to_recover` enters Recovery from any state below it, CWR included |
//! | `transport.tcp_loss_exit_ack` | `"all"` | `tcp_cong_control`: in Loss too, `tcp_cong_avoid` grows cwnd by every segment acked or SACKed |
//! | `transport.tcp_rto_backoff_reset` | `"rtt_sample"` | `tcp_ack_update_rtt`: "RFC6298: only reset backoff on valid RTT measurement" |
//! | `transport.tcp_loss_cut` | `"cwnd"` | `tcp_init_cwnd_reduction` and `tcp_enter_loss` (`tcp_input.c`): ssthresh from `tcp_reno_ssthresh` (`max(cwnd >> 1, 2)`; DCTCP's `dctcp_react_to_loss` alike), PRR's RecoverFS `prior_cwnd`; an RTO in a window already cut keeps its ssthresh |
//!
//! SACK recovery always runs PRR (RFC 6937; `tcp_cwnd_reduction`, Linux's default since
//! 3.2). `rto_initial_us` is not filled: Linux's `TCP_TIMEOUT_INIT` (1 s) times the SYN,
//! and the handshake's RTT sample puts a datacenter flow's first data RTO at RTOmin, which
//! is what `rto_initial_us` left out gives. Not modelled: HyStart's samples from SACKed
//! segments (only cumulative ACKs feed it), `bictcp_update`'s target one `delay_min`
//! ahead (the smoothed RTT here) and its once-a-jiffy update, quick-ACK mode at
//! connection start, DSACK (a resend ACKed faster than min_RTT stands in), timestamps,
//! pacing, an ECN cut paced by PRR (Linux runs `tcp_cwnd_reduction` in CWR too; gradwire
//! cuts at once, and `tcp_ecn_cut = "prr"` is ns-3's variant), recovery entered from CWR
//! keeping the CWR's PRR state and recovery point (`tcp_enter_recovery`; gradwire starts
//! both afresh), Linux 6.x's PRR bound below ssthresh (docs/validation.md measures it).
//!
//! `baseline = "ns3"`: ns-3.37's TCP with its default attributes, and the settings an ns-3
//! user of 2023 running dlcp.md §5.2 would have had around it:
//!
//! | key | value | ns-3.37's source |
//! |---|---|---|
//! | `transport.tcp_sack` | `true` | `TcpSocketBase::Sack` |
//! | `transport.tcp_rack_tlp` | `false` | ns-3.37 has no RACK or TLP |
//! | `transport.tcp_partial_ack_resend` | `true` | `TcpSocketBase::ProcessAck`: a partial ACK in recovery calls `DoRetransmit` |
//! | `transport.tcp_delack_count` | 2 | `TcpSocket::DelAckCount` |
//! | `transport.tcp_delack_timeout_us` | 200 000 | `TcpSocket::DelAckTimeout` |
//! | `transport.rto_min_us` | 1 000 000 | `TcpSocketBase::MinRto` |
//! | `transport.tcp_cc` | `"cubic"` (kind `newreno` without `newreno_ecn`) | `TcpL4Protocol::SocketType = TcpCubic` |
//! | `transport.tcp_slow_start` | `"per_ack"` where `tcp_cc = "reno"` is set, else `"per_segment"` | `TcpNewReno::SlowStart` (one segment per ACK); `TcpCubic` and `TcpDctcp` (a `TcpLinuxReno`) count segments |
//! | `transport.tcp_cong_avoid` | `"per_segment_ns3"` for kinds `dctcp` and `pias` | `TcpLinuxReno::CongestionAvoidance` (`TcpDctcp`'s parent) counts the segments acknowledged (`m_cWndCnt`); `TcpNewReno::CongestionAvoidance` adds `segmentSize² / cWnd` per ACK, gradwire's default |
//! | `transport.tcp_recovery_from_cwr` | `false` | `TcpSocketBase::DupAck` counts duplicate ACKs in `CA_CWR` but calls `EnterRecovery` only from `CA_DISORDER` (reached only from `CA_OPEN`); `ProcessAck`'s `CA_CWR` branch: "TODO: need to check behavior if marking is compounded by loss" |
//! | `transport.tcp_loss_exit_ack` | `"above_recover"` | `TcpSocketBase::ProcessAck`, `CA_LOSS` → `CA_OPEN`: `segsAcked = (ackNumber - m_recover) / m_segmentSize` goes to `IncreaseWindow` |
//! | `transport.tcp_rto_backoff_reset` | `"new_ack"` | `TcpSocketBase::NewAck`: `m_rto = Max(m_rtt->GetEstimate() + Max(m_clockGranularity, 4 * m_rtt->GetVariation()), m_minRto)` on every new ACK (ns-3 skips it on a partial ACK in recovery after the first; gradwire does not) |
//! | `transport.tcp_delack_first_at_once` | `true` | `TcpSocketBase::ProcessSynRcvd`: `m_delAckCount = m_delAckMaxCount`, "Always respond to first data packet to speed up the connection" |
//! | `transport.tcp_ce_seq_check` | `true` | `TcpSocketBase::ForwardUp`: a CE mark counts only if `m_ecnCESeq < seq`; otherwise `CA_EVENT_ECN_NO_CE` |
//! | `transport.tcp_ecn_cut` | `"prr"` | `TcpSocketBase::EnterCwr` leaves cwnd to `TcpPrrRecovery::DoRecovery` on entry and on each ACK in `CA_CWR` |
//! | `transport.tcp_loss_cut` | `"pipe"` where `tcp_cc = "reno"` is set | `EnterRecovery` and `ReTxTimeout` pass `BytesInFlight()` (RFC 6675's pipe) to `TcpNewReno::GetSsThresh` |
//! | `transport.dctcp_ssthresh` | `"ns3"` for kinds `dctcp` and `pias` | `TcpDctcp::GetSsThresh`: `(1 - alpha / 2) * cWnd`, no floor, on ECN, recovery and RTO alike |
//! | `transport.tcp_ce_change_ack` | `"lagged"` for kinds `dctcp` and `pias` | `TcpDctcp::CeState0to1` / `CeState1to0`: the ACK for `m_priorRcvNxt`, read before the segment is added |
//! | `host.nic` | `"fifo"` | a point-to-point NetDevice's transmit queue is one drop-tail FIFO |
//! | `host.nic_queue_bytes` | 150 000 | its default size, 100 packets of 1500 B |
//! | `transport.tcp_handshake` | `true` | ns-3 sockets connect before they send |
//! | `transport.tcp_connections` | `"per_flow"` | one socket (application) per flow |
//! | `transport.tcp_conn_timeout_us` | 3 000 000 | `TcpSocket::ConnTimeout` |
//! | `transport.pfabric_rto_us` | `transport.rto_min_us` | dlcp.md gives one RTOmin (10 ms) for every baseline |
//! | `transport.pias_thresholds_from_workload` | `true` (unless `pias_thresholds` is set) | PIAS tunes its thresholds to the workload's flow sizes |
//!
//! Recovery is RFC 6675 with PRR (`TcpL4Protocol::RecoveryType = TcpPrrRecovery`), which
//! gradwire's SACK recovery always runs. Not modelled: timestamps (`Timestamp = true`, 12
//! bytes a segment), `ClockGranularity` (1 ms, below every RTOmin used here),
//! `TcpCubic::HyStart` (ns-3's own, older than Linux's `tcp_hystart`), `TcpCubic`'s growth
//! by the cubic curve alone (ns-3.37's `TcpCubic::Update` has no Reno-friendly region;
//! gradwire's CUBIC keeps RFC 9438's); limited transmit only acts without SACK in ns-3.37.
//! `validation/compare.py --tcp ns3` runs the same keys against ns-3 (docs/validation.md).
//!
//! `baseline = "sackless"`: the TCP of the papers' ns-3 runs (`Sack = false`,
//! `DelAckCount = 1`, NewReno) and gradwire's default before SACK: runs are byte-identical
//! to that default.
//!
//! | key | value |
//! |---|---|
//! | `transport.tcp_sack`, `tcp_rack_tlp`, `tcp_partial_ack_resend` | `false` |
//! | `transport.tcp_cc` | `"reno"` (NewReno, RFC 6582 recovery) |
//! | `transport.tcp_delack_count` | 1 (every segment ACKed at once) |
//! | `transport.tcp_slow_start` | `"per_segment"` |
//!
//! `rto_min_us` keeps the schema's 10 ms under `sackless`.

use super::ScenarioError;

/// ns-3's `PointToPointNetDevice` transmit queue: `DropTailQueue`, 100 packets.
pub const NS3_NIC_QUEUE_BYTES: i64 = 100 * 1500;

/// Fill the preset named by `baseline` into `tree`, where its keys are absent.
pub fn apply(tree: &mut toml::Table) -> Result<(), ScenarioError> {
    match tree.get("baseline") {
        None => modern(tree),
        Some(toml::Value::String(s)) if s == "modern" || s == "linux" => modern(tree),
        Some(toml::Value::String(s)) if s == "ns3" => ns3(tree),
        Some(toml::Value::String(s)) if s == "sackless" => sackless(tree),
        // anything else: serde names the valid values
        Some(_) => Ok(()),
    }
}

/// `transport.newreno_ecn = true`: RFC 3168 NewReno was asked for, which keeps Reno's growth.
fn newreno_ecn(tree: &toml::Table) -> bool {
    tree.get("transport").and_then(|t| t.get("newreno_ecn")).and_then(|v| v.as_bool()) == Some(true)
}

fn kind(tree: &toml::Table) -> Option<&str> {
    tree.get("transport").and_then(|t| t.get("kind")).and_then(|k| k.as_str())
}

/// Linux's default TCP ([module docs](self)).
fn modern(tree: &mut toml::Table) -> Result<(), ScenarioError> {
    fill(tree, "transport", "tcp_sack", true.into())?;
    fill(tree, "transport", "tcp_rack_tlp", true.into())?;
    fill(tree, "transport", "tcp_rack_min_rtt", "idle_path".into())?;
    if kind(tree) == Some("newreno") && !newreno_ecn(tree) {
        fill(tree, "transport", "tcp_cc", "cubic".into())?;
    }
    if tree.get("transport").and_then(|t| t.get("tcp_cc")).and_then(|c| c.as_str()) == Some("cubic") {
        fill(tree, "transport", "tcp_hystart", true.into())?;
        fill(tree, "transport", "tcp_cubic_variant", "linux".into())?;
    }
    fill(tree, "transport", "tcp_delack_count", 2.into())?;
    fill(tree, "transport", "tcp_delack_timeout_us", LINUX_DELACK_MIN_US.into())?;
    fill(tree, "transport", "tcp_delack_write_end", true.into())?;
    fill(tree, "transport", "rto_min_us", LINUX_RTO_MIN_US.into())?;
    fill(tree, "transport", "tcp_partial_ack_resend", false.into())?;
    fill(tree, "transport", "tcp_slow_start", "per_segment".into())?;
    fill(tree, "transport", "tcp_cong_avoid", "per_segment".into())?;
    fill(tree, "transport", "tcp_recovery_from_cwr", true.into())?;
    fill(tree, "transport", "tcp_loss_exit_ack", "all".into())?;
    fill(tree, "transport", "tcp_rto_backoff_reset", "rtt_sample".into())?;
    fill(tree, "transport", "tcp_loss_cut", "cwnd".into())?;
    Ok(())
}

/// ns-3.37's default TCP and the hosts around it ([module docs](self)).
fn ns3(tree: &mut toml::Table) -> Result<(), ScenarioError> {
    fill(tree, "transport", "tcp_sack", true.into())?;
    fill(tree, "transport", "tcp_rack_tlp", false.into())?;
    fill(tree, "transport", "tcp_partial_ack_resend", true.into())?;
    fill(tree, "transport", "tcp_delack_count", 2.into())?;
    fill(tree, "transport", "tcp_delack_timeout_us", NS3_DELACK_TIMEOUT_US.into())?;
    fill(tree, "transport", "rto_min_us", NS3_MIN_RTO_US.into())?;
    fill(tree, "transport", "tcp_recovery_from_cwr", false.into())?;
    fill(tree, "transport", "tcp_loss_exit_ack", "above_recover".into())?;
    fill(tree, "transport", "tcp_rto_backoff_reset", "new_ack".into())?;
    fill(tree, "transport", "tcp_delack_first_at_once", true.into())?;
    fill(tree, "transport", "tcp_ce_seq_check", true.into())?;
    fill(tree, "transport", "tcp_ecn_cut", "prr".into())?;
    if kind(tree) == Some("newreno") && !newreno_ecn(tree) {
        fill(tree, "transport", "tcp_cc", "cubic".into())?;
    }
    if kind(tree) == Some("newreno") {
        let cc = tree.get("transport").and_then(|t| t.get("tcp_cc")).and_then(|c| c.as_str());
        let reno = cc.is_none_or(|c| c == "reno");
        fill(tree, "transport", "tcp_slow_start", if reno { "per_ack" } else { "per_segment" }.into())?;
        if reno {
            fill(tree, "transport", "tcp_loss_cut", "pipe".into())?;
        }
    }
    if matches!(kind(tree), Some("dctcp") | Some("pias")) {
        fill(tree, "transport", "tcp_cong_avoid", "per_segment_ns3".into())?;
        fill(tree, "transport", "dctcp_ssthresh", "ns3".into())?;
        fill(tree, "transport", "tcp_ce_change_ack", "lagged".into())?;
    }
    let rto_min = lookup_f64(tree, "transport", "rto_min_us").unwrap_or(NS3_MIN_RTO_US);
    let has_pias_list = tree
        .get("transport")
        .and_then(|t| t.get("pias_thresholds"))
        .and_then(|v| v.as_array())
        .is_some_and(|a| !a.is_empty());
    fill(tree, "host", "nic", "fifo".into())?;
    fill(tree, "host", "nic_queue_bytes", NS3_NIC_QUEUE_BYTES.into())?;
    fill(tree, "transport", "tcp_handshake", true.into())?;
    fill(tree, "transport", "tcp_connections", "per_flow".into())?;
    fill(tree, "transport", "tcp_conn_timeout_us", gradwire_core::transport::tcp::spec::NS3_CONN_TIMEOUT_US.into())?;
    fill(tree, "transport", "pfabric_rto_us", rto_min.into())?;
    if !has_pias_list {
        fill(tree, "transport", "pias_thresholds_from_workload", true.into())?;
    }
    Ok(())
}

/// The SACK-less TCP of the papers' ns-3 runs ([module docs](self)).
fn sackless(tree: &mut toml::Table) -> Result<(), ScenarioError> {
    fill(tree, "transport", "tcp_sack", false.into())?;
    fill(tree, "transport", "tcp_rack_tlp", false.into())?;
    fill(tree, "transport", "tcp_partial_ack_resend", false.into())?;
    fill(tree, "transport", "tcp_cc", "reno".into())?;
    fill(tree, "transport", "tcp_delack_count", 1.into())?;
    fill(tree, "transport", "tcp_slow_start", "per_segment".into())?;
    Ok(())
}

/// Linux's `TCP_DELACK_MIN` and `TCP_RTO_MIN`, µs.
pub const LINUX_DELACK_MIN_US: f64 = 40_000.0;
pub const LINUX_RTO_MIN_US: f64 = 200_000.0;
/// ns-3.37's `TcpSocket::DelAckTimeout` and `TcpSocketBase::MinRto`, µs.
pub const NS3_DELACK_TIMEOUT_US: f64 = 200_000.0;
pub const NS3_MIN_RTO_US: f64 = 1_000_000.0;

fn lookup_f64(tree: &toml::Table, table: &str, key: &str) -> Option<f64> {
    match tree.get(table)?.get(key)? {
        toml::Value::Float(f) => Some(*f),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

fn fill(tree: &mut toml::Table, table: &str, key: &str, value: toml::Value) -> Result<(), ScenarioError> {
    let t = tree.entry(table).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(t) = t else {
        return Err(ScenarioError::new(table, "must be a table"));
    };
    t.entry(key).or_insert(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::scenario::{load, Baseline, NicDiscipline, TransportCfg};

    const BASE: &str = "[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 1000\n";
    const RENO: &str = "[transport]\nkind = \"newreno\"\n";

    fn transport(baseline: Option<&str>, body: &str, ov: &[&str]) -> TransportCfg {
        let head = baseline.map(|b| format!("baseline = \"{b}\"\n")).unwrap_or_default();
        let ov: Vec<String> = ov.iter().map(|s| s.to_string()).collect();
        load(&format!("{head}{BASE}{body}"), &ov).unwrap()[0].scenario.transport.clone()
    }

    #[test]
    fn modern_is_the_default_and_fills_linuxs_documented_keys() {
        for b in [None, Some("modern"), Some("linux")] {
            let t = transport(b, RENO, &[]);
            assert!(
                t.keys.bool("tcp_sack") && t.keys.bool("tcp_rack_tlp") && !t.keys.bool("tcp_partial_ack_resend"),
                "{b:?}"
            );
            assert_eq!(t.keys.str("tcp_cc"), "cubic");
            assert!(t.keys.bool("tcp_hystart"), "tcp_cubic.c's hystart = 1");
            assert_eq!(t.keys.str("tcp_cubic_variant"), "linux", "tcp_cubic.c's bictcp_update");
            assert_eq!((t.keys.u32("tcp_delack_count"), t.keys.f64("tcp_delack_timeout_us")), (2, 40_000.0));
            assert!(t.keys.bool("tcp_delack_write_end"), "Linux answers a write's last segment once read");
            assert_eq!(
                (t.keys.f64("rto_min_us"), t.keys.opt_f64("rto_initial_us")),
                (200_000.0, None),
                "the data's first RTO is RTOmin"
            );
            assert_eq!(t.keys.str("tcp_slow_start"), "per_segment");
            assert!(t.keys.bool("tcp_recovery_from_cwr"), "Linux enters recovery from CWR");
            assert_eq!((t.keys.str("tcp_loss_exit_ack"), t.keys.str("tcp_rto_backoff_reset")), ("all", "rtt_sample"));
            assert_eq!(t.keys.str("tcp_loss_cut"), "cwnd", "Linux cuts from cwnd, not the flight");
        }
        let s = &load(BASE, &[]).unwrap()[0].scenario;
        assert_eq!(s.baseline, Baseline::Modern);
        assert!(!s.transport.keys.bool("tcp_handshake") && s.host.nic == NicDiscipline::RoundRobin);
        let t = transport(None, RENO, &["transport.rto_min_us=5000", "transport.kind=\"dctcp\""]);
        assert_eq!(t.keys.f64("rto_min_us"), 5000.0, "an explicit key wins");
        assert_eq!(t.keys.str("tcp_cc"), "reno", "DCTCP keeps its own growth");
        assert!(!t.keys.bool("tcp_hystart"), "and its slow start");
        assert!(t.keys.bool("tcp_sack") && t.keys.bool("tcp_rack_tlp"), "and recovers as Linux does");
    }

    #[test]
    fn sackless_is_the_tcp_before_sack_key_for_key() {
        let t = transport(Some("sackless"), RENO, &[]);
        assert!(!t.keys.bool("tcp_sack") && !t.keys.bool("tcp_rack_tlp") && !t.keys.bool("tcp_partial_ack_resend"));
        assert_eq!(
            (t.keys.str("tcp_cc"), t.keys.u32("tcp_delack_count"), t.keys.str("tcp_slow_start")),
            ("reno", 1, "per_segment")
        );
        assert!(t.keys.bool("tcp_recovery_from_cwr"), "the schema's RFC behaviour");
        assert_eq!((t.keys.str("tcp_loss_exit_ack"), t.keys.str("tcp_rto_backoff_reset")), ("all", "rtt_sample"));
        assert_eq!(
            (t.keys.f64("rto_min_us"), t.keys.opt_f64("rto_initial_us")),
            (10_000.0, None),
            "the schema's RTOmin"
        );
        // The transport as the schema's defaults have it, so runs stay byte-identical.
        let none = load(&format!("{BASE}{RENO}tcp_sack = false\ntcp_rack_tlp = false\ntcp_cc = \"reno\"\ntcp_delack_count = 1\ntcp_delack_write_end = false\ntcp_cong_avoid = \"per_ack\"\ntcp_loss_cut = \"flight\"\ntcp_rack_min_rtt = \"samples\"\nrto_min_us = 10000.0\n"), &[]).unwrap();
        assert_eq!(t, none[0].scenario.transport);
    }

    #[test]
    fn the_ns3_preset_fills_ns3s_tcp_and_hosts_and_keeps_what_is_set() {
        let s = &load(&format!("baseline = \"ns3\"\n{BASE}{RENO}"), &[]).unwrap()[0].scenario;
        let t = &s.transport;
        assert!(t.keys.bool("tcp_sack") && !t.keys.bool("tcp_rack_tlp") && t.keys.bool("tcp_partial_ack_resend"));
        assert_eq!(
            (t.keys.u32("tcp_delack_count"), t.keys.f64("tcp_delack_timeout_us"), t.keys.f64("rto_min_us")),
            (2, 200_000.0, 1_000_000.0)
        );
        assert!(!t.keys.bool("tcp_delack_write_end"), "ns-3 holds the last segment like any other");
        assert_eq!(
            (t.keys.str("tcp_cc"), t.keys.str("tcp_slow_start")),
            ("cubic", "per_segment"),
            "ns-3.37's TcpCubic"
        );
        assert!(!t.keys.bool("tcp_recovery_from_cwr"), "ns-3.37's DupAck: no recovery from CA_CWR");
        assert_eq!(
            (t.keys.str("tcp_loss_exit_ack"), t.keys.str("tcp_rto_backoff_reset")),
            ("above_recover", "new_ack"),
            "ns-3.37's ProcessAck leaving CA_LOSS and NewAck"
        );
        assert_eq!((s.host.nic, s.host.nic_queue_bytes), (NicDiscipline::Fifo, 150_000));
        assert!(t.keys.bool("tcp_handshake") && t.keys.bool("pias_thresholds_from_workload"));
        assert_eq!(t.keys.str("tcp_connections"), "per_flow");
        assert_eq!(t.keys.opt_f64("pfabric_rto_us"), Some(t.keys.f64("rto_min_us")));
        let t = transport(Some("ns3"), RENO, &["transport.tcp_cc=\"reno\""]);
        assert_eq!(t.keys.str("tcp_slow_start"), "per_ack", "ns-3's TcpNewReno counts ACKs");
        let ov = ["transport.rto_min_us=5000.0".to_string(), "host.nic=round_robin".to_string()];
        let s = &load(&format!("baseline = \"ns3\"\n{BASE}"), &ov).unwrap()[0].scenario;
        assert_eq!(s.host.nic, NicDiscipline::RoundRobin, "an explicit key wins");
        let t = transport(Some("ns3"), "[transport]\nkind = \"dctcp\"\n", &["transport.tcp_recovery_from_cwr=true"]);
        assert!(t.keys.bool("tcp_recovery_from_cwr"), "an explicit key wins");
        assert_eq!(t.keys.str("tcp_loss_exit_ack"), "above_recover", "DCTCP runs ns-3's TcpSocketBase too");
        assert_eq!(t.keys.str("tcp_cong_avoid"), "per_segment_ns3", "ns-3's TcpDctcp is a TcpLinuxReno");
        assert_eq!(
            (t.keys.str("dctcp_ssthresh"), t.keys.str("tcp_ce_change_ack")),
            ("ns3", "lagged"),
            "TcpDctcp: no floor, CeState0to1/1to0"
        );
        assert!(t.keys.bool("tcp_delack_first_at_once") && t.keys.bool("tcp_ce_seq_check"), "TcpSocketBase");
        assert_eq!(t.keys.str("tcp_ecn_cut"), "prr", "EnterCwr with TcpPrrRecovery");
        let t = transport(Some("ns3"), RENO, &["transport.tcp_cc=\"reno\""]);
        assert_eq!(t.keys.str("tcp_cong_avoid"), "per_ack", "ns-3's TcpNewReno: segmentSize^2 / cWnd an ACK");
        assert_eq!(t.keys.str("tcp_loss_cut"), "pipe", "TcpNewReno halves BytesInFlight()");
        assert_eq!(transport(Some("ns3"), RENO, &[]).keys.str("tcp_loss_cut"), "flight", "TcpCubic cuts from cWnd");
        let t = transport(None, "[transport]\nkind = \"dctcp\"\n", &[]);
        assert_eq!(t.keys.str("tcp_cong_avoid"), "per_segment", "modern: Linux's tcp_cong_avoid_ai");
        let t = transport(Some("sackless"), "[transport]\nkind = \"dctcp\"\n", &[]);
        assert_eq!(t.keys.str("tcp_cong_avoid"), "per_ack", "sackless: the papers' ns-3 TcpNewReno growth");
        assert_eq!(s.transport.keys.opt_f64("pfabric_rto_us"), Some(5000.0), "pFabric's RTO follows RTOmin");
    }
}
