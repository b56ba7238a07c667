//! Runtime data-path benchmark (see `benchmarks/goodput/README.md`).
//!
//! `goodput`: one 1-rank -> 1-rank DLCP transfer (Copy, lossless) between two in-process
//! ranks on loopback, against a plain TCP stream of the same bytes between two sockets,
//! with 1500-byte and 9000-byte packets, interleaved, repeated; prints medians and ratios.
//!
//! `loss`: ring allreduce with 2 and 4 ranks at 25 and 100 MB, lossless vs 1 % injected
//! loss with a 1 % bound on the reduce-scatter, interleaved, repeated.
//!
//! ```text
//! cargo run --release -p gradwire-net --example goodput -- goodput [--mb 256] [--reps 5]
//! cargo run --release -p gradwire-net --example goodput -- loss [--reps 5]
//! ```
//! Output: human-readable lines plus one `RESULT {json}` line per measurement.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gradwire_core::collective::{ring, CollectiveOptions, Op, Schedule, Transfer};
use gradwire_net::endpoint::TransportKind;
use gradwire_net::inject::Impairment;
use gradwire_net::{Communicator, EngineConfig};
use socket2::{Domain, Protocol, Socket, Type};

/// `n` communicators on loopback, fully meshed (no rendezvous).
fn local_job(n: u32, cfg: impl Fn(u32) -> EngineConfig) -> Vec<Communicator> {
    Communicator::local_job(n, cfg, gradwire_net::CollectiveConfig::default()).unwrap()
}

fn base_cfg(mss: u32) -> EngineConfig {
    let mut c = EngineConfig::default();
    if let Some(mb) = std::env::var("GOODPUT_SOCKBUF_MB").ok().and_then(|v| v.parse::<usize>().ok()) {
        c.socket_buffer_bytes = mb << 20;
    }
    c.transport.kind = TransportKind::named("dlcp");
    c.transport.mss = mss;
    // Paced as a real job on loopback is (`line_rate::LOOPBACK_BPS`); GOODPUT_LINE_RATE_GBPS
    // overrides it (the pacer used to be a fixed 25 Gbit/s).
    c.transport.line_rate_bps = std::env::var("GOODPUT_LINE_RATE_GBPS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(gradwire_net::line_rate::LOOPBACK_BPS, |g| (g * 1e9) as u64);
    c
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Per thread named `gradwire-*`: (name, ns on CPU, ns runnable but waiting for a CPU),
/// from /proc/self/task/*/schedstat.
fn sched_now() -> Vec<(String, u64, u64)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_string();
        if !name.starts_with("gradwire") {
            continue;
        }
        let st = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        let f: Vec<u64> = st.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() >= 2 {
            v.push((name, f[0], f[1]));
        }
    }
    v.sort();
    v
}

/// CPU seconds per GB moved of the threads named `prefix*` between two snapshots (sum).
fn cpu_per_gb(a: &[(String, u64, u64)], b: &[(String, u64, u64)], prefix: &str, bytes: u64) -> f64 {
    let run = |v: &[(String, u64, u64)]| v.iter().filter(|x| x.0.starts_with(prefix)).map(|x| x.1).sum::<u64>();
    (run(b).saturating_sub(run(a))) as f64 / 1e9 / (bytes as f64 / 1e9)
}

