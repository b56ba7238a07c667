//! Ranks that make different calls: every rank fails with `CallMismatch` naming the
//! ranks and the field, within about a round trip (not at `peer_timeout`, not with garbage).

mod common;

use std::time::{Duration, Instant};

use common::*;
use gradwire_net::{Algorithm, CallKind, Communicator, EngineConfig, NetError};

/// What one rank calls.
#[derive(Clone, Copy)]
enum Call {
    F32(CallKind, usize),
    F64(CallKind, usize),
}

fn run(c: &Communicator, call: Call) -> Result<(), NetError> {
    match call {
        Call::F32(k, n) => c.call(k, &mut vec![1.0f32; n]).map(|_| ()),
        Call::F64(k, n) => c.call(k, &mut vec![1.0f64; n]).map(|_| ()),
    }
}

fn ring() -> CallKind {
    CallKind::Allreduce { algorithm: Algorithm::Ring, loss_bound: 0.0 }
}

/// Runs `calls[r]` on rank r; every rank must fail with a mismatch naming `field`, fast.
fn expect_mismatch(calls: &[Call], field: &str) {
    let n = calls.len() as u32;
    // A long stall timeout: the mismatch must not need it.
    let comms = local_job(n, |_| EngineConfig { peer_timeout: Duration::from_secs(60), ..EngineConfig::default() });
    let t0 = Instant::now();
    let errs = Communicator::on_each(&comms, |r, c| run(c, calls[r as usize]).err());
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
    for (r, e) in errs.into_iter().enumerate() {
        match e {
            Some(e @ NetError::CallMismatch { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(field) && msg.contains(&format!("rank {r}")), "rank {r}: {msg}");
            }
            other => panic!("rank {r}: expected a CallMismatch on {field}, got {other:?}"),
        }
    }
}

#[test]
fn different_sizes_fail_on_every_rank() {
    expect_mismatch(&[Call::F32(ring(), 1000), Call::F32(ring(), 1001)], "element count");
}

#[test]
fn different_algorithms_or_loss_bounds_fail_on_every_rank() {
    for (other, what) in [(Algorithm::Tree, 0.0, "algorithm"), (Algorithm::Ring, 0.05, "loss bound")]
        .map(|(algorithm, loss_bound, what)| (CallKind::Allreduce { algorithm, loss_bound }, what))
    {
        expect_mismatch(&[Call::F32(ring(), 10_000), Call::F32(other, 10_000)], what);
    }
}

#[test]
fn the_same_bytes_as_another_dtype_fail_instead_of_returning_garbage() {
    expect_mismatch(&[Call::F32(ring(), 20_000), Call::F64(ring(), 10_000)], "dtype");
}

#[test]
fn allreduce_against_broadcast_fails() {
    expect_mismatch(&[Call::F32(ring(), 5000), Call::F32(CallKind::Broadcast { root: 0 }, 5000)], "operation");
}

#[test]
fn one_odd_rank_of_four_fails_every_rank() {
    let c = Call::F32(ring(), 4000);
    expect_mismatch(&[c, c, Call::F32(ring(), 4001), c], "element count");
}

#[test]
fn matching_calls_after_many_still_succeed() {
    // The descriptors stay aligned over many calls, async ones queued back to back.
    let comms = local_job(3, |_| EngineConfig::default());
    let out = Communicator::on_each(&comms, |r, c| {
        for i in 0..200usize {
            let mut x = vec![r as f32; 1 + i % 7];
            c.call(ring(), &mut x).unwrap_or_else(|e| panic!("rank {r} call {i}: {e}"));
            assert!(x.iter().all(|&v| v == 3.0), "rank {r} call {i}: {x:?}");
        }
    });
    assert_eq!(out.len(), 3);
}

#[test]
fn an_authenticated_job_is_exact_on_every_algorithm_and_counts_no_failures() {
    use gradwire_net::auth::JobKey;
    let key = JobKey::derive("job-token", 99);
    for mss in [1440u32, 65_000] {
        let comms = local_job(3, |_| {
            let mut c = EngineConfig { auth: Some(key.clone()), ..EngineConfig::default() };
            c.transport.mss = mss;
            c
        });
        for algorithm in [Algorithm::Ring, Algorithm::Tree, Algorithm::Ps, Algorithm::Rat] {
            let out = Communicator::on_each(&comms, |r, c| {
                let mut x = data(r, 40_000);
                c.allreduce(&mut x, algorithm, 0.0).unwrap_or_else(|e| panic!("{algorithm:?} rank {r}: {e}"));
                x
            });
            let inputs: Vec<Vec<f32>> = (0..3).map(|r| data(r, 40_000)).collect();
            let want: Vec<f32> = (0..40_000).map(|i| inputs.iter().map(|d| d[i]).sum()).collect();
            assert!(out.iter().all(|x| *x == want), "{algorithm:?} mss {mss}");
        }
        assert!(comms.iter().all(|c| c.counters().auth_failures == 0));
    }
}

#[test]
fn a_rank_with_another_key_gets_an_error_not_a_result() {
    use gradwire_net::auth::JobKey;
    let comms = local_job(2, |r| EngineConfig {
        auth: Some(JobKey::derive(if r == 0 { "job-token" } else { "other" }, 1)),
        peer_timeout: Duration::from_secs(5),
        ..EngineConfig::default()
    });
    let errs = Communicator::on_each(&comms, |_, c| c.call(ring(), &mut vec![1.0f32; 10_000]).err());
    for (r, e) in errs.iter().enumerate() {
        let e = e.as_ref().unwrap_or_else(|| panic!("rank {r} returned a result"));
        assert!(matches!(e, NetError::PeerLost { .. } | NetError::Timeout { .. }), "rank {r}: {e}");
    }
}
