//! Job formation, torchrun style.
//!
//! Every process of a job knows `MASTER_ADDR`, `MASTER_PORT`, its `RANK`, the
//! `WORLD_SIZE` and the job token (`GRADWIRE_TOKEN`). Rank 0 listens on
//! `MASTER_ADDR:MASTER_PORT`; every other rank connects to it (retrying until the
//! timeout, so rank 0 may start last) and says Hello. Rank 0 checks each Hello (protocol
//! version, token, world size, rank range, duplicates) and refuses a wrong process with a
//! reason that tells it what to fix, while it keeps waiting for the right one. When all
//! ranks are in, rank 0 picks a random non-zero session id and sends everyone a Welcome
//! with the session and the peer table. The ranks then build a full mesh of TCP control
//! connections (one per pair; pairs with rank 0 reuse the rendezvous connection, for the
//! others the higher rank connects to the lower rank's listener and proves session and
//! rank), report Ready to rank 0, and return when rank 0 says Go.
//!
//! Every step has the configured timeout as its deadline (steps that wait for another
//! rank's verdict get a short grace, 0.25 s + 5%, so that the rank that knows the reason
//! reports it first); a step that does not finish gives [`NetError::Timeout`] naming what
//! it waited for, and a rank that fails after the Welcome tells rank 0, which passes the
//! reason on to the others, so no rank hangs.
//!
//! Addresses: a rank advertises the local address of its connection to rank 0 (for its
//! control listener, and for its UDP socket when that is bound to `0.0.0.0` / `::`), so
//! the addresses are reachable by the peers even across network namespaces.
//!
//! # Frames
//! Every message on a control connection during rendezvous is one frame:
//! ```text
//! u32 length (big endian) of what follows, 1..=MAX_FRAME (a longer claim is refused)
//! u8  kind   1 Hello, 2 Welcome, 3 Refuse, 4 MeshHello, 5 MeshAck, 6 Ready, 7 Go, 8 Abort
//! ... body
//! ```
//! Bodies (integers big endian; `str` = u16 length + UTF-8 bytes; `addr` = u8 family 4|6,
//! 4|16 address bytes, u16 port):
//! ```text
//! Hello     magic "GWRENDZV", u16 version, str token, u32 rank, u32 world_size,
//!           addr udp, addr control listener, u32 mss (0: choose), u32 path MTU to rank 0
//! Welcome   u64 session, u32 mss, u32 n, n x (addr udp, addr control)  (indexed by rank)
//! Refuse    str reason
//! MeshHello magic "GWRENDZV", u16 version, u64 session, u32 from rank, u32 to rank
//! MeshAck   u64 session, u32 rank
//! Ready, Go u64 session
//! Abort     u8 kind (0 timeout, 1 peer lost, 2 failed), u32 rank, str message
//! ```
//! The decoder checks every length against the bytes it holds and rejects trailing bytes.
//!
//! # Segment size
//! Sender and receiver of a transfer must cut it into the same segments, so the job agrees
//! on one payload size per datagram (the mss) here. Given explicitly, every rank must give
//! the same value (a rank that differs is refused). Otherwise rank 0 takes it from the
//! path MTU, like TCP's MSS: the smallest MTU of the routes between rank 0 and the others
//! (the kernel's `IP_MTU` of each rendezvous connection, both ends), less the IP, UDP and
//! gradwire headers. On one host that is loopback's 64 KiB; across a fabric with
//! 1500-byte frames it is the usual 1440.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::RngCore;

use crate::auth::token_proof;
use crate::NetError;

/// `GRADWIRE_RENDEZVOUS_TIMEOUT` when it is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Version of the rendezvous frames; a process speaking another version is refused.
pub const PROTOCOL_VERSION: u16 = 3;

/// The segment size when nothing says otherwise (a 1500-byte IPv4 packet, or a
/// single-rank job, which sends nothing).
pub const DEFAULT_MSS: u32 = 1440;
/// The largest payload whose datagram (payload + gradwire header) fits UDP's 65507 bytes.
pub const MAX_MSS: u32 = 65_472;
/// The smallest accepted segment.
pub const MIN_MSS: u32 = 64;
/// Largest frame accepted from a peer of the job (the Welcome of the largest world fits).
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame accepted from a connection that has not proven anything yet.
const MAX_HELLO_FRAME: usize = 8 << 10;
/// Longest job token.
pub const MAX_TOKEN_LEN: usize = 1024;
/// Largest `WORLD_SIZE`.
pub const MAX_WORLD_SIZE: u32 = 16384;
const MAGIC: [u8; 8] = *b"GWRENDZV";
/// How long an unproven connection may take to send its hello.
const HELLO_READ_LIMIT: Duration = Duration::from_secs(5);
/// Connections whose hello rank 0 reads at once (a thread each); more wait in the
/// listen backlog, so silent connections cost at most this many threads for
/// `HELLO_READ_LIMIT` each.
const MAX_HELLO_READERS: usize = 64;

/// Extra time for a step whose outcome another rank decides under its own deadline
/// (a joiner waiting for rank 0's verdict, rank 0 waiting for the joiners' mesh), so
/// that the rank that knows the reason reports it before the waiting one gives up.
fn grace(timeout: Duration) -> Duration {
    Duration::from_millis(250) + timeout / 20
}

