mod common;

use std::time::{Duration, Instant};

use common::*;
use gradwire_net::endpoint::TransportKind;
use gradwire_net::inject::Impairment;
use gradwire_net::{Communicator, EngineConfig, NetError};

fn cfg(kind: TransportKind) -> EngineConfig {
    let mut c = EngineConfig { peer_timeout: Duration::from_secs(10), ..EngineConfig::default() };
    c.transport.kind = kind;
    c.transport.line_rate_bps = 5_000_000_000;
    c
}

fn sum(n: u32, elems: usize) -> Vec<f32> {
    let all: Vec<Vec<f32>> = (0..n).map(|r| data(r, elems)).collect();
    (0..elems).map(|i| all.iter().map(|d| d[i]).sum()).collect()
}

fn lossless(kind: TransportKind) {
    let (n, elems) = (4, 200_000);
    let comms = local_job(n, |_| cfg(kind));
    let sched = star(n, elems as u64, 0.0);
    let out = Communicator::on_each(&comms, |r, c| {
        let mut x = data(r, elems);
        let rep = c.run(sched.clone(), &mut x).unwrap_or_else(|e| panic!("rank {r}: {e}"));
        (x, rep)
    });
    let want = sum(n, elems);
    for (r, (x, rep)) in out.iter().enumerate() {
        assert_eq!(rep.bytes_lost, 0, "rank {r}");
        assert!(rep.bubbles.is_empty());
        assert_eq!(x, &want, "rank {r}: exact sum (values are quarter-integers)");
    }
}

cases!(lossless {
    dlcp_star_allreduce_is_exact_without_loss: (TransportKind::named("dlcp"));
    ltp_star_allreduce_is_exact_without_loss: (TransportKind::named("ltp"));
});

cases!(lossy_push {
    lossy_push_meets_the_bound_and_reports_exact_bubbles: (EngineConfig::default().transport.mss, false);
    lossy_push_with_large_segments_read_in_place: (65_000, false);
    /// Sends on a second thread: a round's STOP must still follow its data.
    lossy_push_with_a_send_thread: (EngineConfig::default().transport.mss, true);
});

fn lossy_push(mss: u32, send_thread: bool) {
    // 3 workers push to rank 0 over 5% injected loss with a 10% bound; the pull is reliable.
    // At least ~100 datagrams per push, so the loss always hits some (0.95^300 ≈ 2e-7).
    let (n, bound) = (4, 0.10);
    let elems = (100 * mss as usize / 4).max(100_000);
    let comms = local_job(n, |r| {
        let mut c = EngineConfig { send_thread, ..cfg(TransportKind::named("dlcp")) };
        c.transport.mss = mss;
        if r != 0 {
            c.impairments = vec![Impairment { loss: 0.05, delay: Duration::ZERO }; n as usize];
        }
        c
    });
    let sched = star(n, elems as u64, bound);
    let out = Communicator::on_each(&comms, |r, c| {
        let mut x = data(r, elems);
        let rep = c.run(sched.clone(), &mut x).unwrap_or_else(|e| panic!("rank {r}: {e}"));
        (x, rep, c.counters())
    });
    let (x0, rep0, _) = &out[0];
    assert!(out.iter().skip(1).any(|o| o.2.injected_drops > 0), "loss was injected");
    assert!(rep0.min_delivered_fraction >= 1.0 - bound, "delivered {}", rep0.min_delivered_fraction);
    // Exactness: the sum is rank 0's data plus each worker's data with its bubbles zeroed.
    let mut want = data(0, elems);
    for w in 1..n {
        let mut d = data(w, elems);
        for b in rep0.bubbles.iter().filter(|b| b.src == w) {
            for i in (b.offset / 4)..((b.offset + b.len) / 4) {
                d[i as usize] = 0.0;
            }
        }
        want.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
    }
    assert_eq!(x0, &want);
    let lost: u64 = rep0.bubbles.iter().map(|b| b.len).sum();
    assert_eq!(lost, rep0.bytes_lost);
    // The pull is reliable: every rank ends with rank 0's result.
    for (r, (x, _, _)) in out.iter().enumerate() {
        assert_eq!(x, x0, "rank {r}");
    }
}

#[test]
fn a_dead_peer_fails_the_call_within_the_timeout() {
    let n = 3;
    let mut comms =
        local_job(n, |_| EngineConfig { peer_timeout: Duration::from_secs(2), ..cfg(TransportKind::named("dlcp")) });
    let dead = comms.pop().unwrap();
    drop(dead); // rank 2 exits before the call
    let sched = star(n, 10_000, 0.0);
    let t0 = Instant::now();
    let errs = Communicator::on_each(&comms, |r, c| {
        let mut x = data(r, 10_000);
        c.run(sched.clone(), &mut x).err()
    });
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    for (r, e) in errs.iter().enumerate() {
        let e = e.as_ref().unwrap_or_else(|| panic!("rank {r} succeeded without rank 2"));
        let msg = e.to_string();
        assert!(matches!(e, NetError::PeerLost { rank: 2, .. } | NetError::Timeout { .. }), "rank {r}: {msg}");
    }
}

