//! Transports against each other in the same simulated world. Bounds are ratios between
//! transports run on the same scenario, never absolute times.

mod common;

use gradwire_sim::load;
use gradwire_sim::output::Summary;

/// The built-in incast-dctcp.toml: the DLCP leaf-spine (100G hosts, 4:1 oversubscribed,
/// 512 KB per port, 85 us base RTT across racks) with a 32-to-1 incast of 1 MB flows.
const INCAST: &str = include_str!("../../../python/gradwire/scenarios/incast-dctcp.toml");

fn run(overrides: &[&str]) -> Summary {
    let sum = common::finished(INCAST, overrides).summary();
    assert_eq!(sum.flows_finished, 32, "{overrides:?}: {sum:?}");
    assert!(sum.packets.conserved, "{overrides:?}: {:?}", sum.packets);
    sum
}

fn mean(s: &Summary) -> f64 {
    s.fct_mean_ns.unwrap()
}

fn p99(s: &Summary) -> f64 {
    s.fct_p99_ns.unwrap() as f64
}

/// Regression: LTP's Startup used to open at 2.9 x line-rate BDP (3 MB: every sender put
/// its whole tensor on the wire at once), and an RTO released one lost packet at a time,
/// so senders stayed cwnd-blocked behind lost packets until the receiver's 30 ms deadline
/// (mean FCT 6.5x DCTCP's, p99 14x).
#[test]
fn ltp_incast_completes_near_dctcp() {
    let dctcp = run(&["transport.kind=dctcp"]);
    let ltp = run(&["transport.kind=ltp"]);
    assert!(mean(&ltp) <= 1.5 * mean(&dctcp), "mean {} vs DCTCP {}", mean(&ltp), mean(&dctcp));
    assert!(p99(&ltp) <= 1.5 * p99(&dctcp), "p99 {} vs DCTCP {}", p99(&ltp), p99(&dctcp));
    assert_eq!(ltp.timeouts, 0, "no sender should need an RTO: {ltp:?}");
}

/// Under 1% random loss LTP closes early (after the LT threshold, once 1 - loss_bound is
/// in) instead of waiting for retransmissions: its batch time stays near DCTCP's lossless
/// one, far below loss-driven NewReno's (LTP §V-C).
#[test]
fn ltp_under_random_loss_closes_early() {
    let dctcp = run(&["transport.kind=dctcp"]);
    // The papers' baseline: SACK-less NewReno (`baseline = "sackless"`).
    let newreno = run(&["transport.kind=newreno", "baseline=sackless", "topology.link_loss_rate=0.01"]);
    let ltp = run(&["transport.kind=ltp", "topology.link_loss_rate=0.01"]);
    assert!(mean(&ltp) <= 1.5 * mean(&dctcp), "mean {} vs lossless DCTCP {}", mean(&ltp), mean(&dctcp));
    assert!(p99(&ltp) <= 2.0 * p99(&dctcp), "p99 {} vs lossless DCTCP {}", p99(&ltp), p99(&dctcp));
    assert!(mean(&ltp) * 4.0 <= mean(&newreno), "mean {} vs NewReno {}", mean(&ltp), mean(&newreno));
    assert!(p99(&ltp) * 4.0 <= p99(&newreno), "p99 {} vs NewReno {}", p99(&ltp), p99(&newreno));
}

/// Two long NewReno flows share leaf0's 10G uplink (77 us base RTT): ECN marks from 20
/// packets, drops at 200.
fn two_long_net() -> String {
    let flows = r#"
[transport]
kind = "newreno"
rto_min_us = 1000.0
[workload]
kind = "flows"
flows = [{ src = 0, dst = 2, bytes = 100000000000 }, { src = 1, dst = 3, bytes = 100000000000 }]
"#;
    format!("stop_ms = 20.0\n{}{flows}", common::ten_gig_racks(2, 20, 200))
}

fn two_long(overrides: &[&str]) -> Summary {
    common::finished(&two_long_net(), overrides).summary()
}

