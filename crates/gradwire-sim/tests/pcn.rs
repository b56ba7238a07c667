//! PCN in the simulator: every announced burst restores the ports it lowered, a worker
//! whose ACK never comes still sends, and PCN shortens the queue a burst meets.

mod common;

use gradwire_sim::load;

/// pcn-ddlgen shrunk: 2 leaves x 4 hosts at 10G; workers 0 and 1 push 300 KB bursts to
/// the PS (host 4) beside long flows 2->6 and 7->3.
fn net() -> String {
    let bursts = r#"
[transport]
rto_min_us = 1000.0
[pcn]
enabled = true
k = 0.25
[workload]
kind = "ddlgen"
sender_list = [0, 1]
receiver = 4
flow_bytes = 300000
iterations = 4
idle_us = 2000.0
start_us = 5000.0
flows = [{ src = 2, dst = 6, bytes = 100000000000 }, { src = 7, dst = 3, bytes = 100000000000 }]
"#;
    format!("stop_ms = 40.0\n{}{bursts}", common::ten_gig_racks(4, 40, 60))
}

fn run(overrides: &[&str]) -> gradwire_sim::Summary {
    common::finished(&net(), overrides).summary()
}

#[test]
fn every_burst_restores_the_ports_it_lowered() {
    let s = run(&[]);
    let pcn = s.pcn.expect("pcn is on");
    assert_eq!((pcn.initial_threshold, pcn.pcn_threshold), (40, 10), "pcn.md §3.3 at RTT·C/(√3·MTU) = 37");
    assert_eq!((pcn.starts_sent, pcn.acks_sent, pcn.released_by_ack, pcn.released_by_fallback), (8, 8, 8, 0));
    // each START lowers the 3 switch ports on its way (leaf0, spine, leaf1 egress);
    // each burst's first packet restores the same 3; two workers share them
    assert_eq!(pcn.port_starts, 8 * 3);
    assert_eq!(pcn.port_bursts, pcn.port_starts);
    assert_eq!((pcn.port_lease_expiries, pcn.ports_lowered_at_end), (0, 0));
    assert_eq!(s.flows_finished, 8, "every burst arrived (the 2 long flows run to the stop)");
    assert!(s.packets.conserved);
}

#[test]
fn a_worker_whose_ack_never_comes_sends_after_the_fallback() {
    // the PS's NIC holds everything it would send from 4.9 ms on: no ACK leaves it
    // (its TCP ACKs are held too, until the pause ends at 9.9 ms)
    let pause = [
        "pauses.hosts=1",
        "pauses.among=[4]",
        "pauses.hold=\"all\"",
        "pauses.start_us=4900.0",
        "pauses.period_us=5000.0",
        "pauses.stop_us=5000.0",
    ];
    let s = run(&pause);
    let pcn = s.pcn.unwrap();
    assert!(pcn.released_by_fallback >= 2, "{pcn:?}");
    assert_eq!(pcn.released_by_ack + pcn.released_by_fallback, pcn.starts_sent);
    assert_eq!(s.flows_finished, 8, "no worker stalls: every burst completes");
    assert_eq!(pcn.ports_lowered_at_end, 0, "the burst marks (or the lease) restored every port");
}

#[test]
fn pcn_off_sends_no_start_and_writes_no_pcn_summary() {
    let s = run(&["pcn.enabled=false"]);
    assert!(s.pcn.is_none());
    assert_eq!(s.flows_finished, 8);
}

#[test]
fn bad_pcn_keys_are_named() {
    let key = |ov: &str| load(&net(), &[ov.to_string()]).expect_err("invalid").key;
    // a bad value is named by the key it was set on
    for ov in [
        "pcn.threshold=12",
        "pcn.threshold=80",
        "pcn.k=0.0",
        "pcn.long_flows=0",
        "pcn.burst_delay_us=-1.0",
        "switch.ecn_threshold_packets=0",
    ] {
        assert_eq!(key(ov), ov.split_once('=').unwrap().0);
    }
    // and a list's element by its index
    assert_eq!(key("workload.sender_list=[4]"), "workload.sender_list.0");
}

/// Burst start times of a run (ns), one per iteration (worker 0's bursts).
fn burst_starts(overrides: &[&str]) -> Vec<u64> {
    let sim = common::finished(&net(), overrides);
    let csv = gradwire_sim::output::flows_csv(&sim);
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|v| v[1] == "0" && v[2] == "4")
        .map(|v| v[4].parse().unwrap())
        .collect()
}

#[test]
fn idle_jitter_varies_the_burst_phase_per_seed() {
    let gaps = |starts: &[u64]| -> Vec<u64> { starts.windows(2).map(|w| w[1] - w[0]).collect() };
    let plain = burst_starts(&["pcn.enabled=false"]);
    let jittered = burst_starts(&["pcn.enabled=false", "workload.idle_jitter_us=500.0"]);
    assert_eq!((plain.len(), jittered.len()), (4, 4));
    assert_ne!(gaps(&plain), gaps(&jittered), "the jitter moves the bursts");
    // drawn when the workload is built: a function of the seed
    assert_eq!(jittered, burst_starts(&["pcn.enabled=false", "workload.idle_jitter_us=500.0"]));
    assert_ne!(jittered, burst_starts(&["pcn.enabled=false", "workload.idle_jitter_us=500.0", "seed=9"]));
}

#[test]
fn burst_delay_starts_each_burst_that_long_after_its_ack() {
    let plain = burst_starts(&[]);
    let delayed = burst_starts(&["pcn.burst_delay_us=300.0"]);
    assert_eq!((plain.len(), delayed.len()), (4, 4));
    // the first burst's ACK comes at the same time in both runs: its start moves by exactly the delay
    assert_eq!(delayed[0] - plain[0], 300_000);
    let s = run(&["pcn.burst_delay_us=300.0"]);
    let pcn = s.pcn.unwrap();
    // every worker waited its START-ACK round trip (at least the base RTT) plus the delay
    let base = run(&[]).pcn.unwrap();
    assert!(base.waited_ns >= 8 * 76_900, "{base:?}");
    assert!(pcn.waited_ns >= base.waited_ns + 8 * 300_000 - 8 * 20_000, "{pcn:?} vs {base:?}");
    assert_eq!(
        (pcn.released_by_ack, pcn.released_by_fallback),
        (8, 0),
        "the fallback timer does not cut the delay short"
    );
    assert_eq!((pcn.port_bursts, pcn.port_lease_expiries, pcn.ports_lowered_at_end), (pcn.port_starts, 0, 0));
    assert_eq!(s.flows_finished, 8);
}
