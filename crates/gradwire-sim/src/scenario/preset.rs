//! Presets of the baselines' settings. Each fills a key the scenario (after overrides and
//! sweep) leaves out, so anything set explicitly wins.
//!
//! `baseline = "modern"` (the default) is gradwire's own: round-robin NICs, no handshake,
//! and the TCP baselines without SACK or delayed ACKs (NewReno's recovery, RFC 6582), as
//! the papers' ns-3 runs had them.
//!
//! `baseline = "linux"`: TCP as a Linux 6.x host runs it with its default sysctls, for
//! comparisons with what users run (Gloo, NCCL's socket transport):
//!
//! | key | value | Linux's source |
//! |---|---|---|
//! | `transport.tcp_sack` | `true` | `net.ipv4.tcp_sack = 1` |
//! | `transport.tcp_rack_tlp` | `true` | `net.ipv4.tcp_recovery = 1` (RACK), `tcp_early_retrans = 3` (TLP) |
//! | `transport.tcp_cc` | `"cubic"` (kind `newreno` only) | `net.ipv4.tcp_congestion_control = cubic` |
//! | `transport.tcp_delack_count` | 2 | `__tcp_ack_snd_check`: ACK once more than one full segment is unacknowledged |
//! | `transport.tcp_delack_timeout_us` | 40 000 | `TCP_DELACK_MIN` (HZ / 25) |
//! | `transport.rto_min_us` | 200 000 | `TCP_RTO_MIN` (HZ / 5) |
//! | `transport.rto_initial_us` | 1 000 000 | `TCP_TIMEOUT_INIT` (RFC 6298) |
//!
//! Not modelled: HyStart++, PRR (RFC 6937; RFC 6675's recovery stands in), quick-ACK mode
//! at connection start, DSACK (a resend ACKed faster than min_RTT stands in).
//!
//! `baseline = "ns3"`: the settings an ns-3 user of 2023 running dlcp.md §5.2 would have
//! had where gradwire's defaults differ:
//!
//! | key | value | why |
//! |---|---|---|
//! | `host.nic` | `"fifo"` | a point-to-point NetDevice's transmit queue is one drop-tail FIFO |
//! | `host.nic_queue_bytes` | 150 000 | its default size, 100 packets of 1500 B |
//! | `transport.tcp_handshake` | `true` | ns-3 sockets connect before they send |
//! | `transport.tcp_connections` | `"per_flow"` | one socket (application) per flow |
//! | `transport.tcp_conn_timeout_us` | 3 000 000 | `TcpSocket::ConnTimeout` |
//! | `transport.pfabric_rto_us` | `transport.rto_min_us` | dlcp.md gives one RTOmin (10 ms) for every baseline |
//! | `transport.pias_thresholds_from_workload` | `true` (unless `pias_thresholds` is set) | PIAS tunes its thresholds to the workload's flow sizes |

use super::ScenarioError;

/// ns-3's `PointToPointNetDevice` transmit queue: `DropTailQueue`, 100 packets.
pub const NS3_NIC_QUEUE_BYTES: i64 = 100 * 1500;

/// Fill the preset named by `baseline` into `tree`, where its keys are absent.
pub fn apply(tree: &mut toml::Table) -> Result<(), ScenarioError> {
    match tree.get("baseline") {
        None => return Ok(()),
        Some(toml::Value::String(s)) if s == "modern" => return Ok(()),
        Some(toml::Value::String(s)) if s == "ns3" => {}
        Some(toml::Value::String(s)) if s == "linux" => return linux(tree),
        // anything else: serde names the valid values
        Some(_) => return Ok(()),
    }
    let rto_min = lookup_f64(tree, "transport", "rto_min_us").unwrap_or(10_000.0);
    let has_pias_list = tree
        .get("transport")
        .and_then(|t| t.get("pias_thresholds"))
        .and_then(|v| v.as_array())
        .is_some_and(|a| !a.is_empty());
    fill(tree, "host", "nic", "fifo".into())?;
    fill(tree, "host", "nic_queue_bytes", NS3_NIC_QUEUE_BYTES.into())?;
    fill(tree, "transport", "tcp_handshake", true.into())?;
    fill(tree, "transport", "tcp_connections", "per_flow".into())?;
    fill(tree, "transport", "tcp_conn_timeout_us", super::NS3_CONN_TIMEOUT_US.into())?;
    fill(tree, "transport", "pfabric_rto_us", rto_min.into())?;
    if !has_pias_list {
        fill(tree, "transport", "pias_thresholds_from_workload", true.into())?;
    }
    Ok(())
}

