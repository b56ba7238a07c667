use super::addr::*;
use super::config::*;
use super::frame::*;
use super::stream::*;
use super::*;
use crate::auth::token_proof;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

const TOKEN: &str = "job-token";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn cfg(port: u16, rank: u32, n: u32, timeout: Duration) -> RendezvousConfig {
    RendezvousConfig {
        master_addr: "127.0.0.1".into(),
        master_port: port,
        rank,
        world_size: n,
        token: TOKEN.into(),
        timeout,
        mss: None,
        authenticated: false,
    }
}

/// Every rank's UDP socket "bound" to 0.0.0.0: the mesh must advertise 127.0.0.1.
fn udp_of(rank: u32) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 40000 + rank as u16)
}

type Joining = thread::JoinHandle<Result<Mesh, NetError>>;

fn spawn_rank(c: RendezvousConfig, delay: Duration) -> Joining {
    thread::spawn(move || {
        thread::sleep(delay);
        rendezvous(&c, udp_of(c.rank))
    })
}

/// A job of `n` ranks whose rank 0 listens on a free local port; every rank gives up
/// after `timeout`.
struct Job {
    port: u16,
    n: u32,
    timeout: Duration,
}

impl Job {
    fn new(n: u32, timeout: Duration) -> Job {
        Job { port: free_port(), n, timeout }
    }

    /// Rank `r`'s configuration.
    fn cfg(&self, r: u32) -> RendezvousConfig {
        cfg(self.port, r, self.n, self.timeout)
    }

    /// Rank `r` joining now, in its own thread.
    fn spawn(&self, r: u32) -> Joining {
        spawn_rank(self.cfg(r), Duration::ZERO)
    }
}

/// The meshes of ranks that all had to succeed (spawned before any is joined).
fn joined(ranks: Vec<Joining>) -> Vec<Mesh> {
    ranks.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
}