/// How to find the job. `from_env` reads `MASTER_ADDR`, `MASTER_PORT`, `RANK`,
/// `WORLD_SIZE` and `GRADWIRE_TOKEN`.
#[derive(Clone, Debug)]
pub struct RendezvousConfig {
    pub master_addr: String,
    pub master_port: u16,
    pub rank: u32,
    pub world_size: u32,
    /// Shared secret of the job; a process with another token is refused.
    pub token: String,
    /// Give up (with `NetError::Timeout`) if the job is not formed within this time.
    pub timeout: Duration,
    /// Payload bytes per datagram; `None`: from the path MTU (see the module docs).
    pub mss: Option<u32>,
    /// Tag every datagram and control frame with a key derived from the token
    /// ([`crate::auth`]); every rank must agree (`GRADWIRE_AUTH=1`).
    pub authenticated: bool,
}

/// A peer as the mesh knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub rank: u32,
    /// Where the peer receives UDP data.
    pub udp_addr: SocketAddr,
}

/// A formed job: every rank's data address and one TCP control stream per peer.
#[derive(Debug)]
pub struct Mesh {
    pub rank: u32,
    pub world_size: u32,
    /// Random per job, chosen by rank 0; stamped on every datagram.
    pub session: u64,
    /// Indexed by rank (this rank's own entry included).
    pub peers: Vec<PeerInfo>,
    /// Indexed by rank; `None` at this rank's own index. Blocking streams, `TCP_NODELAY`.
    pub control: Vec<Option<TcpStream>>,
    /// The job's segment size (payload bytes per datagram), the same on every rank.
    pub mss: u32,
}

impl RendezvousConfig {
    /// A configuration given as arguments: empty token, [`DEFAULT_TIMEOUT`].
    pub fn new(master_addr: impl Into<String>, master_port: u16, rank: u32, world_size: u32) -> Self {
        RendezvousConfig {
            master_addr: master_addr.into(),
            master_port,
            rank,
            world_size,
            token: String::new(),
            timeout: DEFAULT_TIMEOUT,
            mss: None,
            authenticated: false,
        }
    }

    /// Read the job from the environment, as torchrun sets it:
    /// - `MASTER_ADDR` (host name or IP of rank 0), `MASTER_PORT` (1..=65535),
    ///   `RANK` (0..WORLD_SIZE), `WORLD_SIZE` (1..=16384): required;
    /// - `GRADWIRE_TOKEN`: the job's shared secret (`gradwire launch` sets a random one).
    ///   Unset: `torchelastic:<TORCHELASTIC_RUN_ID>` under torchrun, else the empty token,
    ///   which only keeps apart jobs that set different tokens; set one per job whenever
    ///   several jobs may share hosts or ports;
    /// - `GRADWIRE_AUTH`: 1 to authenticate every datagram and frame ([`crate::auth`]);
    /// - `GRADWIRE_RENDEZVOUS_TIMEOUT`: seconds (decimals allowed) each rendezvous step may
    ///   take, default 30;
    /// - `GRADWIRE_MSS`: payload bytes per datagram, the same on every rank; unset: from
    ///   the path MTU (see the module docs).
    ///
    /// A missing or garbled variable gives [`NetError::Config`] naming it and its value.
    pub fn from_env() -> Result<Self, NetError> {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// [`from_env`](Self::from_env) with another source of variables (tests, launchers).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let required = |name: &str, hint: &str| -> Result<String, NetError> {
            match get(name) {
                Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
                Some(_) => Err(NetError::Config(format!("{name} is set but empty: expected {hint}"))),
                None => Err(NetError::Config(format!("{name} is not set: expected {hint}"))),
            }
        };
        let garbled =
            |name: &str, value: &str, hint: &str| NetError::Config(format!("{name} is {value:?}: expected {hint}"));