/// Linux's default TCP ([module docs](self)).
fn linux(tree: &mut toml::Table) -> Result<(), ScenarioError> {
    fill(tree, "transport", "tcp_sack", true.into())?;
    fill(tree, "transport", "tcp_rack_tlp", true.into())?;
    let kind = tree.get("transport").and_then(|t| t.get("kind")).and_then(|k| k.as_str());
    if kind == Some("newreno") {
        fill(tree, "transport", "tcp_cc", "cubic".into())?;
    }
    fill(tree, "transport", "tcp_delack_count", 2.into())?;
    fill(tree, "transport", "tcp_delack_timeout_us", LINUX_DELACK_MIN_US.into())?;
    fill(tree, "transport", "rto_min_us", LINUX_RTO_MIN_US.into())?;
    fill(tree, "transport", "rto_initial_us", LINUX_RTO_INITIAL_US.into())?;
    Ok(())
}

/// Linux's `TCP_DELACK_MIN`, `TCP_RTO_MIN` and `TCP_TIMEOUT_INIT`, µs.
pub const LINUX_DELACK_MIN_US: f64 = 40_000.0;
pub const LINUX_RTO_MIN_US: f64 = 200_000.0;
pub const LINUX_RTO_INITIAL_US: f64 = 1_000_000.0;

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
    use crate::scenario::{load, NicDiscipline, TcpConnections};

    const BASE: &str = "[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 1000\n";

    #[test]
    fn the_linux_preset_fills_linuxs_tcp_and_keeps_what_is_set() {
        use crate::scenario::TcpCc;
        let reno = "[transport]\nkind = \"newreno\"\n";
        let t = &load(&format!("baseline = \"linux\"\n{BASE}{reno}"), &[]).unwrap()[0].scenario.transport;
        assert!(t.tcp_sack && t.tcp_rack_tlp && t.tcp_cc == TcpCc::Cubic);
        assert_eq!((t.tcp_delack_count, t.rto_min_us, t.rto_initial_us), (2, 200_000.0, Some(1_000_000.0)));
        let ov = ["transport.rto_min_us=5000".to_string(), "transport.kind=\"dctcp\"".to_string()];
        let t = &load(&format!("baseline = \"linux\"\n{BASE}{reno}"), &ov).unwrap()[0].scenario.transport;
        assert_eq!(t.rto_min_us, 5000.0, "an explicit key wins");
        assert_eq!(t.tcp_cc, TcpCc::Reno, "DCTCP keeps its own growth");
        let t = &load(BASE, &[]).unwrap()[0].scenario.transport;
        assert!(!t.tcp_sack && !t.tcp_rack_tlp && t.tcp_delack_count == 1, "modern stays SACK-less");
    }

    #[test]
    fn the_ns3_preset_fills_what_is_left_out_and_keeps_what_is_set() {
        let s = &load(&format!("baseline = \"ns3\"\n{BASE}"), &[]).unwrap()[0].scenario;
        assert_eq!((s.host.nic, s.host.nic_queue_bytes), (NicDiscipline::Fifo, 150_000));
        assert!(s.transport.tcp_handshake && s.transport.pias_thresholds_from_workload);
        assert_eq!(s.transport.tcp_connections, TcpConnections::PerFlow);
        assert_eq!(s.transport.pfabric_rto_us, Some(s.transport.rto_min_us));
        let ov = ["transport.rto_min_us=5000.0".to_string(), "host.nic=round_robin".to_string()];
        let s = &load(&format!("baseline = \"ns3\"\n{BASE}"), &ov).unwrap()[0].scenario;
        assert_eq!(s.host.nic, NicDiscipline::RoundRobin, "an explicit key wins");
        assert_eq!(s.transport.pfabric_rto_us, Some(5000.0), "pFabric's RTO follows RTOmin");
        let modern = &load(BASE, &[]).unwrap()[0].scenario;
        assert!(!modern.transport.tcp_handshake && modern.host.nic == NicDiscipline::RoundRobin);
    }
}
