//! The ideal (fluid) rows are floors: on a small DNN scenario every simulated scheme's
//! mean and p99 FCT, and its iteration ends, lie above the fluid SRPT-with-loss-bound run,
//! and fair sharing lies below every fair-sharing scheme's p99.

mod common;

use gradwire_sim::{Simulation, Summary};

/// The two-rack ResNet18 PS job for two iterations, 1 ms RTOmin, jumbo segments.
const SETUP: &[&str] =
    &["name=ideal-floor", "workload.iterations=2", "transport.rto_min_us=1000.0", "transport.mss_bytes=8960"];

const SCHEMES: [&[&str]; 4] = [
    &["transport.kind=dctcp"],
    &["transport.kind=pias"],
    &["transport.kind=pfabric", "switch.policy=pfabric", "routing.mode=spray"],
    &["transport.kind=dlcp", "switch.policy=dlcp", "routing.mode=spray"],
];

fn run(overrides: &[&str]) -> (Summary, Simulation) {
    let s = common::finished(&common::two_racks_resnet18_ps(), &[SETUP, overrides].concat());
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