        let master_addr = required("MASTER_ADDR", "the host name or IP address of rank 0, e.g. 10.0.0.1")?;
        let port_hint = "a TCP port in 1..=65535 that rank 0 listens on, e.g. 29500";
        let port_text = required("MASTER_PORT", port_hint)?;
        let master_port = match port_text.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err(garbled("MASTER_PORT", &port_text, port_hint)),
        };
        let ws_hint = format!("the number of ranks of the job, an integer in 1..={MAX_WORLD_SIZE}");
        let ws_text = required("WORLD_SIZE", &ws_hint)?;
        let world_size = match ws_text.parse::<u32>() {
            Ok(n) if (1..=MAX_WORLD_SIZE).contains(&n) => n,
            _ => return Err(garbled("WORLD_SIZE", &ws_text, &ws_hint)),
        };
        let rank_hint = format!("this process's rank, an integer in 0..{world_size} (WORLD_SIZE is {world_size})");
        let rank_text = required("RANK", &rank_hint)?;
        let rank = match rank_text.parse::<u32>() {
            Ok(r) if r < world_size => r,
            _ => return Err(garbled("RANK", &rank_text, &rank_hint)),
        };
        let token = get("GRADWIRE_TOKEN")
            .or_else(|| get("TORCHELASTIC_RUN_ID").map(|id| format!("torchelastic:{id}")))
            .unwrap_or_default();
        if token.len() > MAX_TOKEN_LEN {
            return Err(NetError::Config(format!(
                "GRADWIRE_TOKEN is {} bytes long: at most {MAX_TOKEN_LEN} bytes are allowed",
                token.len()
            )));
        }
        let timeout = match get("GRADWIRE_RENDEZVOUS_TIMEOUT") {
            None => DEFAULT_TIMEOUT,
            Some(text) => {
                let hint = "a number of seconds > 0, e.g. 30 or 0.5";
                match text.trim().parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Duration::from_secs_f64(s),
                    _ => return Err(garbled("GRADWIRE_RENDEZVOUS_TIMEOUT", &text, hint)),
                }
            }
        };
        let mss = match get("GRADWIRE_MSS") {
            None => None,
            Some(text) => {
                let hint = format!("payload bytes per datagram in {MIN_MSS}..={MAX_MSS} (1440 for 1500-byte packets), the same on every rank");
                match text.trim().parse::<u32>() {
                    Ok(m) if (MIN_MSS..=MAX_MSS).contains(&m) => Some(m),
                    _ => return Err(garbled("GRADWIRE_MSS", &text, &hint)),
                }
            }
        };
        let authenticated = match get("GRADWIRE_AUTH").as_deref().map(str::trim) {
            None | Some("" | "0" | "false" | "no") => false,
            Some("1" | "true" | "yes") => true,
            Some(text) => {
                return Err(garbled(
                    "GRADWIRE_AUTH",
                    text,
                    "1 to authenticate every datagram and control frame, 0 not to",
                ))
            }
        };
        let cfg = RendezvousConfig { master_addr, master_port, rank, world_size, token, timeout, mss, authenticated };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check a configuration built by hand (what `from_lookup` checks).
    pub fn validate(&self) -> Result<(), NetError> {
        let bad = |m: String| Err(NetError::Config(m));
        if self.master_addr.trim().is_empty() {
            return bad("MASTER_ADDR is empty: expected the host name or IP address of rank 0".into());
        }
        if self.master_port == 0 {
            return bad("MASTER_PORT is 0: expected a TCP port in 1..=65535".into());
        }
        if !(1..=MAX_WORLD_SIZE).contains(&self.world_size) {
            return bad(format!("WORLD_SIZE is {}: expected an integer in 1..={MAX_WORLD_SIZE}", self.world_size));
        }
        if self.rank >= self.world_size {
            return bad(format!(
                "RANK is {} but WORLD_SIZE is {}: ranks are 0..{}",
                self.rank, self.world_size, self.world_size
            ));
        }
        if self.token.len() > MAX_TOKEN_LEN {
            return bad(format!("GRADWIRE_TOKEN is {} bytes long: at most {MAX_TOKEN_LEN} allowed", self.token.len()));
        }
        if self.timeout.is_zero() {
            return bad("GRADWIRE_RENDEZVOUS_TIMEOUT is 0: expected a number of seconds > 0".into());
        }
        Ok(())
    }

    /// `MASTER_ADDR:MASTER_PORT` as a person writes it (IPv6 literals in brackets).
    pub fn master_display(&self) -> String {
        let a = self.master_addr.trim();
        if a.contains(':') && !a.starts_with('[') {
            format!("[{a}]:{}", self.master_port)
        } else {
            format!("{a}:{}", self.master_port)
        }
    }

    fn resolve_master(&self) -> Result<SocketAddr, String> {
        let host = self.master_addr.trim().trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = (host, self.master_port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve MASTER_ADDR {:?}: {e}", self.master_addr))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| format!("MASTER_ADDR {:?} resolves to no address", self.master_addr))
    }
}

/// Form the job: returns when every rank is connected to every other rank.
///
/// `udp_addr` is where this rank receives UDP data; if its IP is unspecified
/// (`0.0.0.0` / `::`) the rank advertises the local IP of its connection to rank 0 with
/// that port instead. Each step (reaching rank 0, being admitted, connecting the mesh,
/// the final barrier; for rank 0: all ranks joining) may take `cfg.timeout`.
pub fn rendezvous(cfg: &RendezvousConfig, udp_addr: SocketAddr) -> Result<Mesh, NetError> {
    cfg.validate()?;
    let start = Instant::now();
    if cfg.rank == 0 {
        master(cfg, udp_addr, start)
    } else {
        joiner(cfg, udp_addr, start)
    }
}

// ---------------------------------------------------------------------------------------
// Frames

#[derive(Clone, Debug, PartialEq, Eq)]
struct Hello {
    token: Vec<u8>,
    rank: u32,
    world_size: u32,
    udp: SocketAddr,
    ctrl: SocketAddr,
    /// The rank's explicit segment size, 0 if it leaves the choice to rank 0.
    mss: u32,
    /// The path MTU of the rank's connection to rank 0.
    mtu: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    udp: SocketAddr,
    ctrl: SocketAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AbortKind {
    Timeout = 0,
    Lost = 1,
    Failed = 2,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Frame {
    Hello(Hello),
    Welcome { session: u64, mss: u32, peers: Vec<Entry> },
    Refuse(String),
    MeshHello { session: u64, from: u32, to: u32 },
    MeshAck { session: u64, rank: u32 },
    Ready { session: u64 },
    Go { session: u64 },
    Abort { kind: AbortKind, rank: u32, msg: String },
}

const K_HELLO: u8 = 1;
const K_WELCOME: u8 = 2;
const K_REFUSE: u8 = 3;
const K_MESH_HELLO: u8 = 4;
const K_MESH_ACK: u8 = 5;
const K_READY: u8 = 6;
const K_GO: u8 = 7;
const K_ABORT: u8 = 8;

/// Why a frame could not be decoded.
#[derive(Debug, PartialEq, Eq)]
enum DecodeError {
    /// Not a gradwire rendezvous frame at all.
    Bad(String),
    /// A gradwire peer of another protocol version.
    Version(u16),
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        let b = &b[..b.len().min(u16::MAX as usize)];
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
    }
    fn addr(&mut self, a: SocketAddr) {
        match a.ip() {
            IpAddr::V4(ip) => {
                self.u8(4);
                self.0.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                self.u8(6);
                self.0.extend_from_slice(&ip.octets());
            }
        }
        self.u16(a.port());
    }
}

struct R<'a> {
    buf: &'a [u8],
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Bad(format!("frame ends early ({} bytes left, {n} needed)", self.buf.len())));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        let b = self.bytes()?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }
    fn addr(&mut self) -> Result<SocketAddr, DecodeError> {
        let ip = match self.u8()? {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(self.take(4)?).expect("4 bytes"))),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(self.take(16)?).expect("16 bytes"))),
            f => return Err(DecodeError::Bad(format!("unknown address family {f}"))),
        };
        Ok(SocketAddr::new(ip, self.u16()?))
    }
    fn magic_and_version(&mut self) -> Result<(), DecodeError> {
        if self.take(MAGIC.len())? != MAGIC {
            return Err(DecodeError::Bad("not a gradwire rendezvous frame (bad magic)".into()));
        }
        match self.u16()? {
            PROTOCOL_VERSION => Ok(()),
            v => Err(DecodeError::Version(v)),
        }
    }
    fn end(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Bad(format!("{} unexpected bytes at the end of a frame", self.buf.len())))
        }
    }
}

