//! In-process jobs for the runtime's tests: ranks are threads, the mesh is made by hand
//! (the rendezvous has its own tests).

#![allow(dead_code)]

use std::sync::Arc;

use gradwire_core::collective::{Op, Schedule, Transfer};
use gradwire_net::{CollectiveConfig, Communicator, EngineConfig};

/// One `#[test]` per case, each calling `$run` with the case's arguments, so the cases run
/// in parallel and fail by name. (Not every test binary has a table.)
#[allow(unused_macros)]
macro_rules! cases {
    ($run:ident { $($(#[$attr:meta])* $name:ident: ($($arg:expr),* $(,)?);)* }) => {
        $(
            $(#[$attr])*
            #[test]
            fn $name() {
                $run($($arg),*);
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use cases;

/// `n` communicators on loopback, fully meshed, with per-rank configs from `cfg(rank)`.
pub fn local_job(n: u32, cfg: impl Fn(u32) -> EngineConfig) -> Vec<Communicator> {
    Communicator::local_job(n, cfg, collectives(n)).unwrap()
}

/// Two racks (first half, second half) for RAT.
pub fn collectives(n: u32) -> CollectiveConfig {
    let racks = (0..n).map(|r| (r >= n / 2) as u32).collect();
    CollectiveConfig {
        rack_map: Some(gradwire_core::collective::RackMap::from_racks(racks)),
        ..CollectiveConfig::default()
    }
}

/// Every rank reduces into rank 0, which then copies the sum back (a one-server PS).
pub fn star(world: u32, elems: u64, loss_bound: f64) -> Arc<Schedule> {
    let bytes = elems * 4;
    let mut transfers = Vec::new();
    for r in 1..world {
        transfers.push(Transfer {
            src: r,
            dst: 0,
            range: 0..bytes,
            op: Op::Reduce,
            after: vec![],
            loss_bound,
            priority: 1,
        });
    }
    let pushes: Vec<u32> = (0..transfers.len() as u32).collect();
    for r in 1..world {
        transfers.push(Transfer {
            src: 0,
            dst: r,
            range: 0..bytes,
            op: Op::Copy,
            after: pushes.clone(),
            loss_bound: 0.0,
            priority: 1,
        });
    }
    Arc::new(Schedule { name: "star".into(), world, bytes, elem_bytes: 4, transfers })
}

pub fn data(rank: u32, n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.37 + rank as f32 * 1.3).sin() * 10.0).round() / 4.0).collect()
}
