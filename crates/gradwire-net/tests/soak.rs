//! Soak: thousands of calls of random shape, algorithm, operation, loss bound and
//! transport over 4 ranks, with injected loss and stray datagrams (garbage, another job's,
//! forged with this job's session id from a stranger's socket) arriving throughout. No
//! wrong result, no error, and the process's memory stays flat.
//!
//! Bounded: `GRADWIRE_SOAK_CALLS` calls (default 2000) or `GRADWIRE_SOAK_SECONDS`
//! seconds (default 30), whichever comes first.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use gradwire_net::endpoint::TransportKind;
use gradwire_net::inject::Impairment;
use gradwire_net::{Algorithm, Communicator, EngineConfig};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

/// Sends strays to every rank until `stop`: garbage, another session's headers, and
/// headers with this job's session for random flows, from a socket no rank registered.
fn strays(targets: Vec<std::net::SocketAddr>, session: u64, stop: &AtomicBool) -> u64 {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) {
        for &t in &targets {
            let mut d = vec![0u8; rng.gen_range(0..2000)];
            rng.fill(&mut d[..]);
            if rng.gen_bool(0.6) && d.len() >= 32 {
                let h = gradwire_core::wire::Header {
                    kind: gradwire_core::PacketKind::Data,
                    ect: false,
                    ce: false,
                    ece: false,
                    priority: 1,
                    session: if rng.gen_bool(0.8) { session } else { rng.gen() },
                    flow: rng.gen_range(0..64u32) << 20 | rng.gen_range(0..32u32),
                    payload_len: (d.len() - 32) as u32,
                    seq: rng.gen_range(0..4u64) * 1440,
                };
                let mut head = [0u8; 32];
                h.encode(&mut head);
                d[..32].copy_from_slice(&head);
            }
            let _ = sock.send_to(&d, t);
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    sent
}

#[test]
fn thousands_of_random_calls_with_strays_stay_exact_and_memory_stays_flat() {
    let (n, max_calls) = (4u32, env_or("GRADWIRE_SOAK_CALLS", 2000usize));
    let limit = Duration::from_secs_f64(env_or("GRADWIRE_SOAK_SECONDS", 30.0));
    let job = |kind: TransportKind, loss: f64| {
        local_job(n, |_| {
            let mut c = EngineConfig { peer_timeout: Duration::from_secs(30), ..EngineConfig::default() };
            c.transport.kind = kind;
            c.transport.line_rate_bps = 2_000_000_000;
            c.impairments = vec![Impairment { loss, delay: Duration::ZERO }; n as usize];
            c
        })
    };
    let jobs: Vec<(&str, Vec<Communicator>)> = vec![
        ("dlcp", job(TransportKind::named("dlcp"), 0.0)),
        ("dlcp 2% loss", job(TransportKind::named("dlcp"), 0.02)),
        ("ltp", job(TransportKind::named("ltp"), 0.0)),
        ("ltp 2% loss", job(TransportKind::named("ltp"), 0.02)),
    ];
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (mut done, mut rss_warm, mut lossy_bytes) = (0usize, 0u64, 0u64);
    let stray_count = std::thread::scope(|s| {
        let targets: Vec<_> = jobs.iter().flat_map(|(_, c)| c.iter().map(|c| c.data_addr())).collect();
        let session = jobs[0].1[0].session();
        let stop = &stop;
        let stray = s.spawn(move || strays(targets, session, stop));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(2026);
        while done < max_calls && t0.elapsed() < limit {
            let (name, comms) = &jobs[rng.gen_range(0..jobs.len())];
            let elems = rng.gen_range(1..40_000usize);
            let algo = [Algorithm::Ring, Algorithm::Tree, Algorithm::Ps, Algorithm::Rat][rng.gen_range(0..4)];
            let bound = if rng.gen_bool(0.3) { 0.05 } else { 0.0 };
            let broadcast = rng.gen_bool(0.15).then(|| rng.gen_range(0..n));
            let seed = rng.gen::<u32>();
            let what = format!("call {done} ({name}: {elems} elems, {algo:?}, bound {bound}, broadcast {broadcast:?})");
            let out = Communicator::on_each(comms, |r, c| {
                let mut x = data(r + seed % 1000, elems);
                let rep = match broadcast {
                    Some(root) => c.broadcast(&mut x, root),
                    None => c.allreduce(&mut x, algo, bound),
                };
                (x, rep.unwrap_or_else(|e| panic!("{what} rank {r}: {e}")))
            });
            let want: Vec<f32> = match broadcast {
                Some(root) => data(root + seed % 1000, elems),
                None => {
                    let inputs: Vec<Vec<f32>> = (0..n).map(|r| data(r + seed % 1000, elems)).collect();
                    (0..elems).map(|i| inputs.iter().map(|d| d[i]).sum()).collect()
                }
            };
            let mut in_bubble = vec![false; elems];
            for (r, (x, rep)) in out.iter().enumerate() {
                assert_eq!(x, &out[0].0, "{what}: rank {r} differs from rank 0");
                assert!(rep.min_delivered_fraction >= 1.0 - bound - 1e-12, "{what} rank {r}");
                for b in &rep.bubbles {
                    (b.offset / 4..(b.offset + b.len) / 4).for_each(|i| in_bubble[i as usize] = true);
                }
                lossy_bytes += rep.bytes_lost;
            }
            assert!(bound > 0.0 || !in_bubble.contains(&true), "{what}: bubbles without a bound");
            for i in (0..elems).filter(|&i| !in_bubble[i]) {
                assert_eq!(out[0].0[i], want[i], "{what}: element {i}");
            }
            done += 1;
            if done == max_calls / 5 {
                rss_warm = rss_bytes();
            }
        }
        stop.store(true, Ordering::Relaxed);
        stray.join().unwrap()
    });
    let rss_end = rss_bytes();
    let counters: Vec<_> = jobs.iter().flat_map(|(_, c)| c.iter().map(|c| c.counters())).collect();
    let dropped: u64 = counters.iter().map(|c| c.wrong_source + c.malformed + c.foreign_session).sum();
    eprintln!(
        "soak: {done} calls in {:.1} s, {stray_count} strays sent, {dropped} counted and dropped, {lossy_bytes} bytes lost within bounds, RSS {:.1} MiB after warm-up, {:.1} MiB at the end",
        t0.elapsed().as_secs_f64(),
        rss_warm as f64 / (1 << 20) as f64,
        rss_end as f64 / (1 << 20) as f64
    );
    assert!(done >= 200, "only {done} calls in {limit:?}: too slow to soak anything");
    assert!(dropped > 0, "strays arrived and were counted");
    if rss_warm > 0 {
        // Flat: steady state reached after the first fifth of the calls (buffers, early
        // stores, socket buffers); growth beyond that would be a leak per call.
        assert!(rss_end < rss_warm + (64 << 20), "RSS grew from {rss_warm} to {rss_end} bytes");
    }
}