impl Frame {
    /// The whole frame, length prefix included.
    fn encode(&self) -> Vec<u8> {
        let mut w = W(vec![0, 0, 0, 0]);
        match self {
            Frame::Hello(h) => {
                w.u8(K_HELLO);
                w.0.extend_from_slice(&MAGIC);
                w.u16(PROTOCOL_VERSION);
                w.bytes(&h.token);
                w.u32(h.rank);
                w.u32(h.world_size);
                w.addr(h.udp);
                w.addr(h.ctrl);
                w.u32(h.mss);
                w.u32(h.mtu);
            }
            Frame::Welcome { session, mss, peers } => {
                w.u8(K_WELCOME);
                w.u64(*session);
                w.u32(*mss);
                w.u32(peers.len() as u32);
                for e in peers {
                    w.addr(e.udp);
                    w.addr(e.ctrl);
                }
            }
            Frame::Refuse(reason) => {
                w.u8(K_REFUSE);
                w.bytes(reason.as_bytes());
            }
            Frame::MeshHello { session, from, to } => {
                w.u8(K_MESH_HELLO);
                w.0.extend_from_slice(&MAGIC);
                w.u16(PROTOCOL_VERSION);
                w.u64(*session);
                w.u32(*from);
                w.u32(*to);
            }
            Frame::MeshAck { session, rank } => {
                w.u8(K_MESH_ACK);
                w.u64(*session);
                w.u32(*rank);
            }
            Frame::Ready { session } => {
                w.u8(K_READY);
                w.u64(*session);
            }
            Frame::Go { session } => {
                w.u8(K_GO);
                w.u64(*session);
            }
            Frame::Abort { kind, rank, msg } => {
                w.u8(K_ABORT);
                w.u8(*kind as u8);
                w.u32(*rank);
                w.bytes(msg.as_bytes());
            }
        }
        let len = (w.0.len() - 4) as u32;
        w.0[0..4].copy_from_slice(&len.to_be_bytes());
        w.0
    }

    /// Decode what follows the length prefix (kind byte and body).
    fn decode(frame: &[u8]) -> Result<Frame, DecodeError> {
        let mut r = R { buf: frame };
        let f = match r.u8()? {
            K_HELLO => {
                r.magic_and_version()?;
                let token = r.bytes()?.to_vec();
                if token.len() > MAX_TOKEN_LEN {
                    return Err(DecodeError::Bad(format!("token of {} bytes is too long", token.len())));
                }
                let rank = r.u32()?;
                let world_size = r.u32()?;
                let udp = r.addr()?;
                let ctrl = r.addr()?;
                let mss = r.u32()?;
                if mss != 0 && !(MIN_MSS..=MAX_MSS).contains(&mss) {
                    return Err(DecodeError::Bad(format!("mss {mss} is outside {MIN_MSS}..={MAX_MSS}")));
                }
                let mtu = r.u32()?;
                Frame::Hello(Hello { token, rank, world_size, udp, ctrl, mss, mtu })
            }
            K_WELCOME => {
                let session = r.u64()?;
                let mss = r.u32()?;
                if !(MIN_MSS..=MAX_MSS).contains(&mss) {
                    return Err(DecodeError::Bad(format!("welcome with mss {mss}")));
                }
                let n = r.u32()?;
                if n == 0 || n > MAX_WORLD_SIZE {
                    return Err(DecodeError::Bad(format!("welcome for {n} ranks")));
                }
                // Never trust n for an allocation: each entry takes at least 14 bytes.
                if (n as usize) * 14 > r.buf.len() {
                    return Err(DecodeError::Bad(format!("welcome claims {n} ranks in {} bytes", r.buf.len())));
                }
                let mut peers = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    peers.push(Entry { udp: r.addr()?, ctrl: r.addr()? });
                }
                Frame::Welcome { session, mss, peers }
            }
            K_REFUSE => Frame::Refuse(r.string()?),
            K_MESH_HELLO => {
                r.magic_and_version()?;
                Frame::MeshHello { session: r.u64()?, from: r.u32()?, to: r.u32()? }
            }
            K_MESH_ACK => Frame::MeshAck { session: r.u64()?, rank: r.u32()? },
            K_READY => Frame::Ready { session: r.u64()? },
            K_GO => Frame::Go { session: r.u64()? },
            K_ABORT => {
                let kind = match r.u8()? {
                    0 => AbortKind::Timeout,
                    1 => AbortKind::Lost,
                    2 => AbortKind::Failed,
                    k => return Err(DecodeError::Bad(format!("unknown abort kind {k}"))),
                };
                Frame::Abort { kind, rank: r.u32()?, msg: r.string()? }
            }
            k => return Err(DecodeError::Bad(format!("unknown frame kind {k}"))),
        };
        r.end()?;
        Ok(f)
    }
}

