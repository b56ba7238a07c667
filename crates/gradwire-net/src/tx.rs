//! Outgoing datagrams: batches of (header, payload-in-place) and the thread that sends them.
//!
//! The kernel's copy of a payload happens inside `sendmsg`, and on one host the loopback
//! delivery into the peer's socket runs in the sender's context too: together they are
//! about half of a rank's CPU in a large allreduce. With [`Outbox::threaded`] those
//! syscalls run on a second thread, so they overlap the engine thread's reads, reductions
//! and protocol work (Gloo likewise splits a pair's sends and receives over two threads).
//! Batches keep their order: one thread, one FIFO.
//!
//! Off by default (`EngineConfig::send_thread`): on the 2-core test machine, with 2 or 4
//! ranks per host, it did not beat sending inline (4 ranks × 25 MB: 1.11–1.16× Gloo with
//! it, 1.01× without, in one quiet paired run; docs/performance.md). It is for hosts with
//! a core to spare per rank.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use gradwire_core::wire::HEADER_LEN;

use crate::auth::TAG_LEN;

use crate::udp::DataSender;

/// Batches handed to the send thread and not yet sent, at most; the engine thread waits
/// (briefly: one batch is one syscall) when this many are queued.
const QUEUE_DEPTH: usize = 64;

/// Datagrams to one peer with one TOS, back to back, all but the last `seg` bytes long.
///
/// Each datagram is its encoded header plus a payload that stays where it is (in the
/// caller's buffer): the kernel gathers both with one `sendmsg` (GSO), so the payload is
/// copied once, by the kernel, as for TCP.
pub(crate) struct Batch {
    pub peer: u32,
    pub tos: u8,
    pub seg: usize,
    pub heads: Vec<[u8; HEADER_LEN]>,
    /// Per datagram: the payload (pointer, length) in the call's buffer. Valid until the
    /// batch is sent: the engine waits for the outbox to be idle ([`Outbox::wait_idle`])
    /// before it finishes or fails a call and so gives the buffer back.
    pub payloads: Vec<Payload>,
    /// Per datagram, its authentication tag (sent after the payload); empty when the job
    /// does not authenticate.
    pub tails: Vec<[u8; TAG_LEN]>,
    pub closed: bool,
}

/// A payload's place in the call's buffer (see [`Batch::payloads`]).
#[derive(Clone, Copy)]
pub(crate) struct Payload(pub *const u8, pub usize);

// SAFETY: the buffer outlives every batch that points into it (see `Batch::payloads`),
// and the memory is only read.
unsafe impl Send for Payload {}

impl Batch {
    pub fn new(peer: u32, tos: u8, seg: usize) -> Self {
        Batch {
            peer,
            tos,
            seg,
            heads: Vec::with_capacity(64),
            payloads: Vec::with_capacity(64),
            tails: Vec::new(),
            closed: false,
        }
    }

    pub fn count(&self) -> usize {
        self.heads.len()
    }

    /// Sends the batch with one gather `sendmsg` (GSO) where possible; the number of
    /// datagrams sent, or the error (all of them are lost then, as on a full NIC queue).
    fn send(&self, sock: &DataSender, dst: SocketAddr, iov: &mut Vec<IoSlice<'static>>) -> io::Result<usize> {
        let mut list = std::mem::take(iov);
        let tagged = !self.tails.is_empty();
        for (i, (h, &Payload(ptr, len))) in self.heads.iter().zip(&self.payloads).enumerate() {
            list.push(IoSlice::new(h));
            // SAFETY: see `Batch::payloads`.
            list.push(IoSlice::new(if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(ptr, len) } }));
            if tagged {
                list.push(IoSlice::new(&self.tails[i]));
            }
        }
        let r = sock.send_datagrams(dst, self.tos, self.seg, if tagged { 3 } else { 2 }, &list);
        list.clear();
        // SAFETY: the list is empty; only its allocation is kept.
        *iov = unsafe { std::mem::transmute::<Vec<IoSlice<'_>>, Vec<IoSlice<'static>>>(list) };
        r.map(|()| self.count())
    }

    fn clear(&mut self) {
        self.heads.clear();
        self.payloads.clear();
        self.tails.clear();
    }
}

/// Datagrams sent and lost to a full send buffer, shared with the send thread.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    drops: AtomicU64,
    /// Batches submitted and not yet sent.
    pending: AtomicUsize,
}

impl Tally {
    fn record(&self, r: io::Result<usize>, n: usize) {
        match r {
            Ok(n) => self.sent.fetch_add(n as u64, Ordering::Relaxed),
            Err(_) => self.drops.fetch_add(n as u64, Ordering::Relaxed),
        };
    }
}

/// Where the engine's batches go: sent at once on the engine thread, or queued to the
/// send thread.
pub(crate) struct Outbox {
    sock: Arc<DataSender>,
    addrs: Arc<Vec<SocketAddr>>,
    tally: Arc<Tally>,
    thread: Option<SendThread>,
    /// Sent batches, kept to reuse their allocations.
    spare: Vec<Batch>,
    iov: Vec<IoSlice<'static>>,
}

struct SendThread {
    queue: Option<SyncSender<Batch>>,
    recycled: Receiver<Batch>,
    handle: Option<JoinHandle<()>>,
}

