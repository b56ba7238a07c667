//! Every transport closes its transfers reliably under loss: LTP and DLCP at 1 % and 5 %
//! injected loss (data and ACK datagrams alike), 2 and 4 ranks, every algorithm and a
//! broadcast, lossless (bound 0: exact) and lossy (bound kept, exact outside the bubbles,
//! the same bits on every rank).
//!
//! Repetitions per case: `GRADWIRE_LOSSY_REPS` (default 4; the thorough run is 20:
//! `GRADWIRE_LOSSY_REPS=20 cargo nextest run -p gradwire-net --test lossy --release`).

mod common;

use std::time::Duration;

use common::*;
use gradwire_net::endpoint::TransportKind;
use gradwire_net::inject::Impairment;
use gradwire_net::{Algorithm, Communicator, EngineConfig};

fn reps() -> usize {
    std::env::var("GRADWIRE_LOSSY_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(4)
}

fn sum(n: u32, elems: usize) -> Vec<f32> {
    let all: Vec<Vec<f32>> = (0..n).map(|r| data(r, elems)).collect();
    (0..elems).map(|i| all.iter().map(|d| d[i]).sum()).collect()
}

fn lossy_job(kind: TransportKind, n: u32, loss: f64) {
    let elems = 30_011;
    let comms = local_job(n, |_| {
        let mut c = EngineConfig { peer_timeout: Duration::from_secs(20), ..EngineConfig::default() };
        c.transport.kind = kind;
        c.transport.line_rate_bps = 2_000_000_000;
        c.impairments = vec![Impairment { loss, delay: Duration::ZERO }; n as usize];
        c
    });
    let want = sum(n, elems);
    for rep in 0..reps() {
        for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Ps, Algorithm::Rat] {
            for bound in [0.0, 2.0 * loss] {
                let what = format!("{kind:?} {n} ranks {loss} loss {algo:?} bound {bound} rep {rep}");
                let out = Communicator::on_each(&comms, |r, c| {
                    let mut x = data(r, elems);
                    let rep = c.allreduce(&mut x, algo, bound).unwrap_or_else(|e| panic!("{what} rank {r}: {e}"));
                    (x, rep)
                });
                let first = &out[0].0;
                let mut in_bubble = vec![false; elems];
                for (r, (x, rep)) in out.iter().enumerate() {
                    assert_eq!(x, first, "{what}: rank {r} differs from rank 0");
                    assert!(
                        rep.min_delivered_fraction >= 1.0 - bound - 1e-12,
                        "{what} rank {r}: delivered {}",
                        rep.min_delivered_fraction
                    );
                    assert_eq!(rep.bubbles.iter().map(|b| b.len).sum::<u64>(), rep.bytes_lost, "{what} rank {r}");
                    for b in &rep.bubbles {
                        (b.offset / 4..(b.offset + b.len) / 4).for_each(|i| in_bubble[i as usize] = true);
                    }
                }
                if bound == 0.0 {
                    assert!(!in_bubble.contains(&true), "{what}: a bubble without a bound");
                }
                for i in (0..elems).filter(|&i| !in_bubble[i]) {
                    assert_eq!(first[i], want[i], "{what}: element {i} is outside every bubble but wrong");
                }
            }
        }
        let out = Communicator::on_each(&comms, |r, c| {
            let mut x = data(r, elems);
            c.broadcast(&mut x, n - 1).unwrap_or_else(|e| panic!("{kind:?} broadcast rank {r}: {e}"));
            x
        });
        assert!(out.iter().all(|x| *x == data(n - 1, elems)), "{kind:?} broadcast");
    }
    let drops: u64 = comms.iter().map(|c| c.counters().injected_drops).sum();
    assert!(drops > 0, "loss was injected");
}

cases!(lossy_job {
    ltp_closes_under_1_percent_loss_2_ranks: (TransportKind::named("ltp"), 2, 0.01);
    ltp_closes_under_5_percent_loss_2_ranks: (TransportKind::named("ltp"), 2, 0.05);
    ltp_closes_under_1_percent_loss_4_ranks: (TransportKind::named("ltp"), 4, 0.01);
    ltp_closes_under_5_percent_loss_4_ranks: (TransportKind::named("ltp"), 4, 0.05);
    dlcp_closes_under_1_percent_loss_2_ranks: (TransportKind::named("dlcp"), 2, 0.01);
    dlcp_closes_under_5_percent_loss_2_ranks: (TransportKind::named("dlcp"), 2, 0.05);
    dlcp_closes_under_1_percent_loss_4_ranks: (TransportKind::named("dlcp"), 4, 0.01);
    dlcp_closes_under_5_percent_loss_4_ranks: (TransportKind::named("dlcp"), 4, 0.05);
});
