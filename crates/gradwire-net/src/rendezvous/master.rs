//! Rank 0: listens, admits or refuses each hello, hands out the session and the peer
//! table, and waits for every rank's mesh before saying Go.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::RngCore;

use super::addr::*;
use super::frame::*;
use super::stream::*;
use super::*;
use crate::auth::token_proof;
use crate::NetError;

pub(super) struct Joined {
    pub(super) stream: TcpStream,
    pub(super) from: SocketAddr,
    pub(super) entry: Entry,
    /// Path MTU between this rank and rank 0 (the smaller of both ends' views).
    pub(super) mtu: u32,
}

pub(super) fn bind_master(cfg: &RendezvousConfig) -> Result<TcpListener, NetError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let here = cfg.master_display();
    let addr = cfg.resolve_master().map_err(NetError::Config)?;
    let bind = |addr: SocketAddr| -> io::Result<TcpListener> {
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        sock.bind(&addr.into())?;
        sock.listen(1024)?;
        Ok(sock.into())
    };
    match bind(addr) {
        Ok(l) => Ok(l),
        // MASTER_ADDR names this host from the others' point of view (NAT, a name that
        // resolves elsewhere): listen on every interface at that port.
        Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
            let any = match addr {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            bind(SocketAddr::new(any, addr.port()))
                .map_err(|e| NetError::io(format!("rank 0 cannot listen on {here} (MASTER_ADDR/MASTER_PORT)"), e))
        }
        Err(e) => Err(NetError::io(
            format!("rank 0 cannot listen on {here} (is another job using MASTER_PORT? pick another port)"),
            e,
        )),
    }
}

/// Why rank 0 refuses a hello, or `None` to admit it.
pub(super) fn check_hello(cfg: &RendezvousConfig, h: &Hello, joined: &mut BTreeMap<u32, Joined>) -> Option<String> {
    if !tokens_equal(&h.token, &token_proof(&cfg.token, cfg.authenticated)) {
        return Some(
            "the job token does not match (set GRADWIRE_TOKEN to the job's token; GRADWIRE_AUTH must also agree)"
                .into(),
        );
    }
    if h.world_size != cfg.world_size {
        return Some(format!(
            "WORLD_SIZE is {} but the job has {} ranks (set WORLD_SIZE={})",
            h.world_size, cfg.world_size, cfg.world_size
        ));
    }
    if h.rank >= cfg.world_size {
        return Some(format!(
            "rank {} is outside 0..{} (set RANK to a rank in 0..{})",
            h.rank, cfg.world_size, cfg.world_size
        ));
    }
    if h.mss != cfg.mss.unwrap_or(0) {
        let theirs = match h.mss {
            0 => "leaves the segment size to the path MTU".to_string(),
            m => format!("asks for mss={m}"),
        };
        let ours = match cfg.mss {
            None => "chooses it from the path MTU".to_string(),
            Some(m) => format!("uses mss={m}"),
        };
        return Some(format!("this rank {theirs} but rank 0 {ours} (give every rank the same mss, or none)"));
    }
    if h.rank == 0 {
        return Some(format!(
            "rank 0 has already joined (rank 0 is the process listening at {}; check RANK)",
            cfg.master_display()
        ));
    }
    if let Some(j) = joined.get(&h.rank) {
        if is_dead(&j.stream) {
            // The earlier process of this rank is gone: its replacement takes the slot.
            joined.remove(&h.rank);
        } else {
            return Some(format!("rank {} has already joined (from {}; check RANK)", h.rank, j.from));
        }
    }
    None
}