#[test]
fn newreno_ecn_backs_off_on_marks_where_plain_newreno_fills_the_buffer() {
    let plain = two_long(&[]);
    let ecn = two_long(&["transport.newreno_ecn=true"]);
    // plain NewReno is not ECN-capable: no marks, it grows until the 200-packet limit drops
    assert_eq!(plain.ecn_marks, 0);
    assert!(plain.drops.values().sum::<u64>() > 0, "{:?}", plain.drops);
    // RFC 3168: halving on the echoed marks keeps the queue far below the drop limit
    assert!(ecn.ecn_marks > 0);
    assert_eq!(ecn.drops.values().sum::<u64>(), 0, "{:?}", ecn.drops);
    assert_eq!((ecn.retransmits, ecn.timeouts), (0, 0));
    assert!(plain.packets.conserved && ecn.packets.conserved);
    // a NewReno option: asking for it with another transport is an error naming the key
    let err =
        load(&two_long_net(), &["transport.kind=\"dctcp\"".into(), "transport.newreno_ecn=true".into()]).unwrap_err();
    assert_eq!(err.key, "transport.newreno_ecn");
}

/// The emulator's ring twin (`emu/scenarios/sim/allreduce-loss.toml`) at 10 ms RTT: 4 ranks,
/// 5 MB, 1.25 MB ring steps at 1 Gbit/s.
const RING_10MS: &str = r#"
name = "ring-10ms"
seed = 1
stop_ms = 60000.0
[topology]
kind = "leaf_spine"
leaves = 1
spines = 1
uplinks_per_leaf = 1
hosts_per_leaf = 4
host_link_gbps = 1.0
uplink_gbps = 1.0
link_delay_ns = 2500000
[switch]
buffer = "per_port"
buffer_bytes = 4000000
policy = "dlcp"
[host]
nic_queue_bytes = 0
[transport]
kind = "ltp"
loss_bound = 0.01
[workload]
kind = "collective"
algorithm = "ring"
bytes = 5000000
workers = 4
iterations = 4
"#;

/// Regression, LTP at 10 ms RTT (a step's floor: 10.5 ms of serialization + 5 ms one way):
/// - with the RTO floored as a whole (`max(srtt + 4 rttvar, min_rto)`), `rttvar` decayed on
///   the steady path and the queueing of each Startup round fired it: 16 960 spurious
///   retransmissions at 0 loss, 75 ms per step;
/// - with every transfer in Startup from 10 packets (the default, each round a new flow as
///   in ltp.md), 75 ms per step; with the path carried per host pair (`ltp_carry_path`),
///   the last iteration's steps are within 25 % of the floor.
#[test]
fn ltp_ring_at_10ms_rtt_reaches_its_floor_without_spurious_retransmissions() {
    let fct = |s: &Summary| s.fct_mean_ns.unwrap() / 1e6;
    let (flows, sum) = common::run(RING_10MS, &["transport.ltp_carry_path=true"]);
    let (_, cold) = common::run(RING_10MS, &[]);
    assert!(sum.packets.conserved && cold.packets.conserved);
    assert_eq!((sum.retransmits, cold.retransmits), (0, 0), "no loss, no retransmission: {sum:?} {cold:?}");
    // flows.csv: ..., fct_ns (7th), retransmits, timeouts, iteration (10th), ...
    let last: Vec<f64> = (flows.lines().skip(1).map(|l| l.split(',').collect::<Vec<_>>()))
        .filter(|c| c[9] == "3")
        .map(|c| c[6].parse::<f64>().unwrap() / 1e6)
        .collect();
    assert_eq!(last.len(), 24);
    let floor = 10.5 + 5.0;
    assert!(last.iter().all(|&t| t < 1.25 * floor), "last iteration's steps {last:?} vs floor {floor} ms");
    assert!(fct(&cold) > 3.0 * floor, "every transfer in Startup: {} ms", fct(&cold));
}
