//! One TCP control connection to a peer: the reliable half of the transport.
//!
//! Every control message is a bare 32-byte [`wire::Header`] (payload length 0) of a
//! transport, or an engine's own frame ([`LinkFrame`]): a 64-byte call descriptor
//! ([`crate::descriptor`]) or a 16-byte "transfer received" notice. They are told apart by
//! their magic: fixed-size frames, no length to trust, and a frame that does not decode is
//! a protocol error that ends the connection.

use std::io::{self, Read, Write};

use gradwire_core::wire::{Header, HEADER_LEN, MAGIC};

use crate::auth::{tags_equal, JobKey, TAG_LEN};
use crate::descriptor::{CallDesc, DESC_LEN, DESC_MAGIC};
use mio::net::TcpStream;

/// "GR": the receiver of flow `flow` has all it will take (16 bytes: magic, version, 0,
/// flow, session). LTP closes a complete transfer without a handshake, so a sender that
/// lost the last ACKs would resend to a receiver that is gone; this notice, on the
/// reliable link, ends the send instead.
pub const RECEIVED_MAGIC: [u8; 2] = *b"GR";
pub const RECEIVED_LEN: usize = 16;
const FRAME_VERSION: u8 = 1;

/// Frames of the engine itself, beside the transports' control headers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LinkFrame {
    Call(CallDesc),
    Received { session: u64, flow: u32 },
}

/// Why a link stopped working.
#[derive(Debug)]
pub enum LinkDown {
    Closed,
    Io(io::Error),
    BadFrame(String),
}

impl std::fmt::Display for LinkDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkDown::Closed => write!(f, "control connection closed by the peer (process exited?)"),
            LinkDown::Io(e) => write!(f, "control connection failed: {e}"),
            LinkDown::BadFrame(e) => write!(f, "peer sent a malformed control frame: {e}"),
        }
    }
}

/// The tags of an authenticated link ([`crate::auth`]): every frame is followed by its tag.
#[derive(Clone, Debug)]
pub struct LinkAuth {
    pub key: JobKey,
    pub me: u32,
    pub peer: u32,
    /// Frames sent and received so far (each tag covers its frame's number).
    pub sent: u64,
    pub received: u64,
}

/// Linux ≥ 6.15's per-socket minimum RTO and longest delayed ACK (`include/uapi/linux/tcp.h`;
/// not in `libc` yet).
const TCP_RTO_MIN_US: libc::c_int = 45;
const TCP_DELACK_MAX_US: libc::c_int = 46;

/// Asks the kernel to recover a lost control frame in milliseconds rather than the 200 ms
/// of its minimum RTO, which is also how long its loss probe waits with one segment in
/// flight, a control frame's usual case (the simulator's control retransmits after
/// `ctrl_rto_us`). On 16 cores at 1 % loss per link DLCP's control connections counted 16
/// loss probes and an RTO over one emulated ring run, which was 1.93× its twin, and 1.16×
/// with this and the engine's precise sleeps (docs/notes/emulation-measurements.md). The
/// kernel takes whole jiffies, at least two: the first value it accepts is kept. Kernels
/// without the options keep their defaults. Returns the minimum RTO now in force, in µs,
/// where the kernel says.
pub fn recover_fast(stream: &impl std::os::fd::AsRawFd) -> Option<u32> {
    let fd = stream.as_raw_fd();
    for opt in [TCP_RTO_MIN_US, TCP_DELACK_MAX_US] {
        // 2 jiffies at HZ = 1000, 250 and 100
        for us in [2_000, 8_000, 20_000] {
            if set_int(fd, opt, us) {
                break;
            }
        }
    }
    get_int(fd, TCP_RTO_MIN_US).and_then(|v| u32::try_from(v).ok())
}

fn set_int(fd: std::os::fd::RawFd, opt: libc::c_int, value: libc::c_int) -> bool {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket borrowed for the call; the value is a live c_int of `len` bytes.
    unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, opt, (&raw const value).cast(), len) == 0 }
}

fn get_int(fd: std::os::fd::RawFd, opt: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: as in `set_int`; the kernel writes at most `len` bytes into `value`.
    let ok = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, opt, (&raw mut value).cast(), &mut len) == 0 };
    ok.then_some(value)
}

pub struct PeerLink {
    stream: TcpStream,
    auth: Option<LinkAuth>,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// Bytes of `wbuf` already written.
    wpos: usize,
}

impl PeerLink {
    pub fn new(stream: std::net::TcpStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        recover_fast(&stream);
        Ok(PeerLink {
            stream: TcpStream::from_std(stream),
            auth: None,
            rbuf: Vec::with_capacity(4096),
            wbuf: Vec::new(),
            wpos: 0,
        })
    }

    /// Tags every frame from now on and requires a tag on every frame received.
    pub fn authenticate(&mut self, auth: LinkAuth) {
        self.auth = Some(auth);
    }

