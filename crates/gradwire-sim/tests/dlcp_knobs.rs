//! DLCP options where the paper is silent: every one keeps packets conserved and runs
//! deterministic, and the defaults are the paper's behaviour byte for byte.

mod common;

/// The two-rack ResNet18 PS job with one server (a 3-to-1 push incast per tensor) for two
/// iterations, sprayed, on DLCP with DLCP's switch policy.
const SETUP: &[&str] =
    &["workload.servers=1", "workload.iterations=2", "routing.mode=spray", "transport.kind=dlcp", "switch.policy=dlcp"];

fn run(overrides: &[&str]) -> (String, gradwire_sim::Summary) {
    common::run(&common::two_racks_resnet18_ps(), &[SETUP, overrides].concat())
}

const OPTIONS: [&[&str]; 16] = [
    &[],
    &["transport.dlcp_rate_state=pair"],
    &["transport.dlcp_resend_at_line_rate=false"],
    &["transport.dlcp_rate_state=pair", "transport.dlcp_resend_at_line_rate=false", "transport.rate_period_us=20.0"],
    &["switch.queue0_reserve_bytes=15000", "switch.buffer_bytes=30000"],
    &["host.nic=fifo"],
    &["transport.dlcp_stop_behind_data=true"],
    &["transport.importance=median_profile"],
    &["transport.dlcp_start_rate_frac=0.25"],
    &["transport.dlcp_rate_state=pair_shared"],
    &["transport.dlcp_rate_state=pair_priority"],
    &["transport.dlcp_rate_state=pair_strict"],
    // with the hint as in dlcp-share, and through the FIFO NIC (woken senders get a timer)
    &["transport.dlcp_rate_state=pair_strict", "transport.dlcp_rate_hint=receiver_share", "host.nic=fifo"],
    &["transport.dlcp_rate_hint=receiver_share"],
    &["transport.dlcp_rate_state=pair_strict", "transport.dlcp_rate_restart_us=50"],
    &[
        "transport.dlcp_rate_hint=receiver_share",
        "transport.dlcp_rate_state=pair_shared",
        "transport.dlcp_share_headroom=1",
    ],
];

#[test]
fn every_option_conserves_packets_and_is_deterministic() {
    let outputs: Vec<String> =
        common::conserved_and_deterministic(run, &OPTIONS).into_iter().map(|(csv, _)| csv).collect();
    // the defaults, spelled out, are the paper's behaviour byte for byte
    let (spelled, _) = run(&[
        "transport.dlcp_rate_state=tensor",
        "transport.dlcp_resend_at_line_rate=true",
        "transport.importance=fixed",
        "transport.dlcp_start_rate_frac=1.0",
        "transport.dlcp_rate_hint=none",
        // read only with the hint
        "transport.dlcp_share_headroom=3",
    ]);
    assert_eq!(spelled, outputs[0]);
    // and each option changes the run
    assert!(outputs[1..].iter().all(|o| *o != outputs[0]));
}

#[test]
fn a_pairs_rate_state_restarts_only_after_the_idle_time() {
    let pair = ["transport.dlcp_rate_state=pair"];
    let (kept, _) = run(&pair);
    // an idle time no gap reaches: the state is always carried, as without the key
    let (long, _) = run(&[&pair[..], &["transport.dlcp_rate_restart_us=1e9"]].concat());
    assert_eq!(long, kept);
    // a short one: tensors after an idle gap start at line rate, as with per-tensor state
    let (short, _) = run(&[&pair[..], &["transport.dlcp_rate_restart_us=1"]].concat());
    assert_ne!(short, kept);
}
