//! The rendezvous frames: what each message carries and its checked byte layout.
//!
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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) token: Vec<u8>,
    pub(super) rank: u32,
    pub(super) world_size: u32,
    pub(super) udp: SocketAddr,
    pub(super) ctrl: SocketAddr,
    /// The rank's explicit segment size, 0 if it leaves the choice to rank 0.
    pub(super) mss: u32,
    /// The path MTU of the rank's connection to rank 0.
    pub(super) mtu: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) udp: SocketAddr,
    pub(super) ctrl: SocketAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AbortKind {
    Timeout = 0,
    Lost = 1,
    Failed = 2,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Frame {
    Hello(Hello),
    Welcome { session: u64, mss: u32, peers: Vec<Entry> },
    Refuse(String),
    MeshHello { session: u64, from: u32, to: u32 },
    MeshAck { session: u64, rank: u32 },
    Ready { session: u64 },
    Go { session: u64 },
    Abort { kind: AbortKind, rank: u32, msg: String },
}

pub(super) const K_HELLO: u8 = 1;
pub(super) const K_WELCOME: u8 = 2;
pub(super) const K_REFUSE: u8 = 3;
pub(super) const K_MESH_HELLO: u8 = 4;
pub(super) const K_MESH_ACK: u8 = 5;
pub(super) const K_READY: u8 = 6;
pub(super) const K_GO: u8 = 7;
pub(super) const K_ABORT: u8 = 8;

/// Why a frame could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum DecodeError {
    /// Not a gradwire rendezvous frame at all.
    Bad(String),
    /// A gradwire peer of another protocol version.
    Version(u16),
}

pub(super) struct W(Vec<u8>);

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

pub(super) struct R<'a> {
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
    pub(super) fn encode(&self) -> Vec<u8> {
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
    pub(super) fn decode(frame: &[u8]) -> Result<Frame, DecodeError> {
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
