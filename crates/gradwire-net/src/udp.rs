//! The UDP data path: batched sends with per-datagram TOS, batched receives.
//!
//! Receives go through `quinn-udp` (recvmmsg, and GRO where the kernel has it: one read
//! returns many datagrams of equal `stride`). Sends use `sendmsg` with `UDP_SEGMENT`
//! (GSO: one syscall for up to 64 datagrams) through `nix`, not `quinn-udp`: quinn-udp
//! writes the whole IP TOS byte from the ECN codepoint and so erases the DSCP that
//! carries gradwire's layer priority (DLCP §4.2). Without GSO (old kernel, or turned off)
//! every datagram is its own `sendmsg`.
//!
//! Large datagrams can also be read one at a time straight into place: [`DataSocket::peek`]
//! shows the header, [`DataSocket::recv_into`] reads header and payload into two places.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use gradwire_core::wire::HEADER_LEN;
use mio::net::UdpSocket;
use nix::errno::Errno;
use nix::sys::socket::{
    recvmsg, sendmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState};

/// Kernel limit on segments per GSO send.
const MAX_GSO_SEGMENTS: usize = 64;
/// A GSO send carries at most this many bytes (the IP length field).
const MAX_GSO_BYTES: usize = 65_000;
const RECV_BUFS: usize = 16;
const RECV_BUF_BYTES: usize = 64 * 1024;

/// The IP TOS byte for a gradwire datagram: DSCP from the switch queue, ECT(0) for
/// ECN-capable (important) data (DLCP §4.1–4.2: queue by DSCP, drop non-ECT first).
pub fn tos_byte(priority: u8, ect: bool) -> u8 {
    // DSCP class selector CS(7 - priority): queue 0 (control) is the highest class.
    let dscp = (7 - priority.min(7)) << 3;
    dscp << 2 | if ect { 0b10 } else { 0 }
}

pub struct DataSocket {
    sock: UdpSocket,
    state: UdpSocketState,
    gso: bool,
}

/// The sending side of a [`DataSocket`].
pub struct DataSender {
    sock: std::net::UdpSocket,
    gso: bool,
}

impl DataSender {
    /// Sends `contents`: datagrams of `segment` bytes back to back (the last may be
    /// shorter), all to `dst` with TOS `tos`. `WouldBlock` means the kernel buffer is full:
    /// the datagrams are dropped, as a full NIC queue would drop them.
    pub fn send_batch(&self, dst: SocketAddr, tos: u8, segment: usize, contents: &[u8]) -> io::Result<()> {
        if self.gso && contents.len() > segment {
            return self.send_one(dst, tos, Some(segment), &[IoSlice::new(contents)]);
        }
        for d in contents.chunks(segment.max(1)) {
            self.send_one(dst, tos, None, &[IoSlice::new(d)])?;
        }
        Ok(())
    }

    /// Sends datagrams given as a gather list of exactly `per` slices each (header,
    /// payload, and a tag when authenticated), all but the last `segment` bytes long: one
    /// GSO `sendmsg` where possible, else one `sendmsg` per datagram. Errors as
    /// [`Self::send_batch`].
    pub fn send_datagrams(
        &self,
        dst: SocketAddr,
        tos: u8,
        segment: usize,
        per: usize,
        iov: &[IoSlice<'_>],
    ) -> io::Result<()> {
        if self.gso && iov.len() > per {
            return self.send_one(dst, tos, Some(segment), iov);
        }
        for d in iov.chunks(per) {
            self.send_one(dst, tos, None, d)?;
        }
        Ok(())
    }

    /// One `sendmsg` of the gather list `iov` to `dst` with TOS `tos`: one datagram, or
    /// with `gso_segment` datagrams of that many bytes cut by the kernel (UDP GSO).
    fn send_one(&self, dst: SocketAddr, tos: u8, gso_segment: Option<usize>, iov: &[IoSlice<'_>]) -> io::Result<()> {
        let addr = SockaddrStorage::from(dst);
        let tos_cmsg = ControlMessage::Ipv4Tos(&tos);
        let fd = self.sock.as_raw_fd();
        match gso_segment {
            Some(segment) => {
                let seg = segment as u16;
                let cmsgs = [tos_cmsg, ControlMessage::UdpGsoSegments(&seg)];
                sendmsg(fd, iov, &cmsgs, MsgFlags::empty(), Some(&addr))?;
            }
            None => {
                sendmsg(fd, iov, &[tos_cmsg], MsgFlags::empty(), Some(&addr))?;
            }
        }
        Ok(())
    }
}

fn socket_addr(s: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::from(std::net::SocketAddrV4::from(*v4)));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
}

/// Receive buffers, kept apart from the socket so datagrams can be handled while the
/// caller holds `&mut` to whatever owns the socket.
pub struct RecvBufs {
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
    filled: usize,
}

/// Empty: costs nothing, so the engine can `mem::take` it every turn; the buffers are
/// allocated on the first read.
impl Default for RecvBufs {
    fn default() -> Self {
        RecvBufs { bufs: Vec::new(), metas: Vec::new(), filled: 0 }
    }
}

impl RecvBufs {
    /// The datagrams of the last read, with their CE mark (GRO batches split by stride).
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], bool)> {
        self.datagrams_from().map(|(d, ce, _)| (d, ce))
    }

    /// As [`Self::datagrams`], with each datagram's source address.
    pub fn datagrams_from(&self) -> impl Iterator<Item = (&[u8], bool, SocketAddr)> {
        self.metas[..self.filled].iter().zip(&self.bufs).flat_map(|(meta, buf)| {
            let ce = meta.ecn == Some(quinn_udp::EcnCodepoint::Ce);
            let d = &buf[..meta.len];
            // An empty datagram is one too (malformed): `chunks` would yield nothing.
            d.chunks(meta.stride.max(1)).chain(d.is_empty().then_some(d)).map(move |d| (d, ce, meta.addr))
        })
    }
}