    fn push(&mut self, frame: &[u8]) {
        self.wbuf.extend_from_slice(frame);
        if let Some(a) = self.auth.as_mut() {
            let tag = a.key.frame_tag(a.me, a.peer, a.sent, frame);
            a.sent += 1;
            self.wbuf.extend_from_slice(&tag);
        }
    }

    pub fn mio(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn queue(&mut self, header: &Header) {
        let mut frame = [0u8; HEADER_LEN];
        header.encode(&mut frame);
        self.push(&frame);
    }

    pub fn queue_desc(&mut self, desc: &CallDesc) {
        let mut frame = [0u8; DESC_LEN];
        desc.encode(&mut frame);
        self.push(&frame);
    }

    pub fn queue_received(&mut self, session: u64, flow: u32) {
        let mut frame = [0u8; RECEIVED_LEN];
        frame[0..2].copy_from_slice(&RECEIVED_MAGIC);
        frame[2] = FRAME_VERSION;
        frame[4..8].copy_from_slice(&flow.to_be_bytes());
        frame[8..16].copy_from_slice(&session.to_be_bytes());
        self.push(&frame);
    }

    /// Frames queued but not yet taken by the socket.
    pub fn has_pending(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Writes what the socket takes now.
    pub fn flush(&mut self) -> Result<(), LinkDown> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(LinkDown::Closed),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LinkDown::Io(e)),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        Ok(())
    }

    /// Reads what has arrived and appends the decoded frames to `out` (control headers)
    /// and `own` (the engine's frames).
    pub fn read_frames(&mut self, out: &mut Vec<Header>, own: &mut Vec<LinkFrame>) -> Result<(), LinkDown> {
        let mut chunk = [0u8; 8192];
        let ended = loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => break Some(LinkDown::Closed),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Some(LinkDown::Io(e)),
            }
        };
        // Frames that arrived before the peer closed still count (a FINISH written just
        // before a clean exit, say).
        let used = parse_frames(&self.rbuf, out, own, self.auth.as_mut())?;
        self.rbuf.drain(..used);
        ended.map_or(Ok(()), Err)
    }
}

/// Decodes the whole frames at the start of `buf` (each followed by its tag when `auth`
/// is given); the bytes they took. The control-link parser, exposed for fuzzing
/// (`fuzz/`): any input gives frames or an error, never a panic.
pub fn parse_frames(
    buf: &[u8],
    out: &mut Vec<Header>,
    own: &mut Vec<LinkFrame>,
    mut auth: Option<&mut LinkAuth>,
) -> Result<usize, LinkDown> {
    let tag_len = if auth.is_some() { TAG_LEN } else { 0 };
    let mut at = 0;
    while buf.len() - at >= 2 {
        let magic = [buf[at], buf[at + 1]];
        let len = match magic {
            MAGIC => HEADER_LEN,
            DESC_MAGIC => DESC_LEN,
            RECEIVED_MAGIC => RECEIVED_LEN,
            _ => return Err(LinkDown::BadFrame(format!("unknown frame magic {magic:02x?}"))),
        };
        let Some(whole) = buf.get(at..at + len + tag_len) else { break };
        let (frame, tag) = whole.split_at(len);
        if let Some(a) = auth.as_deref_mut() {
            if !tags_equal(tag, &a.key.frame_tag(a.peer, a.me, a.received, frame)) {
                return Err(LinkDown::BadFrame(
                    "a control frame failed authentication (wrong job key, or forged)".into(),
                ));
            }
            a.received += 1;
        }
        match magic {
            // A 32-byte frame decodes only with a payload length of 0.
            MAGIC => out.push(Header::decode(frame).map_err(|e| LinkDown::BadFrame(e.to_string()))?.0),
            DESC_MAGIC => {
                let d = CallDesc::decode(frame.try_into().expect("DESC_LEN bytes"))
                    .map_err(|e| LinkDown::BadFrame(e.to_string()))?;
                own.push(LinkFrame::Call(d));
            }
            _ => {
                if frame[2] != FRAME_VERSION || frame[3] != 0 {
                    return Err(LinkDown::BadFrame("a transfer notice with a bad version or reserved byte".into()));
                }
                let flow = u32::from_be_bytes(frame[4..8].try_into().expect("4 bytes"));
                let session = u64::from_be_bytes(frame[8..16].try_into().expect("8 bytes"));
                own.push(LinkFrame::Received { session, flow });
            }
        }
        at += len + tag_len;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_control_connection_recovers_in_milliseconds_where_the_kernel_allows() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let before = get_int(stream.as_raw_fd(), TCP_RTO_MIN_US);
        match recover_fast(&stream) {
            // a kernel with the option (6.15 and later): the default (200 ms unless the
            // machine's tcp_rto_min_us says otherwise) before, two jiffies after
            Some(us) => {
                assert!(before.is_some(), "the option sets but does not read");
                assert!(us <= 20_000, "minimum RTO {us} µs");
            }
            None => assert_eq!(before, None, "the option reads but did not set"),
        }
    }
}