// ---------------------------------------------------------------------------------------
// Blocking I/O with deadlines

#[derive(Debug)]
enum RecvError {
    Timeout,
    Closed,
    Decode(DecodeError),
    Io(io::Error),
}

fn closed_kind(k: io::ErrorKind) -> bool {
    matches!(
        k,
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::NotConnected
    )
}

fn timeout_kind(k: io::ErrorKind) -> bool {
    matches!(k, io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), RecvError> {
    let mut got = 0;
    while got < buf.len() {
        let now = Instant::now();
        if now >= deadline {
            return Err(RecvError::Timeout);
        }
        s.set_read_timeout(Some(deadline - now)).map_err(RecvError::Io)?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(RecvError::Closed),
            Ok(k) => got += k,
            Err(e) if timeout_kind(e.kind()) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if closed_kind(e.kind()) => return Err(RecvError::Closed),
            Err(e) => return Err(RecvError::Io(e)),
        }
    }
    Ok(())
}

/// The fuzz target's entry (`fuzz/fuzz_targets/rendezvous_frame.rs`): decodes `body` (a
/// frame after its length prefix) as rank 0 and the joiners do; a frame that decodes must
/// re-encode to a frame that decodes to the same value. True if it decoded.
#[doc(hidden)]
pub fn fuzz_decode_frame(body: &[u8]) -> bool {
    let Ok(f) = Frame::decode(body) else { return false };
    let bytes = f.encode();
    assert_eq!(u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize, bytes.len() - 4);
    assert_eq!(Frame::decode(&bytes[4..]).as_ref().ok(), Some(&f), "decode(encode(f)) != f");
    true
}

/// Read one frame; a length of 0 or above `max_len` is refused before anything is allocated.
fn recv_frame(s: &mut TcpStream, max_len: usize, deadline: Instant) -> Result<Frame, RecvError> {
    let mut len = [0u8; 4];
    read_exact_by(s, &mut len, deadline)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > max_len {
        return Err(RecvError::Decode(DecodeError::Bad(format!(
            "not a gradwire rendezvous frame (claims {len} bytes, at most {max_len} allowed)"
        ))));
    }
    let mut body = vec![0u8; len];
    read_exact_by(s, &mut body, deadline)?;
    Frame::decode(&body).map_err(RecvError::Decode)
}

fn send_frame(s: &mut TcpStream, f: &Frame, deadline: Instant) -> Result<(), RecvError> {
    let now = Instant::now();
    if now >= deadline {
        return Err(RecvError::Timeout);
    }
    s.set_write_timeout(Some(deadline - now)).map_err(RecvError::Io)?;
    match s.write_all(&f.encode()).and_then(|_| s.flush()) {
        Ok(()) => Ok(()),
        Err(e) if timeout_kind(e.kind()) => Err(RecvError::Timeout),
        Err(e) if closed_kind(e.kind()) => Err(RecvError::Closed),
        Err(e) => Err(RecvError::Io(e)),
    }
}

/// Best effort, for refusals and aborts: a short deadline, errors ignored.
fn send_quietly(s: &mut TcpStream, f: &Frame) {
    let _ = send_frame(s, f, Instant::now() + Duration::from_millis(500));
}

fn refuse(mut s: TcpStream, reason: &str) {
    send_quietly(&mut s, &Frame::Refuse(reason.to_string()));
    let _ = s.shutdown(Shutdown::Write);
}

/// Turn an I/O failure into the error a person reads. `what` says what this rank was
/// doing ("waiting for ..."), `peer` which rank was on the other end.
fn step_error(e: RecvError, what: &str, peer: u32, start: Instant) -> NetError {
    match e {
        RecvError::Timeout => NetError::Timeout { what: what.to_string(), waited: start.elapsed() },
        RecvError::Closed => NetError::PeerLost {
            rank: peer,
            detail: format!("connection closed while {what} (the process failed or exited: see its own error)"),
        },
        RecvError::Decode(DecodeError::Bad(m)) => NetError::Protocol(format!("{what}: rank {peer} sent {m}")),
        RecvError::Decode(DecodeError::Version(v)) => NetError::Protocol(format!(
            "{what}: rank {peer} speaks rendezvous protocol version {v}, this process {PROTOCOL_VERSION}"
        )),
        RecvError::Io(io) => NetError::io(what.to_string(), io),
    }
}

fn abort_frame(e: &NetError, me: u32) -> Frame {
    match e {
        NetError::Timeout { what, .. } => Frame::Abort { kind: AbortKind::Timeout, rank: me, msg: what.clone() },
        NetError::PeerLost { rank, detail } => Frame::Abort { kind: AbortKind::Lost, rank: *rank, msg: detail.clone() },
        other => Frame::Abort { kind: AbortKind::Failed, rank: me, msg: format!("rank {me} failed: {other}") },
    }
}