/// CPU and run-queue wait of each engine thread between two `sched()` snapshots, as
/// shares of `wall` seconds.
fn sched_delta(a: &[(String, u64, u64)], b: &[(String, u64, u64)], wall: f64) -> String {
    b.iter()
        .map(|(n, run, wait)| {
            let (r0, w0) = a.iter().find(|x| &x.0 == n).map(|x| (x.1, x.2)).unwrap_or((0, 0));
            format!(
                "{n} cpu {:.0}% wait {:.0}%",
                (run - r0) as f64 / 1e9 / wall * 100.0,
                (wait - w0) as f64 / 1e9 / wall * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Datagrams the kernel dropped on all UDP sockets (/proc/net/snmp `Udp: RcvbufErrors`).
fn udp_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut lines = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(h), Some(v)) = (lines.next(), lines.next()) else { return 0 };
    h.split_whitespace()
        .zip(v.split_whitespace())
        .find(|(k, _)| *k == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---- goodput ------------------------------------------------------------------------

fn copy_schedule(bytes: u64) -> Arc<Schedule> {
    let t = Transfer { src: 0, dst: 1, range: 0..bytes, op: Op::Copy, after: vec![], loss_bound: 0.0, priority: 1 };
    Arc::new(Schedule { name: "copy".into(), world: 2, bytes, elem_bytes: 4, transfers: vec![t] })
}

/// One gradwire transfer of `bufs[0]` into `bufs[1]`; seconds (wall, submit to both done).
fn gradwire_once(comms: &[Communicator], sched: &Arc<Schedule>, bufs: &mut [Vec<f32>]) -> (f64, u64) {
    // The receiver's call is handed over first, as a TCP receiver is connected before the
    // stream starts: what is timed is the data path, not thread start-up skew (data that
    // does arrive before its call is posted is kept, up to `early_buffer_bytes`).
    let t0 = Instant::now();
    let (rx_buf, tx_buf) = bufs.split_at_mut(1);
    let reps = std::thread::scope(|s| {
        let rx = s.spawn(|| comms[1].run(sched.clone(), &mut tx_buf[0]).expect("gradwire receive"));
        let tx = s.spawn(|| comms[0].run(sched.clone(), &mut rx_buf[0]).expect("gradwire send"));
        [tx.join().unwrap(), rx.join().unwrap()]
    });
    (t0.elapsed().as_secs_f64(), reps[0].retransmits)
}

/// This thread's (ns on CPU, ns waiting for a CPU).
fn thread_sched() -> (u64, u64) {
    let st = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let f: Vec<u64> = st.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (f.first().copied().unwrap_or(0), f.get(1).copied().unwrap_or(0))
}

/// A TCP stream of `src.len()` bytes into `dst` with TCP_MAXSEG `mss`; seconds, and the
/// (cpu ns, wait ns) of the sending and the receiving thread.
fn tcp_once(mss: u32, src: &[u8], dst: &mut [u8]) -> (f64, [(u64, u64); 2]) {
    let lst = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    lst.set_reuse_address(true).unwrap();
    lst.set_tcp_mss(mss).unwrap();
    lst.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
    lst.listen(1).unwrap();
    let addr = lst.local_addr().unwrap();
    let cli = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    cli.set_tcp_mss(mss).unwrap();
    cli.connect(&addr).unwrap();
    let (srv, _) = lst.accept().unwrap();
    let mut tx: TcpStream = cli.into();
    let mut rx: TcpStream = srv.into();
    let t0 = Instant::now();
    let usage = std::thread::scope(|s| {
        let a = std::thread::Builder::new()
            .name("tcp-tx".into())
            .spawn_scoped(s, || {
                let u0 = thread_sched();
                tx.write_all(src).unwrap();
                tx.shutdown(std::net::Shutdown::Write).unwrap();
                let u1 = thread_sched();
                (u1.0 - u0.0, u1.1 - u0.1)
            })
            .unwrap();
        let b = std::thread::Builder::new()
            .name("tcp-rx".into())
            .spawn_scoped(s, || {
                let u0 = thread_sched();
                let mut got = 0;
                while got < dst.len() {
                    let n = rx.read(&mut dst[got..]).unwrap();
                    assert!(n > 0, "tcp stream ended early");
                    got += n;
                }
                let u1 = thread_sched();
                (u1.0 - u0.0, u1.1 - u0.1)
            })
            .unwrap();
        [a.join().unwrap(), b.join().unwrap()]
    });
    (t0.elapsed().as_secs_f64(), usage)
}

fn goodput(args: &[String]) {
    let mb = arg(args, "--mb", 256.0) as u64;
    let reps = arg(args, "--reps", 5.0) as usize;
    let bytes = mb << 20;
    let elems = (bytes / 4) as usize;
    let sched = copy_schedule(bytes);
    println!("goodput: {mb} MiB per transfer, {reps} reps, loopback, load before: {}", load());
    let src: Vec<f32> = (0..elems).map(|i| i as f32).collect();
    let mut tcp_dst = vec![0u8; bytes as usize];
    let mut results = Vec::new();
    let only = args.iter().position(|a| a == "--mtu").and_then(|i| args.get(i + 1)).cloned();
    for (label, mss, tcp_mss) in [("1500", 1440u32, 1460u32), ("9000", 8940, 8960)] {
        if only.as_deref().is_some_and(|o| o != label) {
            continue;
        }
        let comms = local_job(2, |_| base_cfg(mss));
        let mut bufs = vec![src.clone(), vec![0f32; elems]];
        // Warm-up (page faults of the receive scratch, socket buffers).
        gradwire_once(&comms, &sched, &mut bufs);
        let _ = tcp_once(tcp_mss, bytemuck::cast_slice(&src), &mut tcp_dst);
        let (mut g, mut t, mut r) = (Vec::new(), Vec::new(), Vec::new());
        let (mut gc, mut tc) = (Vec::new(), Vec::new());
        for i in 0..reps {
            bufs[1].iter_mut().for_each(|x| *x = 0.0);
            let s0 = sched_now();
            let (c0, d0) = (comms[1].counters(), udp_drops());
            let (gs, retx) = gradwire_once(&comms, &sched, &mut bufs);
            let (c1, d1) = (comms[1].counters(), udp_drops());
            let why = format!("early {} kernel drops {}", c1.early - c0.early, d1 - d0);
            let cpu =
                sched_delta(&s0, &sched_now(), gs).replace("gradwire-rank0", "tx").replace("gradwire-rank1", "rx");
            assert!(bufs[1] == src, "gradwire delivered wrong bytes");
            let s1 = sched_now();
            if args.iter().any(|a| a == "--no-tcp") {
                println!("  mtu {label} rep {i}: gradwire {:6.2} Gbit/s ({gs:.3} s, {retx} retx, {why}) [{cpu}] {:.2} cpu-s/GB", bytes as f64 * 8.0 / gs / 1e9, cpu_per_gb(&s0, &s1, "gradwire", bytes));
                continue;
            }
            let (ts, tu) = tcp_once(tcp_mss, bytemuck::cast_slice(&src), &mut tcp_dst);
            let pct = |ns: u64| ns as f64 / 1e9 / ts * 100.0;
            let tcpu = format!(
                "tx cpu {:.0}% wait {:.0}%, rx cpu {:.0}% wait {:.0}%",
                pct(tu[0].0),
                pct(tu[0].1),
                pct(tu[1].0),
                pct(tu[1].1)
            );
            let (gcg, tcg) =
                (cpu_per_gb(&s0, &s1, "gradwire", bytes), (tu[0].0 + tu[1].0) as f64 / 1e9 / (bytes as f64 / 1e9));
            gc.push(gcg);
            tc.push(tcg);
            let (gg, tg) = (bytes as f64 * 8.0 / gs / 1e9, bytes as f64 * 8.0 / ts / 1e9);
            println!("  mtu {label} rep {i}: gradwire {gg:6.2} Gbit/s ({gs:.3} s, {retx} retx, {why})  tcp {tg:6.2} Gbit/s  ratio {:.2}\n      gradwire [{cpu}] {gcg:.2} cpu-s/GB   tcp [{tcpu}] {tcg:.2} cpu-s/GB", gg / tg);
            g.push(gg);
            t.push(tg);
            r.push(gg / tg);
        }
        let c = comms[1].counters();
        drop(comms);
        let (mg, mt, mr) = (median(&mut g), median(&mut t), median(&mut r));
        let (mgc, mtc) = (median(&mut gc), median(&mut tc));
        println!("mtu {label}: median gradwire {mg:.2} Gbit/s, tcp {mt:.2} Gbit/s, median ratio {mr:.2}; cpu-s/GB (both ends) gradwire {mgc:.2}, tcp {mtc:.2} (rx datagrams {}, load {})", c.datagrams_received, load());
        println!("RESULT {{\"mode\":\"goodput\",\"mtu\":{label},\"mib\":{mb},\"reps\":{reps},\"gradwire_gbps\":{mg:.3},\"tcp_gbps\":{mt:.3},\"ratio\":{mr:.3},\"gradwire_cpu_s_per_gb\":{mgc:.3},\"tcp_cpu_s_per_gb\":{mtc:.3}}}");
        results.push((label, mg, mt, mr));
    }
}

// ---- loss -----------------------------------------------------------------------------

fn ring_once(comms: &[Communicator], sched: &Arc<Schedule>, elems: usize) -> (f64, f64, u64) {
    let t0 = Instant::now();
    let reps = Communicator::on_each(comms, |r, c| {
        let mut x = vec![r as f32 + 1.0; elems];
        c.run(sched.clone(), &mut x).expect("ring allreduce")
    });
    let secs = t0.elapsed().as_secs_f64();
    let delivered = reps.iter().map(|r| r.min_delivered_fraction).fold(1.0, f64::min);
    let retx = reps.iter().map(|r| r.retransmits).sum();
    (secs, delivered, retx)
}

fn loss(args: &[String]) {
    let reps = arg(args, "--reps", 5.0) as usize;
    let p = arg(args, "--loss", 0.01);
    let mss = arg(args, "--mss", 1440.0) as u32;
    println!(
        "loss: ring allreduce, {p} injected loss with bound {p} vs lossless, mss {mss}, {reps} reps, load before: {}",
        load()
    );
    for world in [2u32, 4] {
        for mb in [25u64, 100] {
            let bytes = mb * 1_000_000;
            let elems = (bytes / 4) as usize;
            let clean = Arc::new(ring(world, bytes, 4, &CollectiveOptions::default()));
            let bounded = Arc::new(ring(
                world,
                bytes,
                4,
                &CollectiveOptions { reduce_loss_bound: p, ..CollectiveOptions::default() },
            ));
            let plain = local_job(world, |_| base_cfg(mss));
            let lossy = local_job(world, |_| EngineConfig {
                impairments: vec![Impairment { loss: p, delay: Duration::ZERO }; world as usize],
                ..base_cfg(mss)
            });
            ring_once(&plain, &clean, elems);
            ring_once(&lossy, &bounded, elems);
            let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
            let mut min_frac = 1.0f64;
            for i in 0..reps {
                let (ta, _, _) = ring_once(&plain, &clean, elems);
                let (tb, frac, retx) = ring_once(&lossy, &bounded, elems);
                min_frac = min_frac.min(frac);
                println!("  {world} ranks {mb} MB rep {i}: lossless {:.1} ms, lossy {:.1} ms (delivered >= {frac:.4}, {retx} retx), ratio {:.2}", ta * 1e3, tb * 1e3, tb / ta);
                a.push(ta);
                b.push(tb);
                r.push(tb / ta);
            }
            let drops: u64 = lossy.iter().map(|c| c.counters().injected_drops).sum();
            drop(plain);
            drop(lossy);
            let (ma, mb_, mr) = (median(&mut a), median(&mut b), median(&mut r));
            println!("{world} ranks {mb} MB: median lossless {:.1} ms, lossy {:.1} ms, median ratio {mr:.2} (injected drops {drops}, min delivered {min_frac:.4}, load {})", ma * 1e3, mb_ * 1e3, load());
            println!("RESULT {{\"mode\":\"loss\",\"world\":{world},\"mb\":{mb},\"reps\":{reps},\"lossless_ms\":{:.2},\"lossy_ms\":{:.2},\"ratio\":{mr:.3},\"min_delivered\":{min_frac:.5}}}", ma * 1e3, mb_ * 1e3);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("goodput") | None => goodput(&args),
        Some("loss") => loss(&args),
        Some(m) => {
            eprintln!("unknown mode {m:?}: expected goodput or loss");
            std::process::exit(2);
        }
    }
}
