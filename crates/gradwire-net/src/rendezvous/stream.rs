//! Blocking frame I/O on a control connection, every read and write under a deadline, and
//! the errors a person reads when a step fails.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::frame::*;
use super::*;
use crate::NetError;

#[derive(Debug)]
pub(super) enum RecvError {
    Timeout,
    Closed,
    Decode(DecodeError),
    Io(io::Error),
}

pub(super) fn closed_kind(k: io::ErrorKind) -> bool {
    matches!(
        k,
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::NotConnected
    )
}

pub(super) fn timeout_kind(k: io::ErrorKind) -> bool {
    matches!(k, io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

pub(super) fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), RecvError> {
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

/// Read one frame; a length of 0 or above `max_len` is refused before anything is allocated.
pub(super) fn recv_frame(s: &mut TcpStream, max_len: usize, deadline: Instant) -> Result<Frame, RecvError> {
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

pub(super) fn send_frame(s: &mut TcpStream, f: &Frame, deadline: Instant) -> Result<(), RecvError> {
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
pub(super) fn send_quietly(s: &mut TcpStream, f: &Frame) {
    let _ = send_frame(s, f, Instant::now() + Duration::from_millis(500));
}

pub(super) fn refuse(mut s: TcpStream, reason: &str) {
    send_quietly(&mut s, &Frame::Refuse(reason.to_string()));
    let _ = s.shutdown(Shutdown::Write);
}

/// Turn an I/O failure into the error a person reads. `what` says what this rank was
/// doing ("waiting for ..."), `peer` which rank was on the other end.
pub(super) fn step_error(e: RecvError, what: &str, peer: u32, start: Instant) -> NetError {
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

pub(super) fn abort_frame(e: &NetError, me: u32) -> Frame {
    match e {
        NetError::Timeout { what, .. } => Frame::Abort { kind: AbortKind::Timeout, rank: me, msg: what.clone() },
        NetError::PeerLost { rank, detail } => Frame::Abort { kind: AbortKind::Lost, rank: *rank, msg: detail.clone() },
        other => Frame::Abort { kind: AbortKind::Failed, rank: me, msg: format!("rank {me} failed: {other}") },
    }
}

pub(super) fn abort_error(kind: AbortKind, rank: u32, msg: String, start: Instant) -> NetError {
    match kind {
        AbortKind::Timeout => NetError::Timeout { what: msg, waited: start.elapsed() },
        AbortKind::Lost => NetError::PeerLost { rank, detail: msg },
        AbortKind::Failed => NetError::Protocol(msg),
    }
}

/// Connect, retrying (with backoff) until `deadline`.
pub(super) fn connect_retry(
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

pub(super) fn finish_stream(s: &TcpStream) -> Result<(), NetError> {
    let ctx = |e| NetError::io("restoring blocking mode on a control connection", e);
    s.set_read_timeout(None).map_err(ctx)?;
    s.set_write_timeout(None).map_err(ctx)?;
    s.set_nonblocking(false).map_err(ctx)?;
    s.set_nodelay(true).map_err(ctx)
}