/// Identical session and peer tables, and a working stream for every pair.
fn check_mesh(meshes: Vec<Mesh>) {
    check_mesh_at(meshes, |_| IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// `check_mesh` for ranks whose advertised IP is `ip(rank)`.
fn check_mesh_at(meshes: Vec<Mesh>, ip: impl Fn(u32) -> IpAddr) {
    let n = meshes.len() as u32;
    let session = meshes[0].session;
    assert_ne!(session, 0);
    for (r, m) in meshes.iter().enumerate() {
        assert_eq!(m.rank, r as u32);
        assert_eq!(m.world_size, n);
        assert_eq!(m.session, session);
        assert_eq!(m.peers, meshes[0].peers);
        assert_eq!(m.control.len(), n as usize);
        for (k, s) in m.control.iter().enumerate() {
            assert_eq!(s.is_none(), k == r, "rank {r} control[{k}]");
            if let Some(s) = s {
                assert!(s.nodelay().unwrap());
                assert_eq!(s.read_timeout().unwrap(), None);
            }
        }
    }
    for (k, p) in meshes[0].peers.iter().enumerate() {
        assert_eq!(p.rank, k as u32);
        assert_eq!(p.udp_addr, SocketAddr::new(ip(k as u32), 40000 + k as u16));
    }
    let handles: Vec<_> = meshes
        .into_iter()
        .map(|mut m| {
            thread::spawn(move || {
                let me = m.rank as u8;
                for (k, s) in m.control.iter_mut().enumerate() {
                    if let Some(s) = s {
                        s.write_all(&[me, k as u8]).unwrap();
                    }
                }
                for (k, s) in m.control.iter_mut().enumerate() {
                    if let Some(s) = s {
                        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        let mut b = [0u8; 2];
                        s.read_exact(&mut b).unwrap();
                        assert_eq!(b, [k as u8, me], "rank {me} reading from rank {k}");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

fn form(n: u32, master_delay: Duration) {
    let job = Job::new(n, Duration::from_secs(10));
    let delay = |r| if r == 0 { master_delay } else { Duration::ZERO };
    check_mesh(joined((0..n).map(|r| spawn_rank(job.cfg(r), delay(r))).collect()));
}

#[test]
fn mesh_forms_for_2_ranks() {
    form(2, Duration::ZERO);
}

#[test]
fn mesh_forms_for_4_ranks_with_rank_0_starting_last() {
    form(4, Duration::from_millis(400));
}

#[test]
fn the_job_agrees_on_one_segment_size() {
    // Chosen from loopback's 64 KiB MTU, on every rank.
    let job = Job::new(3, Duration::from_secs(10));
    let meshes = joined((0..3).map(|r| job.spawn(r)).collect());
    assert!(meshes.iter().all(|m| m.mss == MAX_MSS), "{:?}", meshes.iter().map(|m| m.mss).collect::<Vec<_>>());
    // Given explicitly, the same on every rank.
    let job = Job::new(3, Duration::from_secs(10));
    let with = |r| RendezvousConfig { mss: Some(1440), ..job.cfg(r) };
    let meshes = joined((0..3).map(|r| spawn_rank(with(r), Duration::ZERO)).collect());
    assert!(meshes.iter().all(|m| m.mss == 1440));
}

#[test]
fn segment_size_fills_the_path_mtu() {
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert_eq!(mss_for_mtu(1500, v4), 1440);
    assert_eq!(mss_for_mtu(9000, v4), 8940);
    assert_eq!(mss_for_mtu(1500, v6), 1420);
    assert_eq!(mss_for_mtu(65536, v4), MAX_MSS);
    assert_eq!(mss_for_mtu(68, v4), MIN_MSS);
    // A connected loopback socket reports loopback's MTU (65536, capped at IP's 65535).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    assert!(path_mtu(&s) >= 65_535, "{}", path_mtu(&s));
}

#[test]
fn mesh_forms_for_8_ranks() {
    form(8, Duration::ZERO);
}

#[test]
fn a_world_of_one_needs_no_network() {
    let m = rendezvous(&cfg(free_port(), 0, 1, Duration::from_secs(1)), udp_of(0)).unwrap();
    assert_eq!((m.world_size, m.peers.len(), m.control.len()), (1, 1, 1));
    assert_ne!(m.session, 0);
}

/// Connect to `port` as a hand-made process, send `bytes`, return the answer.
fn raw(port: u16, bytes: &[u8]) -> (TcpStream, Result<Frame, RecvError>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(bytes).unwrap();
    let r = recv_frame(&mut s, MAX_FRAME, Instant::now() + Duration::from_secs(5));
    (s, r)
}

fn hello(rank: u32, world_size: u32, ctrl: SocketAddr) -> Frame {
    Frame::Hello(Hello {
        token: token_proof(TOKEN, false),
        rank,
        world_size,
        udp: SocketAddr::from(([127, 0, 0, 1], 40000 + rank as u16)),
        ctrl,
        mss: 0,
        mtu: 65536,
    })
}

#[test]
fn wrong_processes_are_refused_and_the_right_ones_still_form_the_job() {
    let n = 4;
    let job = Job::new(n, Duration::from_secs(10));
    let port = job.port;
    let r0 = job.spawn(0);
    let r3 = job.spawn(3);
    thread::sleep(Duration::from_millis(500)); // rank 3 has joined
    let short = Duration::from_secs(3);
    let refused = |c: RendezvousConfig| match rendezvous(&c, udp_of(c.rank)) {
        Err(NetError::Refused(m)) => m,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let prefix = format!("rank 0 at 127.0.0.1:{port} refused this process: ");

    let mut wrong_token = cfg(port, 1, n, short);
    wrong_token.token = "another-job".into();
    assert_eq!(
        refused(wrong_token),
        format!("{prefix}the job token does not match (set GRADWIRE_TOKEN to the job's token; GRADWIRE_AUTH must also agree)")
    );
    let m = refused(cfg(port, 1, 8, short));
    assert!(m.starts_with(&format!("{prefix}WORLD_SIZE is 8 but the job has 4 ranks")), "{m}");
    let m = refused(cfg(port, 3, n, short));
    assert!(m.starts_with(&format!("{prefix}rank 3 has already joined")), "{m}");
    let mut other_mss = cfg(port, 1, n, short);
    other_mss.mss = Some(1000);
    assert_eq!(
        refused(other_mss),
        format!("{prefix}this rank asks for mss=1000 but rank 0 chooses it from the path MTU (give every rank the same mss, or none)")
    );

    // Out of range and another protocol version cannot come from a valid config: hand-made.
    let ctrl = SocketAddr::from(([127, 0, 0, 1], 1));
    match raw(port, &hello(9, n, ctrl).encode()).1 {
        Ok(Frame::Refuse(r)) => assert!(r.starts_with("rank 9 is outside 0..4"), "{r}"),
        other => panic!("{other:?}"),
    }
    let mut v99 = hello(2, n, ctrl).encode();
    v99[13..15].copy_from_slice(&99u16.to_be_bytes());
    match raw(port, &v99).1 {
        Ok(Frame::Refuse(r)) => assert!(r.contains("protocol version 99"), "{r}"),
        other => panic!("{other:?}"),
    }

    let r1 = job.spawn(1);
    let r2 = job.spawn(2);
    check_mesh(joined(vec![r0, r1, r2, r3]));
}

#[test]
fn master_never_appears_gives_timeout_within_the_timeout() {
    let port = free_port();
    let t0 = Instant::now();
    let err = rendezvous(&cfg(port, 1, 2, Duration::from_secs(1)), udp_of(1)).unwrap_err();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(950) && took < Duration::from_millis(2000), "{took:?}");
    match err {
        NetError::Timeout { what, .. } => {
            assert!(
                what.starts_with(&format!("rank 1 waiting for rank 0 to accept connections at 127.0.0.1:{port}")),
                "{what}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_rank_times_out_everyone_naming_it() {
    let job = Job::new(4, Duration::from_secs(1));
    let t0 = Instant::now();
    let r0 = job.spawn(0);
    let r1 = job.spawn(1);
    let r3 = job.spawn(3);
    let want = format!("waiting for rank 2 to join at 127.0.0.1:{}", job.port);
    match r0.join().unwrap().unwrap_err() {
        NetError::Timeout { what, .. } => assert_eq!(what, want),
        other => panic!("{other:?}"),
    }
    for h in [r1, r3] {
        match h.join().unwrap().unwrap_err() {
            NetError::Timeout { what, .. } => assert_eq!(what, format!("rank 0 gave up {want}")),
            other => panic!("{other:?}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_millis(2500), "{:?}", t0.elapsed());
}

#[derive(Clone, Copy, Debug)]
enum Death {
    /// Sends its hello and exits before the Welcome.
    BeforeWelcome,
    /// Reads the Welcome and exits.
    AfterWelcome,
    /// Reads the Welcome and stalls (stopped process), connection open.
    Stalls,
}

fn dying_joiner(death: Death) {
    let job = Job::new(3, Duration::from_secs(1));
    let port = job.port;
    let t0 = Instant::now();
    let r0 = job.spawn(0);
    let r1 = job.spawn(1);
    let fake = thread::spawn(move || {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = connect_retry(
            || Ok(SocketAddr::from(([127, 0, 0, 1], port))),
            Instant::now() + Duration::from_secs(2),
            "test",
            Instant::now(),
        )
        .unwrap();
        send_frame(&mut s, &hello(2, 3, l.local_addr().unwrap()), Instant::now() + Duration::from_secs(1)).unwrap();
        if let Death::BeforeWelcome = death {
            return;
        }
        let w = recv_frame(&mut s, MAX_FRAME, Instant::now() + Duration::from_secs(2));
        assert!(matches!(w, Ok(Frame::Welcome { .. })), "{w:?}");
        if let Death::Stalls = death {
            thread::sleep(Duration::from_secs(3));
        }
        drop(l);
    });
    for (r, h) in [(0, r0), (1, r1)] {
        let e = h.join().unwrap().unwrap_err();
        assert!(matches!(e, NetError::Timeout { .. }), "{death:?}: rank {r} got {e}");
        eprintln!("{death:?}: rank {r}: {e}");
    }
    // One step (gathering or mesh) times out; the others finish at once.
    assert!(t0.elapsed() < Duration::from_millis(3500), "{death:?}: {:?}", t0.elapsed());
    fake.join().unwrap();
}

#[test]
fn joiner_dying_before_the_welcome_times_out_the_others() {
    dying_joiner(Death::BeforeWelcome);
}

#[test]
fn joiner_dying_after_the_welcome_times_out_the_others() {
    dying_joiner(Death::AfterWelcome);
}

#[test]
fn joiner_stalling_after_the_welcome_times_out_the_others() {
    dying_joiner(Death::Stalls);
}

#[test]
fn garbage_at_the_master_port_is_refused_and_the_job_forms() {
    let job = Job::new(2, Duration::from_secs(8));
    let port = job.port;
    let t0 = Instant::now();
    let r0 = job.spawn(0);
    thread::sleep(Duration::from_millis(200));
    // A connection that never says anything stays open for the whole test.
    let silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // HTTP: the "length" is 1.2 GB, refused before allocating.
    match raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").1 {
        Ok(Frame::Refuse(r)) => assert!(r.contains("not a gradwire rendezvous frame"), "{r}"),
        other => panic!("{other:?}"),
    }
    match raw(port, &[0, 0, 0, 5, 99, 1, 2, 3, 4]).1 {
        Ok(Frame::Refuse(r)) => assert!(r.contains("unknown frame kind 99"), "{r}"),
        other => panic!("{other:?}"),
    }
    match raw(port, &[0, 0, 0, 0]).1 {
        Ok(Frame::Refuse(_)) => {}
        other => panic!("{other:?}"),
    }
    // A Welcome sent to rank 0, and random bytes (xorshift, fixed seed).
    let w = Frame::Welcome { session: 1, mss: 1440, peers: vec![] }.encode();
    assert!(matches!(raw(port, &w).1, Ok(Frame::Refuse(_))));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..40 {
        let mut bytes = Vec::new();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for _ in 0..(x % 64) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(x as u8);
        }
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = s.write_all(&bytes);
        drop(s);
    }
    let meshes = joined(vec![r0, job.spawn(1)]);
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    check_mesh(meshes);
    drop(silent);
}

#[test]
fn stray_control_connections_are_refused() {
    let job = Job::new(3, Duration::from_secs(5));
    let port = job.port;
    let r0 = job.spawn(0);
    let r1 = job.spawn(1);
    // Rank 2 by hand.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let d = || Instant::now() + Duration::from_secs(3);
    let mut m = connect_retry(|| Ok(SocketAddr::from(([127, 0, 0, 1], port))), d(), "test", Instant::now()).unwrap();
    send_frame(&mut m, &hello(2, 3, l.local_addr().unwrap()), d()).unwrap();
    let Ok(Frame::Welcome { session, peers, .. }) = recv_frame(&mut m, MAX_FRAME, d()) else { panic!("no welcome") };
    let to_rank_1 = |f: Frame| {
        let mut s = TcpStream::connect(peers[1].ctrl).unwrap();
        send_frame(&mut s, &f, d()).unwrap();
        let r = recv_frame(&mut s, MAX_FRAME, d());
        (s, r)
    };
    let refusal = |f: Frame| match to_rank_1(f).1 {
        Ok(Frame::Refuse(r)) => r,
        other => panic!("{other:?}"),
    };
    let other_job = refusal(Frame::MeshHello { session: session ^ 1, from: 2, to: 1 });
    assert!(other_job.contains("session does not match"), "{other_job}");
    assert!(refusal(Frame::MeshHello { session, from: 2, to: 5 }).contains("meant for rank 5"));
    assert!(refusal(Frame::MeshHello { session, from: 0, to: 1 }).contains("must not connect"));
    assert!(refusal(Frame::Ready { session }).contains("expected a mesh hello"));
    let (mut c, ack) = to_rank_1(Frame::MeshHello { session, from: 2, to: 1 });
    assert_eq!(ack.unwrap(), Frame::MeshAck { session, rank: 1 });
    send_frame(&mut m, &Frame::Ready { session }, d()).unwrap();
    assert_eq!(recv_frame(&mut m, MAX_FRAME, d()).unwrap(), Frame::Go { session });
    let mut m1 = r1.join().unwrap().unwrap();
    let m0 = r0.join().unwrap().unwrap();
    assert_eq!((m0.session, m1.session), (session, session));
    m1.control[2].as_mut().unwrap().write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hi");
}

/// Network namespaces for the test below: hosts `gwrt<pid>-h<i>` with `eth0` =
/// 10.251.P.(i+1)/24 on a bridge in `gwrt<pid>-br`. Deleted on drop.
struct TestNet {
    names: Vec<String>,
}

impl TestNet {
    fn ip(args: &[&str]) -> Result<(), String> {
        let out = std::process::Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    fn host_ip(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 251, (std::process::id() & 0xFF) as u8, i as u8 + 1))
    }

    /// `Err` (the reason to skip) without root or `ip`.
    fn new(n: u32) -> Result<TestNet, String> {
        let tag = format!("gwrt{}", std::process::id());
        let br = format!("{tag}-br");
        let mut net = TestNet { names: vec![] };
        net.names.push(br.clone());
        Self::ip(&["netns", "add", &br])?;
        Self::ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        Self::ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = format!("{tag}-h{i}");
            net.names.push(ns.clone());
            let v = format!("v{i}");
            Self::ip(&["netns", "add", &ns])?;
            Self::ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            Self::ip(&["link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &v, "netns", &br])?;
            Self::ip(&["-n", &br, "link", "set", &v, "master", "br0"])?;
            Self::ip(&["-n", &br, "link", "set", &v, "up"])?;
            Self::ip(&["-n", &ns, "addr", "add", &format!("{}/24", Self::host_ip(i)), "dev", "eth0"])?;
            Self::ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(net)
    }

    /// Move the calling thread into host `i`'s network namespace.
    fn enter(i: u32) {
        let f = std::fs::File::open(format!("/var/run/netns/gwrt{}-h{i}", std::process::id())).unwrap();
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for ns in self.names.iter().rev() {
            let _ = Self::ip(&["netns", "del", ns]);
        }
    }
}

/// Every rank (a thread) in its own network namespace, UDP "bound" to 0.0.0.0: each
/// advertises its namespace's address, and every pair connects. Needs root and `ip`.
#[test]
fn mesh_forms_across_network_namespaces() {
    let n = 4;
    let net = match TestNet::new(n) {
        Ok(net) => net,
        Err(why) => {
            eprintln!("skipped: no network namespaces here ({why})");
            return;
        }
    };
    let master = TestNet::host_ip(0).to_string();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let mut c = cfg(29500, r, n, Duration::from_secs(10));
            c.master_addr = master.clone();
            thread::spawn(move || {
                TestNet::enter(r);
                rendezvous(&c, udp_of(r))
            })
        })
        .collect();
    let meshes = joined(handles);
    for m in &meshes[1..] {
        let s = m.control[0].as_ref().unwrap();
        assert_eq!(s.local_addr().unwrap().ip(), TestNet::host_ip(m.rank));
        assert_eq!(s.peer_addr().unwrap(), SocketAddr::new(TestNet::host_ip(0), 29500));
    }
    check_mesh_at(meshes, TestNet::host_ip);
    drop(net);
}

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

const GOOD: [(&str, &str); 4] =
    [("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "3"), ("WORLD_SIZE", "8")];

fn config_error(change: (&str, Option<&str>)) -> String {
    let mut pairs: Vec<(&str, &str)> = GOOD.iter().copied().filter(|(k, _)| *k != change.0).collect();
    if let Some(v) = change.1 {
        pairs.push((change.0, v));
    }
    match RendezvousConfig::from_lookup(vars(&pairs)) {
        Err(NetError::Config(m)) => m,
        other => panic!("{change:?}: {other:?}"),
    }
}

#[test]
fn config_from_environment_variables() {
    let c = RendezvousConfig::from_lookup(vars(&GOOD)).unwrap();
    assert_eq!((c.master_addr.as_str(), c.master_port, c.rank, c.world_size), ("10.0.0.1", 29500, 3, 8));
    assert_eq!((c.token.as_str(), c.timeout), ("", DEFAULT_TIMEOUT));
    let mut more = GOOD.to_vec();
    more.extend([("GRADWIRE_TOKEN", "s3cret"), ("GRADWIRE_RENDEZVOUS_TIMEOUT", "0.5")]);
    let c = RendezvousConfig::from_lookup(vars(&more)).unwrap();
    assert_eq!((c.token.as_str(), c.timeout), ("s3cret", Duration::from_millis(500)));

    assert!(config_error(("MASTER_ADDR", None)).starts_with("MASTER_ADDR is not set"));
    assert!(config_error(("MASTER_PORT", Some("http"))).starts_with("MASTER_PORT is \"http\": expected a TCP port"));
    assert!(config_error(("MASTER_PORT", Some("0"))).starts_with("MASTER_PORT is \"0\""));
    assert!(config_error(("RANK", Some("two"))).starts_with("RANK is \"two\": expected"));
    assert!(
        config_error(("RANK", Some("8"))).contains("RANK is \"8\": expected this process's rank, an integer in 0..8")
    );
    assert!(config_error(("RANK", None)).starts_with("RANK is not set"));
    assert!(config_error(("WORLD_SIZE", Some("0"))).starts_with("WORLD_SIZE is \"0\""));
    assert!(config_error(("WORLD_SIZE", Some(""))).starts_with("WORLD_SIZE is set but empty"));
    assert!(config_error(("GRADWIRE_RENDEZVOUS_TIMEOUT", Some("soon")))
        .starts_with("GRADWIRE_RENDEZVOUS_TIMEOUT is \"soon\""));
    assert!(config_error(("GRADWIRE_RENDEZVOUS_TIMEOUT", Some("-1"))).contains("\"-1\""));
    assert_eq!(RendezvousConfig::new("::1", 29500, 0, 2).master_display(), "[::1]:29500");
}

#[test]
fn frames_round_trip_and_the_decoder_rejects_every_truncation() {
    let a4 = SocketAddr::from(([10, 1, 2, 3], 29500));
    let a6: SocketAddr = "[fe80::1]:4000".parse().unwrap();
    let frames = vec![
        hello(3, 8, a6),
        Frame::Welcome {
            session: 77,
            mss: 8936,
            peers: vec![Entry { udp: a4, ctrl: a6 }, Entry { udp: a6, ctrl: a4 }],
        },
        Frame::Refuse("no".into()),
        Frame::MeshHello { session: 5, from: 3, to: 1 },
        Frame::MeshAck { session: 5, rank: 1 },
        Frame::Ready { session: 9 },
        Frame::Go { session: 9 },
        Frame::Abort { kind: AbortKind::Lost, rank: 4, msg: "gone".into() },
    ];
    for f in frames {
        let bytes = f.encode();
        assert_eq!(u32::from_be_bytes(bytes[0..4].try_into().unwrap()) as usize, bytes.len() - 4);
        assert_eq!(Frame::decode(&bytes[4..]), Ok(f.clone()));
        for cut in 0..bytes.len() - 4 {
            assert!(Frame::decode(&bytes[4..4 + cut]).is_err(), "{f:?} cut at {cut}");
        }
        let mut longer = bytes[4..].to_vec();
        longer.push(0);
        assert!(Frame::decode(&longer).is_err());
    }
    // A welcome claiming a huge world in a few bytes is refused without allocating.
    let mut w = vec![K_WELCOME];
    w.extend_from_slice(&1u64.to_be_bytes());
    w.extend_from_slice(&MAX_WORLD_SIZE.to_be_bytes());
    assert!(Frame::decode(&w).is_err());
    // Arbitrary bytes never panic.
    let mut x: u32 = 1;
    for _ in 0..20000 {
        let mut b = Vec::new();
        for _ in 0..(x % 48) {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            b.push((x >> 24) as u8);
        }
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let _ = Frame::decode(&b);
    }
}

mod hello_readers {
    use super::*;

    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
    }

    /// Silent connections cost rank 0 at most `MAX_HELLO_READERS` threads (one per
    /// connection made 1,002 threads for 1,000 connections).
    #[test]
    fn silent_connections_take_a_bounded_number_of_threads() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let before = threads();
        let mut cfg = RendezvousConfig::new("127.0.0.1", port, 0, 2);
        cfg.timeout = Duration::from_secs(4);
        let master = thread::spawn(move || rendezvous(&cfg, "127.0.0.1:40000".parse().unwrap()));
        thread::sleep(Duration::from_millis(300));
        let silent: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok()).collect();
        let mut most = 0;
        for _ in 0..20 {
            thread::sleep(Duration::from_millis(50));
            most = most.max(threads());
        }
        assert!(
            most <= before + 1 + MAX_HELLO_READERS + 4,
            "{most} threads for {} silent connections (before: {before})",
            silent.len()
        );
        drop(silent);
        assert!(master.join().unwrap().is_err(), "rank 1 never joined");
    }
}

mod fuzz_seeds {
    /// The fuzz corpus seeds are frames that decode (so the fuzzer starts past the magic).
    #[test]
    fn the_fuzz_seeds_decode() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/rendezvous_frame");
        for name in ["seed-hello", "seed-welcome", "seed-refuse"] {
            let body = std::fs::read(format!("{dir}/{name}")).unwrap();
            assert!(super::fuzz_decode_frame(&body), "{name}");
        }
    }
}