impl Outbox {
    /// Sends on the calling thread.
    pub fn inline(sock: DataSender, addrs: Vec<SocketAddr>) -> Self {
        Outbox {
            sock: Arc::new(sock),
            addrs: Arc::new(addrs),
            tally: Arc::default(),
            thread: None,
            spare: Vec::new(),
            iov: Vec::new(),
        }
    }

    /// Sends on a thread of its own, named `name`.
    pub fn threaded(sock: DataSender, addrs: Vec<SocketAddr>, name: String) -> io::Result<Self> {
        let mut out = Outbox::inline(sock, addrs);
        let (queue, inbox) = mpsc::sync_channel::<Batch>(QUEUE_DEPTH);
        let (give_back, recycled) = mpsc::channel::<Batch>();
        let (sock, addrs, tally) = (out.sock.clone(), out.addrs.clone(), out.tally.clone());
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            let mut iov = Vec::new();
            for mut b in inbox {
                let r = b.send(&sock, addrs[b.peer as usize], &mut iov);
                tally.record(r, b.count());
                b.clear();
                tally.pending.fetch_sub(1, Ordering::Release);
                let _ = give_back.send(b);
            }
        })?;
        out.thread = Some(SendThread { queue: Some(queue), recycled, handle: Some(handle) });
        Ok(out)
    }

    /// An empty batch for (`peer`, `tos`, `seg`), reusing a sent one's memory.
    pub fn batch(&mut self, peer: u32, tos: u8, seg: usize) -> Batch {
        if let Some(t) = &self.thread {
            self.spare.extend(t.recycled.try_iter());
        }
        match self.spare.pop() {
            Some(mut b) => {
                (b.peer, b.tos, b.seg, b.closed) = (peer, tos, seg, false);
                b
            }
            None => Batch::new(peer, tos, seg),
        }
    }

    pub fn send(&mut self, mut b: Batch) {
        if b.count() == 0 {
            self.spare.push(b);
            return;
        }
        if let Some(t) = &self.thread {
            self.tally.pending.fetch_add(1, Ordering::Relaxed);
            let queue = t.queue.as_ref().expect("queue lives until drop");
            match queue.send(b) {
                Ok(()) => return,
                // the thread is gone (it never panics on purpose): send here instead
                Err(mpsc::SendError(back)) => {
                    self.tally.pending.fetch_sub(1, Ordering::Relaxed);
                    b = back;
                }
            }
        }
        let r = b.send(&self.sock, self.addrs[b.peer as usize], &mut self.iov);
        self.tally.record(r, b.count());
        b.clear();
        self.spare.push(b);
    }

    /// Sends one datagram that the caller owns, on the calling thread.
    pub fn send_owned(&mut self, peer: u32, tos: u8, datagram: &[u8]) {
        let r = self.sock.send_batch(self.addrs[peer as usize], tos, datagram.len(), datagram);
        self.tally.record(r.map(|()| 1), 1);
    }

    /// Returns once every submitted batch is in the kernel. Called before a call's buffer
    /// is given back, and before a control frame that must not overtake earlier data.
    pub fn wait_idle(&self) {
        while self.tally.pending.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
    }

    /// (datagrams sent, datagrams lost to a full send buffer) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.tally.sent.load(Ordering::Relaxed), self.tally.drops.load(Ordering::Relaxed))
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if let Some(t) = &mut self.thread {
            t.queue = None; // ends the thread's loop once it has sent what is queued
            if let Some(h) = t.handle.take() {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp::DataSocket;

    fn batch_of(out: &mut Outbox, payload: &[u8], n: usize) -> Batch {
        let mut b = out.batch(0, 0, HEADER_LEN + payload.len());
        for i in 0..n {
            let mut h = [0u8; HEADER_LEN];
            h[0] = i as u8;
            b.heads.push(h);
            b.payloads.push(Payload(payload.as_ptr(), payload.len()));
        }
        b
    }

    /// Both outboxes deliver every datagram, in order, and count them.
    #[test]
    fn threaded_and_inline_outboxes_deliver_in_order() {
        for threaded in [false, true] {
            let rx = DataSocket::bind("127.0.0.1:0".parse().unwrap(), 8 << 20, true).unwrap();
            let tx = DataSocket::bind("127.0.0.1:0".parse().unwrap(), 8 << 20, true).unwrap();
            let addrs = vec![rx.local_addr().unwrap()];
            let mut out = if threaded {
                Outbox::threaded(tx.sender().unwrap(), addrs, "test-send".into()).unwrap()
            } else {
                Outbox::inline(tx.sender().unwrap(), addrs)
            };
            let payload = vec![7u8; 1000];
            for _ in 0..10 {
                let b = batch_of(&mut out, &payload, 20);
                out.send(b);
            }
            out.wait_idle();
            assert_eq!(out.counts(), (200, 0), "threaded={threaded}");
            let mut bufs = crate::udp::RecvBufs::default();
            let mut got = Vec::new();
            while got.len() < 200 {
                if rx.recv(&mut bufs, usize::MAX).unwrap() {
                    got.extend(bufs.datagrams().map(|(d, _)| (d[0], d.len())));
                }
            }
            let want: Vec<_> = (0..10).flat_map(|_| (0..20u8).map(|i| (i, HEADER_LEN + 1000))).collect();
            assert_eq!(got, want, "threaded={threaded}");
        }
    }
}