fn abort_error(kind: AbortKind, rank: u32, msg: String, start: Instant) -> NetError {
    match kind {
        AbortKind::Timeout => NetError::Timeout { what: msg, waited: start.elapsed() },
        AbortKind::Lost => NetError::PeerLost { rank, detail: msg },
        AbortKind::Failed => NetError::Protocol(msg),
    }
}

fn is_dead(s: &TcpStream) -> bool {
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

/// Connect, retrying (with backoff) until `deadline`.
fn connect_retry(
    target: impl Fn() -> Result<SocketAddr, String>,
    deadline: Instant,
    what: &str,
    start: Instant,
) -> Result<TcpStream, NetError> {
    let mut backoff = Duration::from_millis(10);
    let mut last = String::from("no attempt finished");
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(NetError::Timeout { what: format!("{what} (last error: {last})"), waited: start.elapsed() });
        }
        match target() {
            Ok(addr) => match TcpStream::connect_timeout(&addr, (deadline - now).min(Duration::from_secs(2))) {
                // On loopback a connection to an unused ephemeral port can connect to itself.
                Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => last = "connected to itself".into(),
                Ok(s) => {
                    s.set_nodelay(true).map_err(|e| NetError::io("setting TCP_NODELAY", e))?;
                    return Ok(s);
                }
                Err(e) => last = e.to_string(),
            },
            Err(m) => last = m,
        }
        thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
        backoff = (backoff * 2).min(Duration::from_millis(250));
    }
}

fn ranks_text(ranks: &[u32]) -> String {
    let shown: Vec<String> = ranks.iter().take(16).map(u32::to_string).collect();
    let more = if ranks.len() > 16 { format!(" (and {} more)", ranks.len() - 16) } else { String::new() };
    let word = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{word} {}{more}", shown.join(", "))
}

fn finish_stream(s: &TcpStream) -> Result<(), NetError> {
    let ctx = |e| NetError::io("restoring blocking mode on a control connection", e);
    s.set_read_timeout(None).map_err(ctx)?;
    s.set_write_timeout(None).map_err(ctx)?;
    s.set_nonblocking(false).map_err(ctx)?;
    s.set_nodelay(true).map_err(ctx)
}

/// The kernel's path MTU for a connected socket (IPv4 `IP_MTU`); 1500 when it cannot say.
fn path_mtu(s: &TcpStream) -> u32 {
    use nix::sys::socket::{getsockopt, sockopt};
    match s.peer_addr() {
        Ok(SocketAddr::V4(_)) => getsockopt(s, sockopt::IpMtu).ok().filter(|&m| m > 0).map_or(1500, |m| m as u32),
        _ => 1500,
    }
}

/// The payload that fills a `mtu`-byte packet: less the IP header (20 or 40 bytes), UDP's
/// 8 and gradwire's; within [`MIN_MSS`]..=[`MAX_MSS`].
pub fn mss_for_mtu(mtu: u32, ip: IpAddr) -> u32 {
    let ip_header = if ip.is_ipv4() { 20 } else { 40 };
    mtu.saturating_sub(ip_header + 8 + gradwire_core::wire::HEADER_LEN as u32).clamp(MIN_MSS, MAX_MSS)
}

fn random_session() -> u64 {
    loop {
        let s = rand::rngs::OsRng.next_u64();
        if s != 0 {
            return s;
        }
    }
}

fn with_ip(addr: SocketAddr, ip: IpAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(ip, addr.port())
    } else {
        addr
    }
}

fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    // Compare without an early exit, so the time does not tell how much of a token matched.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ---------------------------------------------------------------------------------------
// Rank 0

struct Joined {
    stream: TcpStream,
    from: SocketAddr,
    entry: Entry,
    /// Path MTU between this rank and rank 0 (the smaller of both ends' views).
    mtu: u32,
}

