//! Whole-simulator properties: conservation, determinism, failures, workloads.

use gradwire_sim::output::flows_csv;
use gradwire_sim::{load, Simulation};

/// A small leaf-spine: 3 racks x 4 hosts, 2 spines, 2:1 oversubscribed.
const SMALL: &str = r#"
name = "small"
[topology]
kind = "leaf_spine"
spines = 2
leaves = 3
hosts_per_leaf = 4
uplinks_per_leaf = 2
link_delay_ns = 1000
[switch]
buffer_bytes = 60000
ecn_threshold_packets = 20
[transport]
rto_min_us = 1000.0
"#;

fn sim(extra: &str, overrides: &[&str]) -> Simulation {
    let ov: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let runs = load(&format!("{SMALL}{extra}"), &ov).unwrap_or_else(|e| panic!("{e}"));
    let mut s = Simulation::new(&runs[0].scenario).unwrap_or_else(|e| panic!("{e}"));
    s.run();
    s
}

const INCAST: &str = "[workload]\nkind = \"incast\"\nsenders = 11\nflow_bytes = 300000\n";

#[test]
fn incast_completes_and_conserves_packets() {
    for kind in ["newreno", "dctcp"] {
        let s = sim(INCAST, &[&format!("transport.kind={kind}")]);
        let sum = s.summary();
        assert_eq!(sum.flows_finished, 11, "{kind}");
        assert!(sum.packets.conserved, "{kind}: {:?}", sum.packets);
        assert_eq!(sum.packets.sent, sum.packets.delivered + sum.packets.dropped + sum.packets.in_flight);
        // the receiver's 100G link carries 11 x 300 KB: nobody can beat that
        let floor_ns = 11.0 * 300_000.0 * 8.0 / 100.0;
        assert!(sum.fct_max_ns.unwrap() as f64 >= floor_ns, "{kind}: {sum:?}");
    }
}

#[test]
fn newreno_overflows_the_buffer_and_dctcp_marks_instead() {
    let reno = sim(INCAST, &["transport.kind=newreno"]).summary();
    let dctcp = sim(INCAST, &["transport.kind=dctcp"]).summary();
    assert!(reno.drops["buffer_full"] > 0, "{reno:?}");
    assert_eq!(reno.ecn_marks, 0, "NewReno packets are not ECN-capable");
    assert!(reno.retransmits > 0);
    assert!(dctcp.ecn_marks > 0, "{dctcp:?}");
    assert!(dctcp.drops["buffer_full"] < reno.drops["buffer_full"], "{dctcp:?} vs {reno:?}");
}

#[test]
fn conservation_holds_when_stopped_mid_flight() {
    let s = sim(INCAST, &["stop_ms=0.2"]);
    let c = s.conservation();
    assert!(c.in_flight > 0, "stopped early, so packets are still in the network");
    assert!(c.holds(), "{c:?}");
    assert!(s.summary().flows_finished < 11);
}

#[test]
fn same_seed_same_bytes_with_random_spraying() {
    let extra = "[workload]\nkind = \"permutation\"\nflow_bytes = 200000\n";
    let a = flows_csv(&sim(extra, &["routing.mode=spray", "seed=5"]));
    let b = flows_csv(&sim(extra, &["routing.mode=spray", "seed=5"]));
    assert_eq!(a, b);
    let c = flows_csv(&sim(extra, &["routing.mode=spray", "seed=6"]));
    assert_ne!(a, c, "a different seed gives a different permutation and spray");
}

#[test]
fn spine_failure_reroutes_and_counts_link_down_drops() {
    let extra =
        "[workload]\nkind = \"all_to_all\"\nflow_bytes = 100000\n[[failures]]\nat_us = 20.0\nnode = \"spine0\"\n";
    let s = sim(extra, &["transport.kind=newreno"]);
    let sum = s.summary();
    assert_eq!(sum.flows_finished, sum.flows, "routes recomputed around the dead spine");
    assert!(sum.drops["link_down"] > 0, "{sum:?}");
    assert!(sum.packets.conserved);
}

#[test]
fn link_failure_by_name_and_bad_names_are_errors() {
    let extra =
        "[workload]\nkind = \"all_to_all\"\nflow_bytes = 50000\n[[failures]]\nat_us = 5.0\nlink = \"leaf0-spine1\"\n";
    let s = sim(extra, &[]);
    assert_eq!(s.summary().flows_finished, s.summary().flows);
    let runs = load(&format!("{SMALL}{extra}"), &["failures.0.link=\"leaf0-spine9\"".into()]);
    // overrides address tables, not array elements: the failure list is replaced wholesale
    assert!(runs.is_err() || Simulation::new(&runs.unwrap()[0].scenario).is_err());
    let bad = format!(
        "{SMALL}[workload]\nkind = \"all_to_all\"\nflow_bytes = 1\n[[failures]]\nat_us = 5.0\nnode = \"spine9\"\n"
    );
    let e = Simulation::new(&load(&bad, &[]).unwrap()[0].scenario).err().expect("unknown node");
    assert_eq!(e.key, "failures.0.node");
    assert!(e.message.contains("spine9"));
}

