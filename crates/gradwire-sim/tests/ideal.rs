//! The ideal (fluid) rows are floors: on a small DNN scenario every simulated scheme's
//! mean and p99 FCT, and its iteration ends, lie above the fluid SRPT-with-loss-bound run,
//! and fair sharing lies below every fair-sharing scheme's p99.

use gradwire_sim::{load, Simulation, Summary};

/// 8 hosts in 2 racks (2:1 oversubscribed), ResNet18 PS, 4 workers / 2 servers, 2 iterations.
const SMALL: &str = r#"
name = "ideal-floor"
[topology]
leaves = 2
hosts_per_leaf = 4
spines = 2
uplinks_per_leaf = 2
link_delay_ns = 1000
[switch]
buffer_bytes = 100000
ecn_threshold_packets = 20
[transport]
rto_min_us = 1000.0
mss_bytes = 8960
[workload]
kind = "dnn"
model = "resnet18"
workers = 4
servers = 2
iterations = 2
"#;

const SCHEMES: [&[&str]; 4] = [
    &["transport.kind=dctcp"],
    &["transport.kind=pias"],
    &["transport.kind=pfabric", "switch.policy=pfabric", "routing.mode=spray"],
    &["transport.kind=dlcp", "switch.policy=dlcp", "routing.mode=spray"],
];

fn run(overrides: &[&str]) -> (Summary, Simulation) {
    let ov: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let runs = load(SMALL, &ov).unwrap_or_else(|e| panic!("{e}"));
    let mut s = Simulation::new(&runs[0].scenario).unwrap_or_else(|e| panic!("{e}"));
    s.run();
    (s.summary(), s)
}

#[test]
fn fluid_rows_lower_bound_every_scheme() {
    let (srpt, _) = run(&["ideal=srpt"]);
    let (fair, _) = run(&["ideal=fair"]);
    for ideal in [&srpt, &fair] {
        assert_eq!(ideal.flows_finished, ideal.flows);
        assert!(ideal.packets.conserved && ideal.packets.sent == 0);
    }
    let floor_mean = srpt.fct_mean_ns.unwrap().min(fair.fct_mean_ns.unwrap());
    let floor_p99 = srpt.fct_p99_ns.unwrap().min(fair.fct_p99_ns.unwrap());
    for ov in SCHEMES {
        let (s, _) = run(ov);
        assert_eq!(s.flows_finished, s.flows, "{ov:?}");
        assert!(s.fct_mean_ns.unwrap() >= floor_mean, "{ov:?}: mean {:?} below the floor {floor_mean}", s.fct_mean_ns);
        assert!(s.fct_p99_ns.unwrap() >= floor_p99, "{ov:?}: p99 {:?} below the floor {floor_p99}", s.fct_p99_ns);
        // the whole run (last iteration's end) cannot beat the fluid schedule either
        assert!(s.sim_time_ns >= srpt.sim_time_ns.min(fair.sim_time_ns), "{ov:?}: {} ns", s.sim_time_ns);
        if ov[0] != "transport.kind=pfabric" && ov[0] != "transport.kind=dlcp" {
            // fair-sharing transports: the fair fluid run is below their tail too
            assert!(s.fct_p99_ns.unwrap() >= fair.fct_p99_ns.unwrap(), "{ov:?}");
        }
    }
}

#[test]
fn fluid_runs_are_deterministic_and_leave_packet_runs_alone() {
    let a = gradwire_sim::output::flows_csv(&run(&["ideal=srpt"]).1);
    let b = gradwire_sim::output::flows_csv(&run(&["ideal=srpt"]).1);
    assert_eq!(a, b);
    // `ideal = "off"` is the packet simulation, byte for byte
    let off = gradwire_sim::output::flows_csv(&run(&["transport.kind=dctcp", "ideal=off"]).1);
    let plain = gradwire_sim::output::flows_csv(&run(&["transport.kind=dctcp"]).1);
    assert_eq!(off, plain);
}