pub(super) fn form(cfg: &RendezvousConfig, udp_addr: SocketAddr, start: Instant) -> Result<Mesh, NetError> {
    let n = cfg.world_size;
    let here = cfg.master_display();
    if n == 1 {
        return Ok(Mesh {
            rank: 0,
            world_size: 1,
            session: random_session(),
            peers: vec![PeerInfo { rank: 0, udp_addr }],
            control: vec![None],
            mss: cfg.mss.unwrap_or(DEFAULT_MSS),
        });
    }
    let listener = bind_master(cfg)?;
    listener.set_nonblocking(true).map_err(|e| NetError::io("configuring the rendezvous listener", e))?;
    let deadline = start + cfg.timeout;

    // Gather: each new connection's hello is read on its own thread, so a connection that
    // stalls or sends garbage never holds up the others.
    let (tx, rx) = mpsc::channel::<(TcpStream, SocketAddr, Result<Frame, RecvError>)>();
    let mut joined: BTreeMap<u32, Joined> = BTreeMap::new();
    let mut refusals: Vec<String> = Vec::new();
    fn note(refusals: &mut Vec<String>, m: String) {
        if refusals.len() >= 8 {
            refusals.remove(0);
        }
        refusals.push(m);
    }
    let mut last_prune = Instant::now();
    let readers = Arc::new(AtomicUsize::new(0));
    loop {
        while readers.load(Ordering::Acquire) < MAX_HELLO_READERS {
            match listener.accept() {
                Ok((s, from)) => {
                    let tx = tx.clone();
                    let hello_deadline = deadline.min(Instant::now() + HELLO_READ_LIMIT);
                    readers.fetch_add(1, Ordering::AcqRel);
                    let done = readers.clone();
                    let spawned = thread::Builder::new().name("gradwire-hello".into()).spawn(move || {
                        let mut s = s;
                        let r = s
                            .set_nonblocking(false)
                            .map_err(RecvError::Io)
                            .and_then(|_| recv_frame(&mut s, MAX_HELLO_FRAME, hello_deadline));
                        done.fetch_sub(1, Ordering::AcqRel);
                        let _ = tx.send((s, from, r));
                    });
                    if let Err(e) = spawned {
                        readers.fetch_sub(1, Ordering::AcqRel);
                        note(&mut refusals, format!("{from}: no thread to read its hello: {e}"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Out of file descriptors and the like: note it, try again shortly.
                    note(&mut refusals, format!("accept failed: {e}"));
                    break;
                }
            }
        }
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok((s, from, Ok(Frame::Hello(h)))) => match check_hello(cfg, &h, &mut joined) {
                Some(reason) => {
                    note(&mut refusals, format!("{from} as rank {}: {reason}", h.rank));
                    refuse(s, &reason);
                }
                None => {
                    if s.set_nodelay(true).is_err() {
                        continue;
                    }
                    let entry = Entry { udp: h.udp, ctrl: h.ctrl };
                    let _ = s.set_read_timeout(None);
                    let mtu = h.mtu.min(path_mtu(&s));
                    joined.insert(h.rank, Joined { stream: s, from, entry, mtu });
                }
            },
            Ok((s, from, Ok(other))) => {
                let reason = "expected a hello as the first frame".to_string();
                note(&mut refusals, format!("{from}: {reason} (got {other:?})"));
                refuse(s, &reason);
            }
            Ok((s, from, Err(RecvError::Decode(DecodeError::Version(v))))) => {
                let reason = format!(
                    "it speaks rendezvous protocol version {v} but rank 0 speaks {PROTOCOL_VERSION} \
                     (run the same gradwire release on every rank)"
                );
                note(&mut refusals, format!("{from}: {reason}"));
                refuse(s, &reason);
            }
            Ok((s, from, Err(RecvError::Decode(DecodeError::Bad(m))))) => {
                note(&mut refusals, format!("{from}: {m}"));
                refuse(s, &m);
            }
            Ok((_, from, Err(e))) => note(&mut refusals, format!("{from}: no hello ({e:?})")),
            Err(_) => {}
        }
        let complete = joined.len() as u32 == n - 1;
        if complete || last_prune.elapsed() > Duration::from_millis(200) || Instant::now() >= deadline {
            joined.retain(|_, j| !is_dead(&j.stream));
            last_prune = Instant::now();
            if joined.len() as u32 == n - 1 {
                break;
            }
        }
        if Instant::now() >= deadline {
            let missing: Vec<u32> = (1..n).filter(|r| !joined.contains_key(r)).collect();
            let mut what = format!("waiting for {} to join at {here}", ranks_text(&missing));
            if !refusals.is_empty() {
                what += &format!(" (refused meanwhile: {})", refusals.join("; "));
            }
            let abort = Frame::Abort { kind: AbortKind::Timeout, rank: 0, msg: format!("rank 0 gave up {what}") };
            for j in joined.values_mut() {
                send_quietly(&mut j.stream, &abort);
            }
            return Err(NetError::Timeout { what, waited: start.elapsed() });
        }
    }
    drop(listener);

    // The address the joiners reached rank 0 at is reachable by all of them.
    let my_ip = match joined.values().next().and_then(|j| j.stream.local_addr().ok()) {
        Some(a) => a.ip(),
        None => cfg.resolve_master().map_err(NetError::Config)?.ip(),
    };
    let mut table = vec![Entry { udp: with_ip(udp_addr, my_ip), ctrl: SocketAddr::new(my_ip, cfg.master_port) }];
    table.extend(joined.values().map(|j| j.entry));
    let session = random_session();
    let mss = cfg.mss.unwrap_or_else(|| mss_for_mtu(joined.values().map(|j| j.mtu).min().unwrap_or(1500), my_ip));
    let mut streams: Vec<(u32, TcpStream)> = joined.into_iter().map(|(r, j)| (r, j.stream)).collect();

    let fail_all = |streams: &mut Vec<(u32, TcpStream)>, skip: u32, e: &NetError| {
        let f = abort_frame(e, 0);
        for (r, s) in streams.iter_mut() {
            if *r != skip {
                send_quietly(s, &f);
            }
        }
    };

    // Welcome.
    let step = Instant::now() + cfg.timeout;
    let welcome = Frame::Welcome { session, mss, peers: table.clone() };
    for i in 0..streams.len() {
        let r = streams[i].0;
        if let Err(e) = send_frame(&mut streams[i].1, &welcome, step) {
            let err = step_error(e, &format!("sending the peer table to rank {r}"), r, start);
            fail_all(&mut streams, r, &err);
            return Err(err);
        }
    }

    // Barrier: every rank reports Ready once its control connections are up.
    let step = Instant::now() + cfg.timeout + grace(cfg.timeout);
    for i in 0..streams.len() {
        let r = streams[i].0;
        let what = format!("waiting for rank {r} to connect to its peers (the mesh of control connections)");
        let err = match recv_frame(&mut streams[i].1, MAX_FRAME, step) {
            Ok(Frame::Ready { session: s }) if s == session => continue,
            Ok(Frame::Abort { kind, rank, msg }) => abort_error(kind, rank, msg, start),
            Ok(other) => NetError::Protocol(format!("{what}: rank {r} sent {other:?}")),
            Err(RecvError::Timeout) => {
                // Name every rank that is not ready, not only the first.
                let mut missing = vec![r];
                for (r2, s2) in streams[i + 1..].iter_mut() {
                    let quick = Instant::now() + Duration::from_millis(20);
                    match recv_frame(s2, MAX_FRAME, quick) {
                        // (A consumed Ready is not needed again: the job is failing.)
                        Ok(Frame::Ready { session: s }) if s == session => {}
                        _ => missing.push(*r2),
                    }
                }
                NetError::Timeout {
                    what: format!(
                        "waiting for {} to connect to their peers (the mesh of control connections)",
                        ranks_text(&missing)
                    ),
                    waited: start.elapsed(),
                }
            }
            Err(e) => step_error(e, &what, r, start),
        };
        fail_all(&mut streams, r, &err);
        return Err(err);
    }
    let step = Instant::now() + cfg.timeout;
    for i in 0..streams.len() {
        let r = streams[i].0;
        if let Err(e) = send_frame(&mut streams[i].1, &Frame::Go { session }, step) {
            let err = step_error(e, &format!("telling rank {r} that the mesh is complete"), r, start);
            fail_all(&mut streams, r, &err);
            return Err(err);
        }
    }

    let mut control: Vec<Option<TcpStream>> = vec![None];
    for (_, s) in streams {
        finish_stream(&s)?;
        control.push(Some(s));
    }
    let peers = table.iter().enumerate().map(|(r, e)| PeerInfo { rank: r as u32, udp_addr: e.udp }).collect();
    Ok(Mesh { rank: 0, world_size: n, session, peers, control, mss })
}

pub(super) fn random_session() -> u64 {
    loop {
        let s = rand::rngs::OsRng.next_u64();
        if s != 0 {
            return s;
        }
    }
}

pub(super) fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    // Compare without an early exit, so the time does not tell how much of a token matched.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) fn is_dead(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 1];
    let dead = match s.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !timeout_kind(e.kind()),
    };
    let _ = s.set_nonblocking(false);
    dead
}
