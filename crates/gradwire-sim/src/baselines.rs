//! The baselines' realism options (`transport.tcp_handshake`, `tcp_connections`,
//! `pias_thresholds_from_workload`): what `transports.rs` adds around a TCP-based flow.

use crate::scenario::{Scenario, TcpConnections, TransportKind};
use gradwire_core::time::from_us;
use gradwire_core::transport::tcp::handshake::{Accepting, Connecting, HandshakeConfig};
use gradwire_core::transport::Pair;
use std::cell::RefCell;
use std::collections::HashSet;

/// Opens TCP connections in front of flows, per flow or once per host pair.
pub struct Handshakes {
    cfg: HandshakeConfig,
    /// `Some` with `tcp_connections = "per_pair"` or `"persistent"`: the pairs already
    /// connected.
    connected: Option<RefCell<HashSet<(u32, u32)>>>,
}

impl Handshakes {
    /// `Some` when the scenario's transport is TCP-based and opens connections.
    pub fn new(s: &Scenario) -> Option<Handshakes> {
        let tr = &s.transport;
        let tcp_based = matches!(tr.kind, TransportKind::NewReno | TransportKind::Dctcp | TransportKind::Pias);
        (tr.tcp_handshake && tcp_based).then(|| Handshakes {
            cfg: HandshakeConfig {
                conn_timeout: from_us(tr.tcp_conn_timeout_us),
                max_timeout: from_us(tr.rto_max_us),
                bytes: tr.ack_bytes,
                priority: tr.priority,
            },
            connected: (tr.tcp_connections != TcpConnections::PerFlow).then(Default::default),
        })
    }

    /// Flow `f`'s pair, behind a handshake if its connection must be opened.
    pub fn wrap(&self, f: u32, src: u32, dst: u32, bytes: u64, (s, r): Pair) -> Pair {
        if let Some(done) = &self.connected {
            if !done.borrow_mut().insert((src, dst)) {
                return (s, r);
            }
        }
        (Box::new(Connecting::new(s, self.cfg, f, src, dst, bytes)), Box::new(Accepting::new(r, self.cfg, f, dst, src)))
    }
}

/// PIAS demotion thresholds for a workload: the flow-size quantiles `i / levels`
/// (i = 1 .. levels-1), so each of `levels` queues is where an equal share of the flows
/// finish. PIAS derives them from the size distribution by optimisation (pias.md §4.2);
/// equal-count quantiles are the simple rule that puts them where the sizes are.
pub fn pias_thresholds(sizes: impl Iterator<Item = u64>, levels: u8) -> Vec<u64> {
    let mut sizes: Vec<u64> = sizes.filter(|&b| b > 0).collect();
    sizes.sort_unstable();
    let mut out: Vec<u64> = Vec::new();
    if sizes.is_empty() {
        return out;
    }
    for i in 1..levels.clamp(1, 8) as usize {
        let t = sizes[(i * sizes.len() / levels as usize).min(sizes.len() - 1)];
        if out.last().is_none_or(|&last| t > last) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;
    use crate::sim::Simulation;
    use gradwire_core::time::MS;

    #[test]
    fn a_lost_syn_waits_for_the_connection_timeout_in_the_simulator() {
        // one-packet flows over lossy links: a flow whose SYN or SYN-ACK is lost takes the
        // 20 ms connection timeout, one whose data is lost the 1 ms RTO (SACK-less TCP
        // without delayed ACKs, whose single-segment flows are ACKed at once; a SYN lost
        // five times would outlast the run)
        let flows: Vec<String> = (0..40)
            .map(|i| format!("{{src = 0, dst = {}, bytes = 1460, start_us = {}}}", 1 + i % 3, i as f64))
            .collect();
        let text = format!(
            "stop_ms = 500\nbaseline = \"sackless\"\n[topology]\nleaves = 1\nspines = 1\nhosts_per_leaf = 4\nlink_delay_ns = 1000\n\
             link_loss_rate = 0.15\n[transport]\nkind = \"dctcp\"\nrto_min_us = 1000.0\ntcp_handshake = true\n\
             tcp_conn_timeout_us = 20000.0\n[workload]\nkind = \"flows\"\nflows = [{}]\n",
            flows.join(", ")
        );
        let s = &load(&text, &[]).unwrap()[0].scenario;
        let mut sim = Simulation::new(s).unwrap();
        sim.run();
        assert!(sim.conservation().holds());
        let fct: Vec<u64> = sim.flows.iter().map(|f| f.finished().unwrap() - f.started().unwrap()).collect();
        let waited = fct.iter().filter(|&&t| t >= 20 * MS).count();
        let quick = fct.iter().filter(|&&t| t < MS).count();
        assert!(waited > 0 && quick > waited, "{fct:?}");
        // without the handshake the same losses cost at most RTOs of 1 ms (doubling)
        let s = &load(&text.replace("tcp_handshake = true", "tcp_handshake = false"), &[]).unwrap()[0].scenario;
        let mut sim = Simulation::new(s).unwrap();
        sim.run();
        assert!(sim.flows.iter().all(|f| f.finished().unwrap() - f.started().unwrap() < 20 * MS));
    }

    #[test]
    fn pias_thresholds_are_the_size_quantiles_and_strictly_increase() {
        let sizes = (1..=800u64).map(|i| i * 1000);
        assert_eq!(pias_thresholds(sizes, 8), vec![101_000, 201_000, 301_000, 401_000, 501_000, 601_000, 701_000]);
        // repeated sizes collapse into one threshold
        let few = [5u64, 5, 5, 5, 9, 9, 9, 9].into_iter();
        assert_eq!(pias_thresholds(few, 4), vec![5, 9]);
        assert!(pias_thresholds(std::iter::empty(), 8).is_empty());
    }
}
