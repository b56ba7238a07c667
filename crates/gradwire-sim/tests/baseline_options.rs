//! Host NIC discipline and the baselines' realism options: each keeps packets conserved
//! and runs deterministic, and leaving them at their defaults changes nothing.

mod common;

/// The two-rack ResNet18 PS job, sprayed, on DCTCP with a 1 ms RTOmin.
const SETUP: &[&str] = &["routing.mode=spray", "transport.kind=dctcp", "transport.rto_min_us=1000.0"];

fn run(overrides: &[&str]) -> (String, gradwire_sim::Summary) {
    common::run(&common::two_racks_resnet18_ps(), &[SETUP, overrides].concat())
}

const OPTIONS: &[&[&str]] = &[
    &[],
    &["host.nic=fifo"],
    &["host.nic=fifo", "host.nic_queue_bytes=30000"],
    &["host.nic=fifo", "transport.kind=dlcp", "switch.policy=dlcp"],
    &["host.nic=fifo", "transport.kind=pfabric", "switch.policy=pfabric"],
    &["host.nic=fifo", "transport.kind=pias"],
    &["transport.tcp_handshake=true"],
    &["transport.tcp_handshake=true", "transport.tcp_connections=per_pair"],
    &["transport.kind=pias", "transport.pias_thresholds_from_workload=true"],
    &["baseline=ns3"],
    &["baseline=ns3", "transport.kind=pfabric", "switch.policy=pfabric"],
];

#[test]
fn every_option_conserves_packets_and_is_deterministic() {
    let outputs = common::conserved_and_deterministic(run, OPTIONS);
    // the default, spelled out, is the same run byte for byte
    let (spelled, _) = run(&["host.nic=round_robin"]);
    assert_eq!(spelled, outputs[0].0);
    assert_ne!(outputs[1].0, outputs[0].0, "a FIFO NIC changes the run");
    assert!(outputs[2].1.drops["host_nic"] > 0, "a 30 KB FIFO overflows: {:?}", outputs[2].1.drops);
    assert_eq!(outputs[1].1.drops["host_nic"], 0, "an unbounded FIFO never drops");
    // a handshake per flow costs more packets than one per pair, and both change the run
    let (per_flow, per_pair) = (&outputs[6].1, &outputs[7].1);
    assert!(per_flow.packets.sent > per_pair.packets.sent, "{per_flow:?} vs {per_pair:?}");
    assert!(outputs[6..=7].iter().all(|o| o.0 != outputs[0].0));
    let (pias, _) = run(&["transport.kind=pias"]);
    assert_ne!(outputs[8].0, pias, "thresholds from the workload change PIAS's run");
}

/// PIAS is DCTCP whose packets change queue; with one level (a threshold no flow reaches) it
/// is DCTCP to the byte, whatever the TCP keys say: each is read by both or by neither
/// (`tcp_connections = "persistent"` is refused for PIAS, by name).
#[test]
fn pias_with_one_level_is_dctcp_under_every_tcp_key() {
    let one_level = "transport.pias_thresholds=[1099511627776]";
    let keys: &[&[&str]] = &[
        &["baseline=sackless"],
        &[], // `modern`: RACK's minimum RTT from the idle path
        &["transport.tcp_rack_min_rtt=samples"],
        &["transport.tcp_handshake=true", "transport.tcp_connections=per_pair"],
    ];
    let mut dctcps = Vec::new();
    for k in keys {
        let (dctcp, _) = run(k);
        let (pias, _) = run(&[*k, &["transport.kind=pias", one_level]].concat());
        assert!(pias == dctcp, "{k:?}: PIAS with one level is not DCTCP");
        dctcps.push(dctcp);
    }
    // each key changes DCTCP's run, so the equalities above say something
    for (i, k) in keys.iter().enumerate().skip(1) {
        assert!(dctcps[..i].iter().all(|d| *d != dctcps[i]), "{k:?} changes nothing");
    }
}