#[test]
fn a_stalled_peer_times_out_with_a_clear_error() {
    // Rank 2 never makes the call: the others wait `peer_timeout`, then fail.
    let n = 3;
    let comms =
        local_job(n, |_| EngineConfig { peer_timeout: Duration::from_secs(1), ..cfg(TransportKind::named("dlcp")) });
    let sched = star(n, 10_000, 0.0);
    let t0 = Instant::now();
    let errs = Communicator::on_each(&comms[..2], |r, c| {
        let mut x = data(r, 10_000);
        c.run(sched.clone(), &mut x).err()
    });
    assert!(t0.elapsed() < Duration::from_secs(4));
    for e in errs {
        match e {
            Some(NetError::Timeout { what, .. }) => assert!(what.contains("ranks") && what.contains("star"), "{what}"),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}

#[test]
fn garbage_and_foreign_datagrams_are_counted_and_ignored() {
    let n = 2;
    let comms = local_job(n, |_| cfg(TransportKind::named("dlcp")));
    let addr = comms[0].data_addr();
    let junk = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    junk.send_to(b"not a gradwire datagram", addr).unwrap();
    let mut h = [0u8; 32];
    gradwire_core::wire::Header {
        kind: gradwire_core::PacketKind::Data,
        ect: false,
        ce: false,
        ece: false,
        priority: 1,
        session: 12345, // another job
        flow: 0,
        payload_len: 0,
        seq: 0,
    }
    .encode(&mut h);
    junk.send_to(&h, addr).unwrap();
    // The job still works.
    let sched = star(n, 50_000, 0.0);
    let out = Communicator::on_each(&comms, |r, c| {
        let mut x = data(r, 50_000);
        c.run(sched.clone(), &mut x).map(|_| x)
    });
    assert_eq!(out[0].as_ref().unwrap(), &sum(n, 50_000));
    let c = comms[0].counters();
    assert_eq!(c.malformed, 1);
    assert_eq!(c.foreign_session, 1);
    assert_eq!(c.wrong_source, 0);
}

#[test]
fn calls_run_in_order_and_results_stay_exact() {
    let (n, elems) = (3, 20_000);
    let comms = local_job(n, |_| cfg(TransportKind::named("dlcp")));
    let sched = star(n, elems as u64, 0.0);
    let out = Communicator::on_each(&comms, |r, c| {
        let mut results = Vec::new();
        for k in 0..5 {
            let mut x: Vec<f32> = data(r, elems).iter().map(|v| v * (k + 1) as f32).collect();
            c.run(sched.clone(), &mut x).unwrap();
            results.push(x);
        }
        results
    });
    let want = sum(n, elems);
    for k in 0..5 {
        let w: Vec<f32> = want.iter().map(|v| v * (k + 1) as f32).collect();
        for r in 0..n as usize {
            assert_eq!(out[r][k], w, "rank {r} call {k}");
        }
    }
}

cases!(every_algorithm {
    every_algorithm_allreduces_exactly_and_bitwise_equal: (EngineConfig::default().transport.mss, false);
    every_algorithm_is_exact_with_large_segments_read_in_place: (65_000, false);
    every_algorithm_is_exact_with_a_send_thread: (EngineConfig::default().transport.mss, true);
});

fn every_algorithm(mss: u32, send_thread: bool) {
    use gradwire_net::Algorithm;
    for n in [2u32, 3, 5] {
        let elems = 30_011; // not a multiple of anything
        let comms = local_job(n, |_| {
            let mut c = EngineConfig { send_thread, ..cfg(TransportKind::named("dlcp")) };
            c.transport.mss = mss;
            c
        });
        let want = sum(n, elems);
        for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Ps, Algorithm::Rat] {
            let out = Communicator::on_each(&comms, |r, c| {
                let mut x = data(r, elems);
                c.allreduce(&mut x, algo, 0.0).unwrap_or_else(|e| panic!("{algo:?} rank {r}: {e}"));
                x
            });
            for (r, x) in out.iter().enumerate() {
                assert_eq!(x, &want, "{algo:?} world {n} rank {r}");
            }
        }
        let out = Communicator::on_each(&comms, |r, c| {
            let mut x = data(r, elems);
            c.broadcast(&mut x, n - 1).unwrap();
            x
        });
        assert!(out.iter().all(|x| *x == data(n - 1, elems)));
    }
}

#[test]
fn bad_calls_are_refused_before_anything_is_sent() {
    use gradwire_net::{Algorithm, CollectiveConfig};
    let comms = local_job(2, |_| cfg(TransportKind::named("dlcp")));
    let mut x = vec![0f32; 10];
    let e = comms[0].allreduce(&mut x, Algorithm::Ring, 1.5).unwrap_err();
    assert!(e.to_string().contains("loss_bound 1.5"), "{e}");
    let e = comms[0].broadcast(&mut x, 7).unwrap_err();
    assert!(e.to_string().contains("root 7"), "{e}");
    assert!("butterfly".parse::<Algorithm>().unwrap_err().to_string().contains("\"ring\""));
    let bad = CollectiveConfig { ps_servers: Some(0), ..CollectiveConfig::default() };
    assert!(bad.check(2).is_err());
}

#[test]
fn injected_delay_slows_a_call_down_and_loses_nothing() {
    use gradwire_net::Algorithm;
    let (n, elems) = (2, 50_000);
    let delay = Duration::from_millis(40);
    let comms = local_job(n, |r| {
        let mut c = cfg(TransportKind::named("dlcp"));
        if r == 1 {
            c.impairments = vec![Impairment { loss: 0.0, delay }; n as usize];
        }
        c
    });
    let out = Communicator::on_each(&comms, |r, c| {
        let mut x = data(r, elems);
        let rep = c.allreduce(&mut x, Algorithm::Ring, 0.0).unwrap();
        (x, rep)
    });
    for (x, rep) in &out {
        assert_eq!(x, &sum(n, elems));
        assert_eq!(rep.bytes_lost, 0);
    }
    // Rank 1's data reaches rank 0 at least `delay` late: its receive cannot finish sooner.
    assert!(out[0].1.seconds >= delay.as_secs_f64(), "{}", out[0].1.seconds);
}
