//! The running emulator: build the hosts, forward until told to stop, always tear down.

use crate::netns;
use crate::offload::{
    partial_csum_hdr, split_tso, split_uso, Coalescer, VnetHdr, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_UDP_L4, VNET_HDR_LEN,
};
use crate::scenario::EmuScenario;
use crate::switch::{host_addr, Stats, Switch, HEADROOM};
use crate::tun::Tun;
use gradwire_core::time::{Time, MS, NS};
use serde::Serialize;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Instant;

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP end the run (with a teardown); so does the death of the
/// parent process, which the kernel turns into SIGTERM.
fn install_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    // SAFETY: prctl with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        // wake on time: the default 50 us slack would be 4 packet times at 1 Gbit/s
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

pub struct Options {
    pub prefix: String,
    /// Rewrite this file with the counters every 200 ms and at the end (atomically).
    pub stats: Option<PathBuf>,
    /// Stop when stdin closes (the front end holds the other end of a pipe).
    pub watch_stdin: bool,
    /// Stop after this many seconds.
    pub duration: Option<f64>,
}

#[derive(Serialize)]
struct HostInfo {
    host: u32,
    netns: String,
    addr: String,
    dev: &'static str,
}

#[derive(Serialize)]
struct Ready<'a> {
    ready: bool,
    prefix: &'a str,
    hosts: &'a [HostInfo],
    ports: Vec<String>,
}

#[derive(Default, Serialize, Clone)]
struct TunCounters {
    /// Packets read and written (a super-packet counts as its segments).
    reads: u64,
    writes: u64,
    write_errors: u64,
    /// System calls: with offload, fewer than packets.
    read_calls: u64,
    write_calls: u64,
    /// Super-packets of an offload type the switch does not split (dropped).
    unsupported_gso: u64,
    /// Wakes from a timed sleep later than asked (µs, the worst), and how many were more than
    /// 1 ms late: the switch waiting for a core, while packets wait in the hosts' kernels.
    max_late_us: u64,
    late_over_1ms: u64,
    /// Rounds of the loop, those that polled the devices without sleeping (a device left
    /// backlogged, or a delivery already due), and those that slept in the poll until a
    /// device was readable or the next delivery was due: where the switch's CPU goes.
    /// `polls`: `ppoll` calls (one per round).
    rounds: u64,
    idle_rounds: u64,
    sleeps: u64,
    polls: u64,
    /// The switch's CPU time inside its TUN writes (seconds). A write to a TUN device runs
    /// the receiving namespace's whole input path (`netif_receive_skb`, TCP/UDP receive,
    /// waking the socket's reader) in the writer's context: this is the hosts' kernel
    /// receive work, charged to the switch; the rest of `cpu_seconds` is forwarding.
    write_cpu_seconds: f64,
}

#[derive(Serialize)]
struct Report<'a> {
    name: &'a str,
    seed: u64,
    #[serde(flatten)]
    stats: Stats,
    tun: TunCounters,
    wall_seconds: f64,
    /// CPU time of the switch process (user + system), for forwarding cost.
    cpu_seconds: f64,
}

/// Namespaces this run made; dropping it removes them, on every path out (errors and
/// panics included).
struct Built(Vec<String>);

