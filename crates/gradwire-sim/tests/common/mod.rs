//! What the simulator's integration tests share: the small networks they run on, running a
//! scenario with overrides, and checking that every option of a list keeps packets
//! conserved, finishes every flow and runs deterministic.

// Each test file uses only some of these.
#![allow(dead_code)]

use gradwire_sim::output::flows_csv;
use gradwire_sim::{load, Simulation, Summary};

/// Two racks of 4 hosts under 2 spines (100G, 2:1 oversubscribed), 1 us links.
pub const TWO_RACKS: &str = r#"
[topology]
leaves = 2
hosts_per_leaf = 4
spines = 2
uplinks_per_leaf = 2
link_delay_ns = 1000
"#;

/// [`TWO_RACKS`] with 100 KB switch buffers that mark ECN from 20 packets, training
/// ResNet18 with 4 workers and 2 parameter servers for one iteration: per-tensor incasts.
pub fn two_racks_resnet18_ps() -> String {
    format!(
        r#"{TWO_RACKS}
[switch]
buffer_bytes = 100000
ecn_threshold_packets = 20
[workload]
kind = "dnn"
model = "resnet18"
workers = 4
servers = 2
iterations = 1
"#
    )
}

/// Two racks of `hosts_per_leaf` 10G hosts under one spine, one 10G uplink a rack, 9.6 us
/// links (77 us base RTT across racks); one switch queue with 10 MB of buffer that marks
/// ECN from `ecn` packets and drops from `drop`.
pub fn ten_gig_racks(hosts_per_leaf: u32, ecn: u32, drop: u32) -> String {
    format!(
        r#"
[topology]
spines = 1
leaves = 2
hosts_per_leaf = {hosts_per_leaf}
host_link_gbps = 10.0
uplinks_per_leaf = 1
uplink_gbps = 10.0
link_delay_ns = 9613
[switch]
buffer_bytes = 10000000
ecn_threshold_packets = {ecn}
drop_threshold_packets = {drop}
queues = 1
"#
    )
}

/// `text` with `overrides` (`key=value`), ready to run.
pub fn build(text: &str, overrides: &[&str]) -> Simulation {
    let ov: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let runs = load(text, &ov).unwrap_or_else(|e| panic!("{e}"));
    Simulation::new(&runs[0].scenario).unwrap_or_else(|e| panic!("{e}"))
}

/// `text` with `overrides`, run to the end.
pub fn finished(text: &str, overrides: &[&str]) -> Simulation {
    let mut s = build(text, overrides);
    s.run();
    s
}

/// `text` with `overrides`, run to the end: flows.csv and the summary.
pub fn run(text: &str, overrides: &[&str]) -> (String, Summary) {
    let s = finished(text, overrides);
    (flows_csv(&s), s.summary())
}

/// Each option set run twice by `run`: the same flows.csv, every flow finished, packets
/// conserved. Returns each set's run.
pub fn conserved_and_deterministic(
    run: impl Fn(&[&str]) -> (String, Summary),
    options: &[&[&str]],
) -> Vec<(String, Summary)> {
    let mut outputs = Vec::new();
    for ov in options {
        let (a, sa) = run(ov);
        let (b, _) = run(ov);
        assert_eq!(a, b, "{ov:?}: not deterministic");
        assert_eq!(sa.flows_finished, sa.flows, "{ov:?}");
        assert!(sa.packets.conserved, "{ov:?}: {:?}", sa.packets);
        outputs.push((a, sa));
    }
    outputs
}