fn bind_master(cfg: &RendezvousConfig) -> Result<TcpListener, NetError> {
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
fn check_hello(cfg: &RendezvousConfig, h: &Hello, joined: &mut BTreeMap<u32, Joined>) -> Option<String> {
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

fn master(cfg: &RendezvousConfig, udp_addr: SocketAddr, start: Instant) -> Result<Mesh, NetError> {
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

// ---------------------------------------------------------------------------------------
// Ranks 1..n

fn joiner(cfg: &RendezvousConfig, udp_addr: SocketAddr, start: Instant) -> Result<Mesh, NetError> {
    let me = cfg.rank;
    let n = cfg.world_size;
    let here = cfg.master_display();

    // Reach rank 0.
    let mut master = connect_retry(
        || cfg.resolve_master(),
        start + cfg.timeout,
        &format!("rank {me} waiting for rank 0 to accept connections at {here}"),
        start,
    )?;
    let local_ip = master.local_addr().map_err(|e| NetError::io("reading the local address", e))?.ip();
    let listener = TcpListener::bind((local_ip, 0))
        .map_err(|e| NetError::io(format!("binding rank {me}'s control listener on {local_ip}"), e))?;
    let ctrl = listener.local_addr().map_err(|e| NetError::io("reading the control listener's address", e))?;
    let udp = with_ip(udp_addr, local_ip);

    // Be admitted.
    let step = Instant::now() + cfg.timeout + grace(cfg.timeout);
    let hello = Frame::Hello(Hello {
        // A proof of the token, not the token: the job key is derived from it.
        token: token_proof(&cfg.token, cfg.authenticated),
        rank: me,
        world_size: n,
        udp,
        ctrl,
        mss: cfg.mss.unwrap_or(0),
        mtu: path_mtu(&master),
    });
    let what = format!("rank {me} waiting for rank 0 at {here} to admit it (rank 0 waits until all ranks have joined)");
    let (session, mss, table) =
        match send_frame(&mut master, &hello, step).and_then(|_| recv_frame(&mut master, MAX_FRAME, step)) {
            Ok(Frame::Welcome { session, mss, peers }) => {
                if session == 0
                    || peers.len() != n as usize
                    || peers[me as usize] != (Entry { udp, ctrl })
                    || cfg.mss.is_some_and(|m| m != mss)
                {
                    return Err(NetError::Protocol(format!("{what}: rank 0 sent an inconsistent peer table")));
                }
                (session, mss, peers)
            }
            Ok(Frame::Refuse(reason)) => {
                return Err(NetError::Refused(format!("rank 0 at {here} refused this process: {reason}")))
            }
            Ok(Frame::Abort { kind, rank, msg }) => return Err(abort_error(kind, rank, msg, start)),
            Ok(other) => return Err(NetError::Protocol(format!("{what}: rank 0 sent {other:?}"))),
            Err(e) => return Err(step_error(e, &what, 0, start)),
        };

    // Connect the mesh; on failure tell rank 0, which tells the others.
    let step = Instant::now() + cfg.timeout;
    let mut control = match build_mesh(me, n, session, &table, listener, step, start) {
        Ok(c) => c,
        Err(e) => {
            send_quietly(&mut master, &abort_frame(&e, me));
            return Err(e);
        }
    };

    // Barrier.
    let step = Instant::now() + cfg.timeout + 2 * grace(cfg.timeout);
    let what = format!("rank {me} waiting for rank 0 at {here} to confirm that every rank is connected");
    match send_frame(&mut master, &Frame::Ready { session }, step)
        .and_then(|_| recv_frame(&mut master, MAX_FRAME, step))
    {
        Ok(Frame::Go { session: s }) if s == session => {}
        Ok(Frame::Abort { kind, rank, msg }) => return Err(abort_error(kind, rank, msg, start)),
        Ok(other) => return Err(NetError::Protocol(format!("{what}: rank 0 sent {other:?}"))),
        Err(e) => return Err(step_error(e, &what, 0, start)),
    }
    control[0] = Some(master);
    for s in control.iter().flatten() {
        finish_stream(s)?;
    }
    let peers = table.iter().enumerate().map(|(r, e)| PeerInfo { rank: r as u32, udp_addr: e.udp }).collect();
    Ok(Mesh { rank: me, world_size: n, session, peers, control, mss })
}

/// Rank `me`'s control connections to ranks 1..n other than itself (index 0 left `None`).
fn build_mesh(
    me: u32,
    n: u32,
    session: u64,
    table: &[Entry],
    listener: TcpListener,
    deadline: Instant,
    start: Instant,
) -> Result<Vec<Option<TcpStream>>, NetError> {
    let mut control: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    // Lower ranks: connect to their listeners. They accept once their own connections to
    // even lower ranks are up, so there is no cycle.
    for i in 1..me {
        let addr = table[i as usize].ctrl;
        let mut s = connect_retry(
            || Ok(addr),
            deadline,
            &format!("rank {me} waiting to connect to rank {i}'s control listener at {addr}"),
            start,
        )?;
        let what = format!("rank {me} waiting for rank {i} at {addr} to accept its control connection");
        match send_frame(&mut s, &Frame::MeshHello { session, from: me, to: i }, deadline)
            .and_then(|_| recv_frame(&mut s, MAX_HELLO_FRAME, deadline))
        {
            Ok(Frame::MeshAck { session: ss, rank }) if ss == session && rank == i => {}
            Ok(Frame::Refuse(reason)) => {
                return Err(NetError::Refused(format!(
                    "rank {i} at {addr} refused rank {me}'s control connection: {reason}"
                )))
            }
            Ok(other) => return Err(NetError::Protocol(format!("{what}: {addr} answered {other:?}"))),
            Err(e) => return Err(step_error(e, &what, i, start)),
        }
        control[i as usize] = Some(s);
    }

    // Higher ranks: accept, and check that each connection is who it says it is.
    let ctrl = listener.local_addr().map_err(|e| NetError::io("reading the control listener's address", e))?;
    listener.set_nonblocking(true).map_err(|e| NetError::io("configuring the control listener", e))?;
    let mut pending: BTreeSet<u32> = (me + 1..n).collect();
    while !pending.is_empty() {
        if Instant::now() >= deadline {
            let missing: Vec<u32> = pending.iter().copied().collect();
            return Err(NetError::Timeout {
                what: format!(
                    "rank {me} waiting for {} to connect to its control listener at {ctrl}",
                    ranks_text(&missing)
                ),
                waited: start.elapsed(),
            });
        }
        let (mut s, _from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        if s.set_nonblocking(false).is_err() || s.set_nodelay(true).is_err() {
            continue;
        }
        let quick = deadline.min(Instant::now() + HELLO_READ_LIMIT);
        let reason = match recv_frame(&mut s, MAX_HELLO_FRAME, quick) {
            Ok(Frame::MeshHello { session: ss, from, to }) => {
                if ss != session {
                    Some("the session does not match: this connection belongs to another job".to_string())
                } else if to != me {
                    Some(format!("the connection is meant for rank {to} but this is rank {me}"))
                } else if from <= me || from >= n {
                    Some(format!("rank {from} must not connect to rank {me} (the higher rank of a pair connects)"))
                } else if !pending.contains(&from) {
                    Some(format!("rank {from} is already connected to rank {me}"))
                } else {
                    match send_frame(&mut s, &Frame::MeshAck { session, rank: me }, deadline) {
                        Ok(()) => {
                            pending.remove(&from);
                            control[from as usize] = Some(s);
                            continue;
                        }
                        Err(e) => {
                            return Err(step_error(
                                e,
                                &format!("rank {me} accepting rank {from}'s control connection"),
                                from,
                                start,
                            ))
                        }
                    }
                }
            }
            Ok(_) => Some("expected a mesh hello as the first frame".to_string()),
            Err(RecvError::Decode(DecodeError::Version(v))) => {
                Some(format!("it speaks rendezvous protocol version {v} but this rank speaks {PROTOCOL_VERSION}"))
            }
            Err(RecvError::Decode(DecodeError::Bad(m))) => Some(m),
            Err(_) => None, // stalled or closed: just drop it
        };
        if let Some(reason) = reason {
            refuse(s, &reason);
        }
    }
    Ok(control)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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

    fn spawn_rank(c: RendezvousConfig, delay: Duration) -> thread::JoinHandle<Result<Mesh, NetError>> {
        thread::spawn(move || {
            thread::sleep(delay);
            rendezvous(&c, udp_of(c.rank))
        })
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
        let port = free_port();
        let t = Duration::from_secs(10);
        let handles: Vec<_> = (0..n)
            .map(|r| spawn_rank(cfg(port, r, n, t), if r == 0 { master_delay } else { Duration::ZERO }))
            .collect();
        let meshes: Vec<Mesh> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        check_mesh(meshes);
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
        let port = free_port();
        let t = Duration::from_secs(10);
        let handles: Vec<_> = (0..3).map(|r| spawn_rank(cfg(port, r, 3, t), Duration::ZERO)).collect();
        let meshes: Vec<Mesh> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        assert!(meshes.iter().all(|m| m.mss == MAX_MSS), "{:?}", meshes.iter().map(|m| m.mss).collect::<Vec<_>>());
        // Given explicitly, the same on every rank.
        let port = free_port();
        let with = |r| RendezvousConfig { mss: Some(1440), ..cfg(port, r, 3, t) };
        let handles: Vec<_> = (0..3).map(|r| spawn_rank(with(r), Duration::ZERO)).collect();
        let meshes: Vec<Mesh> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
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
        let port = free_port();
        let n = 4;
        let t = Duration::from_secs(10);
        let r0 = spawn_rank(cfg(port, 0, n, t), Duration::ZERO);
        let r3 = spawn_rank(cfg(port, 3, n, t), Duration::ZERO);
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

        let r1 = spawn_rank(cfg(port, 1, n, t), Duration::ZERO);
        let r2 = spawn_rank(cfg(port, 2, n, t), Duration::ZERO);
        let meshes = [r0, r1, r2, r3].into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        check_mesh(meshes);
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
        let port = free_port();
        let t = Duration::from_secs(1);
        let t0 = Instant::now();
        let r0 = spawn_rank(cfg(port, 0, 4, t), Duration::ZERO);
        let r1 = spawn_rank(cfg(port, 1, 4, t), Duration::ZERO);
        let r3 = spawn_rank(cfg(port, 3, 4, t), Duration::ZERO);
        let want = format!("waiting for rank 2 to join at 127.0.0.1:{port}");
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
        let port = free_port();
        let t = Duration::from_secs(1);
        let t0 = Instant::now();
        let r0 = spawn_rank(cfg(port, 0, 3, t), Duration::ZERO);
        let r1 = spawn_rank(cfg(port, 1, 3, t), Duration::ZERO);
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
        let port = free_port();
        let t = Duration::from_secs(8);
        let t0 = Instant::now();
        let r0 = spawn_rank(cfg(port, 0, 2, t), Duration::ZERO);
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
        let r1 = spawn_rank(cfg(port, 1, 2, t), Duration::ZERO);
        let meshes = vec![r0.join().unwrap().unwrap(), r1.join().unwrap().unwrap()];
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        check_mesh(meshes);
        drop(silent);
    }

    #[test]
    fn stray_control_connections_are_refused() {
        let port = free_port();
        let t = Duration::from_secs(5);
        let r0 = spawn_rank(cfg(port, 0, 3, t), Duration::ZERO);
        let r1 = spawn_rank(cfg(port, 1, 3, t), Duration::ZERO);
        // Rank 2 by hand.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let d = || Instant::now() + Duration::from_secs(3);
        let mut m =
            connect_retry(|| Ok(SocketAddr::from(([127, 0, 0, 1], port))), d(), "test", Instant::now()).unwrap();
        send_frame(&mut m, &hello(2, 3, l.local_addr().unwrap()), d()).unwrap();
        let Ok(Frame::Welcome { session, peers, .. }) = recv_frame(&mut m, MAX_FRAME, d()) else {
            panic!("no welcome")
        };
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
        let meshes: Vec<Mesh> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
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
        assert!(config_error(("RANK", Some("8")))
            .contains("RANK is \"8\": expected this process's rank, an integer in 0..8"));
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
}

#[cfg(test)]
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

#[cfg(test)]
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