impl Drop for Built {
    fn drop(&mut self) {
        for ns in self.0.drain(..).rev() {
            if let Err(e) = netns::remove(&ns) {
                eprintln!("gradwire-emu: teardown of {ns}: {e}");
            }
        }
    }
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// This thread's CPU time (user + system), in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Build, forward until stopped, tear down. Returns the signal that stopped it (0 if none).
pub fn run(s: &EmuScenario, opts: &Options) -> io::Result<i32> {
    install_signals();
    for ns in netns::sweep_stale() {
        eprintln!("gradwire-emu: removed stale namespace {ns} (its run is gone)");
    }
    let mut sw = Switch::new(s);
    if let Ok(spec) = std::env::var("GRADWIRE_EMU_TRACE") {
        let (port, file) = spec
            .split_once(':')
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "GRADWIRE_EMU_TRACE is PORT:FILE"))?;
        sw.trace_port(port, std::path::Path::new(file))?;
    }
    let mut built = Built(Vec::new());
    let mut tuns = Vec::new();
    let mut hosts = Vec::new();
    for h in 0..sw.hosts() {
        if STOP.load(Ordering::SeqCst) {
            return Ok(SIGNAL.load(Ordering::SeqCst));
        }
        let (ns, dev) = (netns::ns_name(&opts.prefix, h), netns::tun_name(&opts.prefix, h));
        let tun = Tun::create(&dev, s.offload())?;
        built.0.push(ns.clone());
        let [a, b, c, d] = host_addr(h);
        let addr = format!("{a}.{b}.{c}.{d}");
        netns::build_host(&ns, &dev, &addr, s.mtu())?;
        tuns.push(tun);
        hosts.push(HostInfo { host: h, netns: ns, addr, dev: "eth0" });
    }
    let ready = Ready { ready: true, prefix: &opts.prefix, hosts: &hosts, ports: sw.port_names() };
    let mut out = io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&ready)?)?;
    out.flush()?;
    drop(out);

    let started = Instant::now();
    let cpu0 = cpu_seconds();
    let clock = || started.elapsed().as_nanos() as u64 * NS;
    let mut tc = TunCounters::default();
    let mut run_delay = RunDelay::open();
    let mut fds: Vec<libc::pollfd> =
        tuns.iter().map(|t| libc::pollfd { fd: t.raw(), events: libc::POLLIN, revents: 0 }).collect();
    if opts.watch_stdin {
        fds.push(libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 });
    }
    let end = opts.duration.map(|d| (d * 1e12) as u64);
    let mut next_stats = 0;
    let write_stats = |sw: &Switch, tc: &TunCounters| -> io::Result<()> {
        let Some(path) = &opts.stats else {
            return Ok(());
        };
        let report = Report {
            name: &s.sim.name,
            seed: s.sim.seed,
            stats: sw.stats(),
            tun: tc.clone(),
            wall_seconds: started.elapsed().as_secs_f64(),
            cpu_seconds: cpu_seconds() - cpu0,
        };
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&report)?)?;
        std::fs::rename(&tmp, path)
    };
    const BATCH: usize = 64;
    let offload = s.offload();
    let mut big = vec![0u8; VNET_HDR_LEN + 65_536];
    let mut scratch = Vec::new();
    let mut merge: Vec<Coalescer> = tuns.iter().map(|_| Coalescer::default()).collect();
    // A packet read from a TUN device enters its host's NIC port at the time the device was
    // last found empty (`Switch::host_idle`): the host's kernel wrote it since then, so
    // that is the earliest it can have been sent. Stamped with the time of the read
    // instead, every stretch the switch spends off the CPU (tens of ms on a loaded
    // machine) would be lost to the link. Each round runs the fabric only as far as
    // `Switch::horizon` (the earliest time a device was last found empty), so no packet is
    // stamped before an event that already ran; then it waits in one `ppoll` on every
    // device until one is readable or the next delivery is due (`Switch::next_wake`), and
    // reads only the devices `ppoll` found readable: the others were found empty when it
    // returned. An idle switch blocks; a busy one makes one system call per round to
    // learn which devices hold packets, not one read per device.
    let hosts = tuns.len();
    let mut backlogged = false;
    // Receive interrupt moderation (`[emulate] rx_coalesce_us`): when each host's held
    // packets are due, counted from the first one's arrival. One timer for the whole
    // switch: the wakes it costs follow the link rate, not the number of hosts.
    let rx_coalesce = s.rx_coalesce();
    let mut held: Vec<Time> = vec![0; hosts];
    while !STOP.load(Ordering::SeqCst) {
        let now = clock();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        if now >= next_stats {
            write_stats(&sw, &tc)?;
            next_stats = now + 200 * MS;
        }
        let horizon = sw.horizon(now);
        if offload {
            sw.advance(horizon, |h, at, head, pkt| {
                let m = &mut merge[h as usize];
                if m.is_empty() {
                    held[h as usize] = at + rx_coalesce;
                }
                m.push(VnetHdr::parse(head), pkt)
            });
            // once one host's held packets are due, every host's go up: one wake (and one
            // write per host and flow) for what the whole network delivered meanwhile,
            // each packet at most `rx_coalesce` late
            let now = clock();
            let due = merge.iter().zip(&held).any(|(m, &t)| !m.is_empty() && t <= now);
            let cpu0 = if due { thread_cpu_seconds() } else { 0.0 };
            for (h, m) in merge.iter_mut().enumerate().filter(|(_, m)| due && !m.is_empty()) {
                let mut calls = 0;
                let mut errors = 0;
                let n = m.flush(|iov| {
                    calls += 1;
                    errors += tuns[h].send_parts(iov).is_err() as u64;
                });
                tc.writes += n;
                tc.write_calls += calls;
                tc.write_errors += errors;
            }
            if due {
                tc.write_cpu_seconds += thread_cpu_seconds() - cpu0;
            }
        } else {
            sw.advance(horizon, |h, _, _, pkt| {
                tc.write_calls += 1;
                let cpu0 = thread_cpu_seconds();
                match tuns[h as usize].send(pkt) {
                    Ok(()) => tc.writes += 1,
                    Err(_) => tc.write_errors += 1,
                }
                tc.write_cpu_seconds += thread_cpu_seconds() - cpu0;
            });
        }
        tc.rounds += 1;
        // A device left with packets in it is read again at once; otherwise sleep until a
        // device is readable, the next delivery is due, or the next stats write.
        let wait = if backlogged {
            0
        } else {
            let now = clock();
            let held = (merge.iter().zip(&held)).filter(|(m, _)| !m.is_empty()).map(|(_, &t)| t).min();
            let due = sw.next_wake().into_iter().chain(held).fold(next_stats, Time::min);
            due.saturating_sub(now).min(200 * MS)
        };
        if wait == 0 {
            tc.idle_rounds += 1;
        } else {
            tc.sleeps += 1;
        }
        let ts = libc::timespec {
            tv_sec: (wait / (1000 * MS)) as libc::time_t,
            tv_nsec: ((wait % (1000 * MS)) / NS) as libc::c_long,
        };
        let asleep = clock();
        let delay0 = if wait > 0 { run_delay.read() } else { None };
        // SAFETY: `fds` is a valid array of pollfd; a null sigmask keeps the current one.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
        let polled = clock();
        // Woken before the timeout, by a host's write: every device ppoll reports readable
        // was written at or after that wake-up (the first write caused it), which is the
        // return time less the time the thread then waited for a core. Without this the
        // packets would enter at the time the device was found empty before the sleep, up
        // to a whole sleep early: on a 10 ms RTT path, RTT samples of 0.6-8 ms.
        // (Only if it slept: a device found readable by ppoll's first scan was written
        // before the call, when the thread may have been off the CPU.)
        let woken = match (delay0, run_delay.read()) {
            (Some((d0, s0)), Some((d1, s1))) if n > 0 && s1 > s0 => {
                Some(polled.saturating_sub(d1.saturating_sub(d0)).max(asleep))
            }
            _ => None,
        }
        .filter(|&t| t < asleep + wait);
        tc.polls += 1;
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 && wait > 0 {
            let late = polled.saturating_sub(asleep + wait) / (1000 * NS);
            tc.max_late_us = tc.max_late_us.max(late);
            tc.late_over_1ms += (late > 1000) as u64;
        }
        if n > 0 && opts.watch_stdin {
            let stdin = fds.last().expect("pushed").revents;
            if stdin & (libc::POLLHUP | libc::POLLERR) != 0 {
                break;
            }
            if stdin & libc::POLLIN != 0 {
                let mut b = [0u8; 64];
                // SAFETY: reading into a local buffer.
                if unsafe { libc::read(0, b.as_mut_ptr().cast(), b.len()) } <= 0 {
                    break;
                }
            }
        }
        let mut got = 0;
        backlogged = false;
        for (h, tun) in tuns.iter().enumerate().take(hosts) {
            let host = h as u32;
            if n <= 0 || fds[h].revents == 0 {
                // ppoll looked at the device before it returned and found nothing
                sw.host_idle(host, polled);
                continue;
            }
            if let Some(t) = woken {
                sw.host_idle(host, t);
            }
            let read_at = clock();
            let mut empty = false;
            for _ in 0..BATCH {
                if offload {
                    let Some(n) = tun.recv(&mut big)? else {
                        empty = true;
                        break;
                    };
                    tc.read_calls += 1;
                    let v = VnetHdr::parse(&big[..VNET_HDR_LEN]);
                    let pkt = &big[VNET_HDR_LEN..n];
                    let mut ingest = |seg: &[u8], vh: VnetHdr| {
                        let id = sw.take_slot();
                        let slot = sw.slot_mut(id);
                        if seg.len() > slot.len() - HEADROOM {
                            sw.release_slot(id);
                            sw.ignored.malformed += 1;
                            return;
                        }
                        vh.write(&mut slot[..VNET_HDR_LEN]);
                        slot[HEADROOM..HEADROOM + seg.len()].copy_from_slice(seg);
                        sw.ingress(host, id, seg.len(), read_at);
                        got += 1;
                    };
                    match v.gso_type & !GSO_ECN {
                        GSO_NONE => ingest(pkt, v),
                        GSO_TCPV4 => {
                            if !split_tso(pkt, v.gso_size as usize, &mut scratch, |seg| {
                                ingest(seg, partial_csum_hdr(seg))
                            }) {
                                tc.unsupported_gso += 1;
                            }
                        }
                        GSO_UDP_L4 => {
                            if !split_uso(pkt, v.gso_size as usize, &mut scratch, |seg| {
                                ingest(seg, partial_csum_hdr(seg))
                            }) {
                                tc.unsupported_gso += 1;
                            }
                        }
                        _ => tc.unsupported_gso += 1,
                    }
                } else {
                    let id = sw.take_slot();
                    match tun.recv(&mut sw.slot_mut(id)[HEADROOM..])? {
                        Some(len) => {
                            tc.read_calls += 1;
                            got += 1;
                            sw.ingress(host, id, len, read_at);
                        }
                        None => {
                            sw.release_slot(id);
                            empty = true;
                            break;
                        }
                    }
                }
            }
            if empty {
                sw.host_idle(host, clock());
            } else {
                sw.host_backlogged(host, clock());
                backlogged = true;
            }
        }
        tc.reads += got;
    }
    write_stats(&sw, &tc)?;
    drop(tuns);
    drop(built);
    Ok(SIGNAL.load(Ordering::SeqCst))
}

/// This thread's time runnable but not running and its count of times put on a CPU
/// (`/proc/thread-self/schedstat`, second and third fields), read around a `ppoll`: whether
/// it slept, and how long after its wake-up the switch got a core.
struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    fn open() -> Self {
        RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }

    /// (run delay, times scheduled in)
    fn read(&mut self) -> Option<(Time, u64)> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.0.as_ref()?.read_at(&mut buf, 0).ok()?;
        let mut fields = std::str::from_utf8(&buf[..n]).ok()?.split_ascii_whitespace().skip(1);
        let delay: u64 = fields.next()?.parse().ok()?;
        let slices: u64 = fields.next()?.parse().ok()?;
        Some((delay * NS, slices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The switch tells a sleep from a return at ppoll's first scan by this thread's count
    /// of times put on a CPU: a sleep adds at least one.
    #[test]
    fn run_delay_counts_a_sleep_as_a_time_put_on_a_cpu() {
        let mut rd = RunDelay::open();
        let (d0, s0) = rd.read().expect("/proc/thread-self/schedstat");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (d1, s1) = rd.read().unwrap();
        assert!(s1 > s0, "{s0} -> {s1}");
        assert!(d1 >= d0);
    }
}