impl DataSocket {
    /// Binds `addr` (port 0: any), sizes the kernel buffers and turns on GRO/TOS reporting.
    pub fn bind(addr: SocketAddr, buffer_bytes: usize, gso: bool) -> io::Result<Self> {
        let std = std::net::UdpSocket::bind(addr)?;
        std.set_nonblocking(true)?;
        let state = UdpSocketState::new(UdpSockRef::from(&std))?;
        // Root may exceed net.core.[rw]mem_max with the FORCE variants; others get the cap.
        if setsockopt(&std, sockopt::RcvBufForce, &buffer_bytes).is_err() {
            let _ = state.set_recv_buffer_size(UdpSockRef::from(&std), buffer_bytes);
        }
        if setsockopt(&std, sockopt::SndBufForce, &buffer_bytes).is_err() {
            let _ = state.set_send_buffer_size(UdpSockRef::from(&std), buffer_bytes);
        }
        let gso = gso && state.max_gso_segments() > 1;
        Ok(DataSocket { sock: UdpSocket::from_std(std), state, gso })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The socket's descriptor (the engine registers it with epoll itself).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }

    pub fn gso_enabled(&self) -> bool {
        self.gso
    }

    /// Most datagrams of `segment` bytes one `send_batch` may carry.
    pub fn batch_limit(&self, segment: usize) -> usize {
        if self.gso {
            (MAX_GSO_BYTES / segment.max(1)).clamp(1, MAX_GSO_SEGMENTS)
        } else {
            MAX_GSO_SEGMENTS
        }
    }

    /// A handle that sends from this socket (its own file descriptor, so another thread
    /// may own it).
    pub fn sender(&self) -> io::Result<DataSender> {
        // SAFETY: the descriptor is open for as long as `self` is, and is only borrowed to
        // be duplicated.
        let fd = unsafe { BorrowedFd::borrow_raw(self.sock.as_raw_fd()) }.try_clone_to_owned()?;
        Ok(DataSender { sock: std::net::UdpSocket::from(fd), gso: self.gso })
    }

    /// The receive queue's fill: (bytes the kernel holds for it, the most it may hold),
    /// both in the kernel's memory accounting (a little more than the datagrams' size;
    /// the limit is what the kernel granted, which without privileges may be far below
    /// what was asked for). `None` if the kernel cannot say.
    pub fn receive_queue(&self) -> Option<(usize, usize)> {
        // <linux/sock_diag.h>: SK_MEMINFO_VARS entries; <asm-generic/socket.h>: SO_MEMINFO.
        const SK_MEMINFO_VARS: usize = 9;
        const SO_MEMINFO: libc::c_int = 55;
        let mut info = [0u32; SK_MEMINFO_VARS];
        let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
        // SAFETY: `info` and `len` describe a writable buffer of `len` bytes.
        let r = unsafe {
            libc::getsockopt(self.sock.as_raw_fd(), libc::SOL_SOCKET, SO_MEMINFO, info.as_mut_ptr().cast(), &mut len)
        };
        let at = |i: libc::c_int| info[i as usize] as usize;
        (r == 0).then(|| (at(libc::SK_MEMINFO_RMEM_ALLOC), at(libc::SK_MEMINFO_RCVBUF)))
    }

    /// The next datagram's first bytes (into `head`), its whole length and its source,
    /// without taking it; a GRO batch counts as one datagram. `Ok(None)` when nothing is
    /// waiting.
    pub fn peek(&self, head: &mut [u8; HEADER_LEN]) -> io::Result<Option<(usize, Option<SocketAddr>)>> {
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC | MsgFlags::MSG_DONTWAIT;
        let mut iov = [IoSliceMut::new(head)];
        loop {
            return match recvmsg::<SockaddrStorage>(self.sock.as_raw_fd(), &mut iov, None, flags) {
                Ok(msg) => Ok(Some((msg.bytes, msg.address.and_then(socket_addr)))),
                Err(Errno::EAGAIN) => Ok(None),
                Err(Errno::EINTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    /// Takes the next datagram: its first `HEADER_LEN` bytes into `head`, the rest into
    /// `payload` and then `tail` (an authentication tag; empty when there is none). Returns the bytes read and the CE mark. A datagram longer than both is
    /// an error (its tail is gone); call after [`Self::peek`] said how long it is.
    pub fn recv_into(
        &self,
        head: &mut [u8; HEADER_LEN],
        payload: &mut [u8],
        tail: &mut [u8],
    ) -> io::Result<(usize, bool)> {
        let mut iov = [IoSliceMut::new(head), IoSliceMut::new(payload), IoSliceMut::new(tail)];
        let mut space = nix::cmsg_space!(u8, i32);
        let msg = loop {
            match recvmsg::<()>(self.sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_DONTWAIT) {
                Err(Errno::EINTR) => continue,
                r => break r?,
            }
        };
        if msg.flags.contains(MsgFlags::MSG_TRUNC) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "datagram longer than its place"));
        }
        let ce = msg.cmsgs().into_iter().flatten().any(|c| matches!(c, ControlMessageOwned::Ipv4Tos(t) if t & 3 == 3));
        Ok((msg.bytes, ce))
    }

    /// One batched read of at most `max` datagrams into `bufs`; `Ok(false)` when nothing
    /// is waiting.
    pub fn recv(&self, bufs: &mut RecvBufs, max: usize) -> io::Result<bool> {
        bufs.filled = 0;
        if bufs.bufs.is_empty() {
            bufs.bufs = vec![vec![0u8; RECV_BUF_BYTES]; RECV_BUFS];
            bufs.metas = vec![RecvMeta::default(); RECV_BUFS];
        }
        loop {
            let mut slices: Vec<IoSliceMut<'_>> =
                bufs.bufs.iter_mut().take(max.max(1)).map(|b| IoSliceMut::new(b)).collect();
            return match self.state.recv(UdpSockRef::from(&self.sock), &mut slices, &mut bufs.metas) {
                Ok(got) => {
                    bufs.filled = got;
                    Ok(got > 0)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_queue_counts_what_waits_to_be_read() {
        let rx = DataSocket::bind("127.0.0.1:0".parse().unwrap(), 1 << 20, true).unwrap();
        let (held, limit) = rx.receive_queue().unwrap();
        assert_eq!(held, 0);
        assert!(limit > 0);
        let tx = DataSocket::bind("127.0.0.1:0".parse().unwrap(), 1 << 20, true).unwrap();
        tx.sender().unwrap().send_batch(rx.local_addr().unwrap(), 0, 10_000, &[1u8; 30_000]).unwrap();
        assert!(rx.receive_queue().unwrap().0 >= 30_000, "{:?}", rx.receive_queue());
    }

    #[test]
    fn tos_puts_priority_in_dscp_and_importance_in_ect() {
        assert_eq!(tos_byte(0, false) >> 2, 7 << 3);
        assert_eq!(tos_byte(7, false) >> 2, 0);
        assert_eq!(tos_byte(3, true) & 0b11, 0b10);
        assert_eq!(tos_byte(3, false) & 0b11, 0);
    }

    #[test]
    fn a_gso_batch_arrives_as_separate_datagrams_in_order() {
        for gso in [true, false] {
            let rx = DataSocket::bind("127.0.0.1:0".parse().unwrap(), 1 << 20, true).unwrap();
            let tx = DataSocket::bind("127.0.0.1:0".parse().unwrap(), 1 << 20, gso).unwrap();
            let seg = 1472;
            let mut contents = Vec::new();
            for i in 0..10u8 {
                let len = if i == 9 { 100 } else { seg };
                contents.extend(std::iter::repeat_n(i, len));
            }
            tx.sender().unwrap().send_batch(rx.local_addr().unwrap(), tos_byte(2, true), seg, &contents).unwrap();
            let mut got = Vec::new();
            let mut bufs = RecvBufs::default();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while got.len() < 10 && std::time::Instant::now() < deadline {
                if rx.recv(&mut bufs, usize::MAX).unwrap() {
                    got.extend(bufs.datagrams().map(|(d, _)| d.to_vec()));
                }
            }
            assert_eq!(got.len(), 10, "gso={gso}");
            for (i, d) in got.iter().enumerate() {
                assert!(d.iter().all(|&b| b == i as u8));
                assert_eq!(d.len(), if i == 9 { 100 } else { seg });
            }
        }
    }
}