#[test]
fn ps_pulls_wait_for_pushes() {
    let extra = "[workload]\nkind = \"ps\"\nworkers = 12\nservers = 3\npush_bytes = 120000\n";
    let s = sim(extra, &[]);
    let csv = flows_csv(&s);
    let rows: Vec<Vec<u64>> = csv.lines().skip(1).map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    // 3 servers x 11 remote workers, each way
    assert_eq!(rows.len(), 66);
    // the workload lists, per server, its 11 pushes and then its 11 pulls
    for (j, block) in rows.chunks(22).enumerate() {
        let (pushes, pulls) = block.split_at(11);
        let server = pushes[0][2];
        assert!(pushes.iter().all(|r| r[2] == server) && pulls.iter().all(|r| r[1] == server));
        let last_push = pushes.iter().map(|r| r[5]).max().unwrap();
        let first_pull = pulls.iter().map(|r| r[4]).min().unwrap();
        assert!(first_pull >= last_push, "server {j}: pull at {first_pull} before last push at {last_push}");
    }
}

#[test]
fn fat_tree_shared_buffer_and_queue_samples() {
    let text = r#"
[topology]
kind = "fat_tree"
k = 4
link_delay_ns = 500
[switch]
buffer = "shared"
buffer_bytes = 200000
dt_alpha = 0.5
[workload]
kind = "incast"
receiver = 0
senders = 15
flow_bytes = 100000
[output]
queue_ports = ["edge0->host0"]
queue_sample_ns = 2000
"#;
    let runs = load(text, &[]).unwrap();
    let mut s = Simulation::new(&runs[0].scenario).unwrap();
    s.run();
    let sum = s.summary();
    assert_eq!(sum.flows_finished, 15);
    assert!(sum.packets.conserved);
    let dir = std::env::temp_dir().join(format!("gw-test-{}", std::process::id()));
    s.write_outputs(&dir).unwrap();
    let q = std::fs::read_to_string(dir.join("queues.csv")).unwrap();
    assert!(q.lines().count() > 10);
    assert!(q.lines().skip(1).any(|l| !l.ends_with(",0,0")), "the incast queue is non-empty at some sample");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_queue_port_is_named() {
    let e = Simulation::new(
        &load(&format!("{SMALL}{INCAST}[output]\nqueue_ports = [\"leaf0->host99\"]\n"), &[]).unwrap()[0].scenario,
    )
    .err()
    .unwrap();
    assert_eq!(e.key, "output.queue_ports.0");
}

#[test]
fn random_link_loss_is_counted_and_recovered() {
    let s = sim(INCAST, &["topology.link_loss_rate=0.01", "transport.kind=newreno"]);
    let sum = s.summary();
    assert_eq!(sum.flows_finished, 11);
    let lost = sum.drops["random_loss"];
    // 11 x 300 KB over 3-4 links each way: ~2300 data packets x ~4 hops, ~1% lost
    assert!(lost > 20 && lost < 400, "{lost}");
    assert!(sum.retransmits > 0);
    assert!(sum.packets.conserved);
    let e = load(&format!("{SMALL}{INCAST}"), &["topology.link_loss_rate=1.5".into()]).unwrap_err();
    assert_eq!(e.key, "topology.link_loss_rate");
}

/// Every control timeout and rate period fires when due, also for a sender that waits in
/// its host NIC's ready list behind other flows (before, the driver armed only the pacing
/// slot of such a sender and served its other deadlines at its next pull: 60 late here,
/// 62 µs late on average at 16 Fig. 14 workers). Covers the paced transports, DLCP and
/// LTP, under incast with drops.
#[test]
fn deadlines_fire_on_time_for_flows_waiting_at_the_nic() {
    // ResNet18's 62 tensors from each of 12 workers to 3 colocated servers: dozens of
    // flows per NIC, and PS incast into 60 KB ports
    let extra = "[workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\npattern = \"ps\"\nworkers = 12\nservers = 3\ncolocated = true\n";
    for kind in ["dlcp", "ltp"] {
        let t = format!("transport.kind={kind}");
        let s = sim(extra, &[&t, "switch.policy=dlcp", "routing.mode=spray", "transport.loss_bound=0.1", "stop_ms=3"]);
        assert!(s.summary().timeouts > 0 || kind == "ltp", "{kind}: the scenario should need control timeouts");
        assert_eq!(s.late_timeouts(), 0, "{kind}: deadlines served late");
    }
}
