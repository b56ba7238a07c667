//! The runtime's event loop: one thread per process owning the sockets and endpoints.
//!
//! Each turn: take new calls, read datagrams and control frames, fire due timers, let
//! every endpoint transmit (data batched per peer and TOS into GSO sends, control onto
//! the peer's TCP link), act on endpoint events (apply a delivered receive, start the
//! sends it unblocks, finish the call), then sleep in `epoll` until the next deadline.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gradwire_core::collective::{Schedule, TransferId};
use gradwire_core::packet::{CtrlOp, Ecn, Packet, PacketKind};
use gradwire_core::tensor::importance_mask;
use gradwire_core::time::{serialization, Time};
use gradwire_core::transport::dlcp::DlcpSender;
use gradwire_core::transport::Endpoint;
use gradwire_core::transport::EndpointEvent;
use gradwire_core::wire::{Header, HEADER_LEN};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::control::{LinkDown, PeerLink};
use crate::endpoint::{Ep, TransferSpec, TransportConfig};
use crate::error::NetError;
use crate::inject::{Delayed, Impairment, Injector};
use crate::job::{Dtype, Job, RawBuffer, Reply};
use crate::tx::{Batch, Outbox, Payload};
use crate::udp::{tos_byte, DataSocket, RecvBufs};

const UDP: Token = Token(0);
const WAKER: Token = Token(1);
const PEER_BASE: usize = 2;
/// Flow id = call (12 bits) | transfer (20 bits).
const TRANSFER_BITS: u32 = 20;
pub const MAX_TRANSFERS: usize = 1 << TRANSFER_BITS;
const CALL_MASK: u16 = (1 << (32 - TRANSFER_BITS)) - 1;
/// Control frames kept for calls this rank has not started yet.
const STASH_LIMIT: usize = 1 << 16;
/// Packets one endpoint may emit per turn, so one big send cannot starve the rest.
const TX_BUDGET: usize = 1024;
/// Datagram bytes read per turn (about: a read takes up to 1 MiB). Small, so a rank that
/// forwards (a ring step) sends between reads instead of after 8 MiB of them: 4 ranks ×
/// 25 MB allreduce 0.78–0.93× Gloo instead of 0.93–1.08× (three paired runs), goodput
/// unchanged at 1500 B, 5 % lower at 9000 B.
const RECV_TURN_BYTES: usize = 256 << 10;
/// Deadlines closer than this are spun for rather than slept on.
const SPIN: Time = 50_000_000; // 50 µs
/// Datagrams with at least this much payload are worth a peek to be read straight into
/// place (the extra syscall costs less than the copy it saves).
const DIRECT_MIN: usize = 16 << 10;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub transport: TransportConfig,
    /// A call fails with `NetError::Timeout` after this long without any packet for it.
    pub peer_timeout: Duration,
    /// Per peer rank (index = rank); empty: none.
    pub impairments: Vec<Impairment>,
    pub gso: bool,
    pub socket_buffer_bytes: usize,
    /// How long a closing communicator waits for its last transfers' handshakes.
    pub linger: Duration,
    /// Datagram bytes kept for calls this rank has not posted yet (a peer that calls
    /// first sends at once); beyond this they are dropped and resent on request.
    pub early_buffer_bytes: usize,
    /// Make the send syscalls on a second thread (see [`crate::tx`]); off by default.
    pub send_thread: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            transport: TransportConfig::default(),
            peer_timeout: Duration::from_secs(30),
            impairments: Vec::new(),
            gso: true,
            socket_buffer_bytes: 32 << 20,
            linger: Duration::from_secs(10),
            early_buffer_bytes: 64 << 20,
            send_thread: false,
        }
    }
}

pub struct CallRequest {
    pub schedule: Arc<Schedule>,
    pub buf: RawBuffer,
    pub dtype: Dtype,
    pub reply: Reply,
}

pub enum Command {
    Run(CallRequest),
    Shutdown,
}

/// Runtime-wide counters (never reset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams or frames that failed to decode.
    pub malformed: u64,
    /// Datagrams stamped with another job's session id.
    pub foreign_session: u64,
    /// Packets for a transfer that already finished here (or was never ours).
    pub stale: u64,
    /// Data for a call this rank has not started yet (the sender resends it on request).
    pub early: u64,
    /// Datagrams dropped by the loss injector.
    pub injected_drops: u64,
    /// Datagrams the kernel refused (send buffer full): lost, as on a full NIC queue.
    pub send_drops: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    /// Of those, datagrams read straight into the caller's buffer.
    pub received_in_place: u64,
}

/// An endpoint and what it belongs to.
struct Slot {
    ep: Ep,
    call: u16,
    transfer: TransferId,
    peer: u32,
    /// The transfer has been reported finished to the call.
    finished: bool,
    /// DLCP sender: the clock it is polled at (see [`pace_dlcp`]).
    pace: Time,
}

pub struct Engine {
    rank: u32,
    session: u64,
    cfg: EngineConfig,
    poll: Poll,
    udp: DataSocket,
    links: Vec<Option<PeerLink>>,
    down: Vec<Option<String>>,
    cmds: Receiver<Command>,
    epoch: Instant,
    queue: VecDeque<CallRequest>,
    job: Option<Job>,
    next_call: u16,
    slots: HashMap<u32, Slot>,
    stash: Vec<(u32, Header)>,
    /// Batches being filled this turn.
    batches: Vec<Batch>,
    outbox: Outbox,
    /// A STOP was queued: data handed to the send thread before it must reach the kernel
    /// before the STOP reaches its TCP link, or the receiver sees STOP before the data.
    fence: bool,
    inject: Injector,
    counters: Arc<std::sync::Mutex<Counters>>,
    local: Counters,
    broken: Option<String>,
    shutting_down: Option<Instant>,
    frames: Vec<Header>,
    rbufs: RecvBufs,
    trace_at: Time,
    /// Packets of one turn, kept to reuse the allocation.
    txq: Vec<(u32, Packet)>,
    /// `GRADWIRE_TRACE` is set.
    tracing: bool,
    /// Datagrams of calls not posted yet, back to back, and their (offset, length, CE).
    early: Vec<u8>,
    early_index: Vec<(usize, usize, bool)>,
    /// The previous early store, emptied: replays reuse its memory (already faulted in)
    /// instead of growing a new one.
    early_spare: (Vec<u8>, Vec<(usize, usize, bool)>),
    /// Turns run, and turns that found nothing to do (for `GRADWIRE_TRACE`).
    turns: u64,
    idle_turns: u64,
}

/// Polls a DLCP sender for the packets its pacer allows up to `now + burst`.
///
/// The sender schedules its next packet at `max(next slot, the time it is given) +
/// serialization`. Given `now + burst` directly, a sender whose slot fell behind (a turn
/// that came late: a busy receive, a preempted thread, an epoll sleep) would jump to
/// `now + burst` and send a single packet per turn, so the loop's gaps would set the rate.
/// Instead the engine walks a clock `pace` through the sender's slots: from where it
/// stopped, but no further back than `now - catch_up` (the paced rate is kept on average
/// across a gap of up to `catch_up`, in one burst), to `now + burst`.
fn pace_dlcp(s: &mut DlcpSender, pace: &mut Time, now: Time, burst: Time, catch_up: Time, mut out: impl FnMut(Packet)) -> usize {
    let limit = now + burst;
    let mut at = (*pace).max(now.saturating_sub(catch_up));
    let mut n = 0;
    while n < TX_BUDGET {
        let rate = s.rate_bps();
        match s.poll_transmit(at) {
            Some(p) => {
                n += 1;
                let data = p.kind == PacketKind::Data;
                let wire = p.wire_bytes;
                out(p);
                if data {
                    // The sender's next slot is now `at + serialization`.
                    at += serialization(wire, rate);
                    if at > limit {
                        break;
                    }
                }
            }
            None => match s.poll_timeout() {
                // The next slot lies ahead of `at` (left there by the last turn).
                Some(t) if t > at && t <= limit => at = t,
                _ => break,
            },
        }
    }
    *pace = at.min(limit);
    n
}

/// What [`Engine::receive_direct`] did with the next datagram.
enum Direct {
    /// Nothing is waiting.
    Empty,
    /// Read into place; its length.
    Landed(usize),
    /// Left for the usual read; `large`: at least `DIRECT_MIN` of payload.
    Declined { large: bool },
}

/// A datagram's payload as [`Engine::dispatch`] gets it.
#[derive(Clone, Copy)]
enum Incoming<'a> {
    /// In the receive buffer, to be placed.
    Bytes(&'a [u8]),
    /// Already read into its place ([`Engine::receive_direct`]); this many bytes.
    Landed(u32),
}

fn flow_id(call: u16, t: TransferId) -> u32 {
    ((call & CALL_MASK) as u32) << TRANSFER_BITS | t
}

fn call_of(flow: u32) -> u16 {
    (flow >> TRANSFER_BITS) as u16
}

/// `call` is one this rank has not reached yet (within half the 12-bit space).
fn is_future(call: u16, next: u16) -> bool {
    call.wrapping_sub(next) & CALL_MASK < (CALL_MASK + 1) / 2
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rank: u32,
        session: u64,
        cfg: EngineConfig,
        udp: DataSocket,
        links: Vec<Option<std::net::TcpStream>>,
        addrs: Vec<SocketAddr>,
        cmds: Receiver<Command>,
        counters: Arc<std::sync::Mutex<Counters>>,
    ) -> io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let mut udp = udp;
        poll.registry().register(udp.mio(), UDP, Interest::READABLE)?;
        let mut wrapped = Vec::with_capacity(links.len());
        for (i, l) in links.into_iter().enumerate() {
            let link = match l {
                Some(s) => {
                    let mut link = PeerLink::new(s)?;
                    poll.registry().register(link.mio(), Token(PEER_BASE + i), Interest::READABLE | Interest::WRITABLE)?;
                    Some(link)
                }
                None => None,
            };
            wrapped.push(link);
        }
        let world = addrs.len();
        let mut impairments = cfg.impairments.clone();
        impairments.resize(world, Impairment::default());
        let seed = session ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let outbox = if cfg.send_thread {
            Outbox::threaded(udp.sender()?, addrs, format!("gradwire-send-{rank}"))?
        } else {
            Outbox::inline(udp.sender()?, addrs)
        };
        let engine = Engine {
            rank,
            session,
            cfg,
            poll,
            udp,
            links: wrapped,
            down: vec![None; world],
            cmds,
            epoch: Instant::now(),
            queue: VecDeque::new(),
            job: None,
            next_call: 0,
            slots: HashMap::new(),
            stash: Vec::new(),
            batches: Vec::new(),
            outbox,
            fence: false,
            inject: Injector::new(impairments, seed),
            counters,
            local: Counters::default(),
            broken: None,
            shutting_down: None,
            frames: Vec::new(),
            rbufs: RecvBufs::default(),
            trace_at: 0,
            txq: Vec::new(),
            tracing: std::env::var_os("GRADWIRE_TRACE").is_some(),
            early: Vec::new(),
            early_index: Vec::new(),
            early_spare: (Vec::new(), Vec::new()),
            turns: 0,
            idle_turns: 0,
        };
        Ok((engine, waker))
    }

    fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time * 1000
    }

    /// Runs until `Command::Shutdown` (or the handle is dropped) and the last transfers
    /// have closed or `linger` has passed.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            let busy = self.turn();
            self.turns += 1;
            self.idle_turns += !busy as u64;
            self.publish_counters();
            if let Some(since) = self.shutting_down {
                // Stay until our receivers have their CONFIRMs (so every peer has read our
                // FINISH) and every control frame is written, or `linger` passes.
                let lingering = self.slots.values().any(|s| !s.ep.is_closed());
                let unflushed = self.links.iter().flatten().any(|l| l.has_pending());
                if (!lingering && !unflushed && self.job.is_none() && self.queue.is_empty()) || since.elapsed() > self.cfg.linger {
                    self.flush_links();
                    return;
                }
            }
            let timeout = if busy { Some(Duration::ZERO) } else { self.sleep_for() };
            if !busy && timeout == Some(Duration::ZERO) {
                // Spinning for a deadline less than `SPIN` away: let another thread on
                // this core (a peer rank on an oversubscribed host) run meanwhile.
                std::thread::yield_now();
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.fail_all(NetError::io("epoll", e));
                    return;
                }
            }
        }
    }

    fn publish_counters(&mut self) {
        self.local.injected_drops = self.inject.dropped;
        (self.local.datagrams_sent, self.local.send_drops) = self.outbox.counts();
        if let Ok(mut c) = self.counters.lock() {
            *c = self.local;
        }
    }

    /// One pass over everything; true if it did work that may enable more right away.
    fn turn(&mut self) -> bool {
        self.take_commands();
        // Post a new call before reading: its data may already be arriving.
        let started = self.job.is_none() && self.start_next_call();
        // Bounded, so timers and control keep running while a fast sender fills the socket.
        let mut busy = self.should_read() && self.receive_datagrams(RECV_TURN_BYTES);
        self.read_control();
        let now = self.now();
        self.fire_timers(now);
        busy |= self.transmit(now);
        self.release_delayed(now);
        self.flush_batches();
        self.flush_links();
        self.handle_events();
        self.check_stall();
        if self.job.is_none() {
            busy |= self.start_next_call();
        }
        busy || started
    }

    /// Between calls, datagrams of the next call (from a peer that posted it first) are
    /// left in the kernel's receive buffer: read once the call is posted, they go straight
    /// into place, where read now they would be copied into the early store and again out
    /// of it (a whole ring step's chunk, when a peer is one step ahead). They are read
    /// anyway once they fill half the buffer, so the kernel never drops them.
    fn should_read(&self) -> bool {
        let between_calls = self.job.is_none() && self.queue.is_empty() && self.slots.values().all(|s| s.finished);
        !between_calls || self.udp.queued_bytes().is_none_or(|b| b >= self.cfg.socket_buffer_bytes / 2)
    }

    fn sleep_for(&self) -> Option<Duration> {
        let now = self.now();
        let mut next: Option<Time> = self.slots.values().filter_map(|s| s.ep.poll_timeout()).min();
        if let Some(r) = self.inject.next_release() {
            next = Some(next.map_or(r, |n| n.min(r)));
        }
        // Wake at least every 100 ms to check for stalls and shutdown.
        let cap = Duration::from_millis(100);
        match next {
            None => Some(cap),
            Some(t) if t <= now + SPIN => Some(Duration::ZERO),
            Some(t) => Some(Duration::from_nanos((t - now) / 1000).min(cap)),
        }
    }

    fn take_commands(&mut self) {
        loop {
            match self.cmds.try_recv() {
                Ok(Command::Run(req)) => self.queue.push_back(req),
                Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => {
                    if self.shutting_down.is_none() {
                        self.shutting_down = Some(Instant::now());
                    }
                    return;
                }
                Err(TryRecvError::Empty) => return,
            }
        }
    }

    // ---- calls ------------------------------------------------------------------------

    fn start_next_call(&mut self) -> bool {
        let Some(req) = self.queue.pop_front() else { return false };
        let call = self.next_call;
        self.next_call = self.next_call.wrapping_add(1) & CALL_MASK;
        if let Some(why) = &self.broken {
            let _ = req.reply.send(Err(NetError::Protocol(format!("the communicator is unusable after an earlier failure: {why}"))));
            return true;
        }
        let s = req.schedule.clone();
        // A partner of this rank that is already gone cannot finish its part of this call
        // (each side of a transfer waits for the other); a rank we never talk to may have
        // finished the call and exited already, so it does not count.
        let me = self.rank;
        let partner = |r: u32| s.transfers.iter().any(|t| (t.src == me && t.dst == r) || (t.src == r && t.dst == me));
        if let Some(r) = (0..s.world).find(|&r| partner(r) && self.down[r as usize].is_some()) {
            let detail = self.down[r as usize].clone().unwrap_or_default();
            let _ = req.reply.send(Err(NetError::PeerLost { rank: r, detail }));
            return true;
        }
        let mut job = Job::new(call, s.clone(), self.rank, req.buf, req.dtype, req.reply);
        let now = self.now();
        if self.tracing {
            eprintln!("t={:.3}ms rank {} starts call {call} ('{}'), {} early datagrams kept", now as f64 / 1e9, self.rank, s.name, self.early_index.len());
        }
        for t in s.receives_of(self.rank) {
            job.post_receive(t);
            let spec = self.spec(&s, call, t, job.dtype);
            let ep = Ep::receiver(&self.cfg.transport, &spec, now);
            let peer = spec.src;
            self.slots.insert(spec.flow, Slot { ep, call, transfer: t, peer, finished: false, pace: 0 });
        }
        self.job = Some(job);
        // Data that arrived before this call was posted (kept, or left in the socket: see
        // `should_read`), then its control (a STOP must find the data its round sent
        // already placed).
        self.replay_early(call, now);
        if let Some(queued) = self.udp.queued_bytes().filter(|&b| b > 0) {
            self.receive_datagrams(queued);
        }
        let stash = std::mem::take(&mut self.stash);
        for (from, h) in stash {
            if call_of(h.flow) == call {
                self.dispatch(from, &h, Incoming::Bytes(&[]), now);
            } else if is_future(call_of(h.flow), self.next_call) {
                self.stash.push((from, h));
            }
        }
        self.start_ready_sends(now);
        self.maybe_complete();
        true
    }

    fn spec(&self, s: &Schedule, call: u16, t: TransferId, dtype: Dtype) -> TransferSpec {
        let tr = &s.transfers[t as usize];
        TransferSpec {
            flow: flow_id(call, t),
            src: tr.src,
            dst: tr.dst,
            bytes: tr.bytes(),
            loss_bound: tr.loss_bound,
            priority: tr.priority,
            elem_bytes: dtype.size(),
        }
    }

    fn start_ready_sends(&mut self, now: Time) {
        let Some(job) = self.job.as_mut() else { return };
        let mut started = Vec::new();
        while let Some(t) = job.exec.poll_ready() {
            started.push(t);
        }
        for t in started {
            let job = self.job.as_ref().expect("job");
            let spec = self.spec(&job.schedule, job.call, t, job.dtype);
            // Importance from the real gradient values (DLCP §3.2.2), only when loss is allowed.
            let mss = self.cfg.transport.mss as usize;
            let importance = (spec.loss_bound > 0.0)
                .then(|| job.send_f32(t).map(|g| importance_mask(g, (mss / 4).max(1))))
                .flatten();
            let ep = Ep::sender(&self.cfg.transport, &spec, importance, now);
            let call = job.call;
            self.slots.insert(spec.flow, Slot { ep, call, transfer: t, peer: spec.dst, finished: false, pace: 0 });
            self.job.as_mut().expect("job").report.transfers_sent += 1;
        }
    }

    /// Reports transfer `t` of the current call finished at this rank.
    fn finish_transfer(&mut self, flow: u32) {
        let Some(slot) = self.slots.get_mut(&flow) else { return };
        if slot.finished {
            return;
        }
        let Some(job) = self.job.as_mut().filter(|j| j.call == slot.call) else { return };
        slot.finished = true;
        let t = slot.transfer;
        if slot.ep.is_receiver() {
            let bubbles = slot.ep.bubbles();
            job.apply(t, &bubbles);
        }
        let stats = slot.ep.stats();
        if !slot.ep.is_receiver() {
            job.report.retransmits += stats.retransmits;
        }
        let _ = job.exec.finished(&job.schedule, t);
        if self.tracing {
            let tr = &job.schedule.transfers[t as usize];
            let at = self.epoch.elapsed().as_secs_f64() * 1e3;
            eprintln!("t={at:.3}ms rank {} call {} finished transfer {t} ({} -> {}, {} B, {})", self.rank, job.call, tr.src, tr.dst, tr.bytes(), if slot.ep.is_receiver() { "received" } else { "sent" });
        }
        let now = self.now();
        self.start_ready_sends(now);
        self.maybe_complete();
    }

    fn maybe_complete(&mut self) {
        if !self.job.as_ref().is_some_and(|j| j.exec.is_complete()) {
            return;
        }
        // The batches in flight point into the call's buffer, which the reply gives back.
        self.outbox.wait_idle();
        let mut job = self.job.take().expect("job");
        let report = job.finish_report();
        if self.tracing {
            eprintln!("t={:.3}ms rank {} call {} complete", self.now() as f64 / 1e9, self.rank, job.call);
        }
        let _ = job.reply.send(Ok(report));
    }

    fn fail_call(&mut self, err: NetError) {
        if let Some(job) = self.job.take() {
            self.outbox.wait_idle(); // as in `maybe_complete`
            self.broken = Some(err.to_string());
            let call = job.call;
            self.slots.retain(|_, s| s.call != call);
            let _ = job.reply.send(Err(err));
        }
    }

    fn fail_all(&mut self, err: NetError) {
        let msg = err.to_string();
        self.fail_call(err);
        for req in self.queue.drain(..) {
            let _ = req.reply.send(Err(NetError::Protocol(msg.clone())));
        }
    }

    fn check_stall(&mut self) {
        let Some(job) = self.job.as_mut() else { return };
        // Packets mark progress; the clock is read once per turn, not once per packet.
        if std::mem::take(&mut job.progressed) {
            job.last_progress = Instant::now();
        }
        let waited = job.last_progress.elapsed();
        if waited < self.cfg.peer_timeout {
            return;
        }
        let call = job.call;
        let mut peers: Vec<u32> = self.slots.values().filter(|s| s.call == call && !s.finished).map(|s| s.peer).collect();
        peers.sort_unstable();
        peers.dedup();
        let what = format!(
            "rank {} got nothing for collective '{}' (call {}) from its peers; transfers with ranks {:?} are unfinished (dead or stalled peer?)",
            self.rank, job.schedule.name, call, peers
        );
        self.fail_call(NetError::Timeout { what, waited });
    }

    // ---- input ------------------------------------------------------------------------

    /// Reads and handles datagrams until the socket is empty or about `max_bytes` have
    /// been read; true if anything arrived.
    fn receive_datagrams(&mut self, max_bytes: usize) -> bool {
        let now = self.now();
        let (mut count, mut bytes) = (0usize, 0usize);
        // The receive buffers are borrowed while the datagrams are handled, which needs
        // `&mut self`: move them out for the read.
        let mut bufs = std::mem::take(&mut self.rbufs);
        let direct = self.cfg.transport.mss as usize >= DIRECT_MIN;
        while bytes < max_bytes {
            // A batched read would also take the large datagrams behind this one, which
            // could have gone straight into place: after a large one, read one at a time.
            let mut batch = usize::MAX;
            if direct {
                match self.receive_direct(now) {
                    Direct::Empty => break,
                    Direct::Landed(n) => {
                        count += 1;
                        bytes += n;
                        continue;
                    }
                    Direct::Declined { large } => batch = if large { 1 } else { usize::MAX },
                }
            }
            match self.udp.recv(&mut bufs, batch) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    self.fail_all(NetError::io("receiving datagrams", e));
                    break;
                }
            }
            for (d, ce) in bufs.datagrams() {
                count += 1;
                bytes += d.len();
                self.on_datagram(d, ce, now);
            }
        }
        self.rbufs = bufs;
        self.local.datagrams_received += count as u64;
        count > 0
    }

    /// Reads the next datagram straight into the caller's buffer when it is a large data
    /// segment of a direct `Copy` receive that its endpoint wants (a whole, new segment):
    /// the payload is copied once, by the kernel, as TCP's would be. Returns its length;
    /// `None` when nothing is waiting or the datagram goes the usual way.
    ///
    /// This thread is the socket's only reader, so the datagram read is the one peeked.
    /// Should the read still fail, the segment's place holds garbage but the endpoint has
    /// not taken it: a resend overwrites it, or it is zeroed as a bubble.
    fn receive_direct(&mut self, now: Time) -> Direct {
        let mut head = [0u8; HEADER_LEN];
        let total = match self.udp.peek(&mut head) {
            Ok(Some(total)) => total,
            Ok(None) => return Direct::Empty,
            Err(_) => return Direct::Declined { large: false }, // the read reports it
        };
        let declined = Direct::Declined { large: total >= HEADER_LEN + DIRECT_MIN };
        if total < HEADER_LEN + DIRECT_MIN {
            return declined;
        }
        let Ok(h) = Header::decode_header(&head) else { return declined };
        if h.kind != PacketKind::Data || h.session != self.session || total != HEADER_LEN + h.payload_len as usize {
            return declined;
        }
        let Some(slot) = self.slots.get(&h.flow) else { return declined };
        let (from, call, transfer) = (slot.peer, slot.call, slot.transfer);
        if !slot.ep.wants(h.seq, h.payload_len) {
            return declined;
        }
        let Some(job) = self.job.as_mut().filter(|j| j.call == call) else { return declined };
        let Some(dst) = job.direct_dst(transfer, h.seq..h.seq + h.payload_len as u64) else { return declined };
        match self.udp.recv_into(&mut head, dst) {
            Ok((n, ce)) if n == total => {
                let mut h = h;
                h.ce |= ce;
                self.dispatch(from, &h, Incoming::Landed(h.payload_len), now);
                self.local.received_in_place += 1;
                Direct::Landed(n)
            }
            _ => {
                self.local.malformed += 1;
                declined
            }
        }
    }

    fn on_datagram(&mut self, d: &[u8], ce: bool, now: Time) {
        let (h, payload) = match Header::decode(d) {
            Ok(x) => x,
            Err(_) => {
                self.local.malformed += 1;
                return;
            }
        };
        if h.session != self.session {
            self.local.foreign_session += 1;
            return;
        }
        let mut h = h;
        h.ce |= ce;
        let Some(from) = self.slots.get(&h.flow).map(|s| s.peer) else {
            self.classify_unknown(h.flow);
            // Data of a call this rank has not posted yet (the peer started first): keep
            // it, up to `early_buffer_bytes`, rather than make the sender resend it.
            if is_future(call_of(h.flow), self.next_call) && self.early.len() + d.len() <= self.cfg.early_buffer_bytes {
                self.early_index.push((self.early.len(), d.len(), ce));
                self.early.extend_from_slice(d);
            }
            return;
        };
        self.dispatch(from, &h, Incoming::Bytes(payload), now);
    }

    /// Feeds the kept early datagrams of the call just posted to it; keeps later calls'.
    fn replay_early(&mut self, call: u16, now: Time) {
        if self.early_index.is_empty() {
            return;
        }
        let (spare_data, spare_index) = std::mem::take(&mut self.early_spare);
        let mut data = std::mem::replace(&mut self.early, spare_data);
        let mut index = std::mem::replace(&mut self.early_index, spare_index);
        for &(at, len, ce) in &index {
            let d = &data[at..at + len];
            let Ok((h, _)) = Header::decode(d) else { continue };
            let c = call_of(h.flow);
            if c == call {
                self.on_datagram(d, ce, now);
            } else if is_future(c, self.next_call) {
                self.early_index.push((self.early.len(), len, ce));
                self.early.extend_from_slice(d);
            }
        }
        data.clear();
        index.clear();
        self.early_spare = (data, index);
    }

    fn classify_unknown(&mut self, flow: u32) {
        if is_future(call_of(flow), self.next_call) {
            self.local.early += 1;
        } else {
            self.local.stale += 1;
        }
    }

    fn read_control(&mut self) {
        let mut frames = std::mem::take(&mut self.frames);
        let mut lost = Vec::new();
        for (peer, link) in self.links.iter_mut().enumerate() {
            let Some(l) = link.as_mut() else { continue };
            let before = frames.len();
            if let Err(e) = l.read_frames(&mut frames) {
                lost.push((peer as u32, e));
            }
            // Tag the frames with their link.
            for f in &mut frames[before..] {
                f.payload_len = peer as u32; // reuse: control frames carry no payload
            }
        }
        if !frames.is_empty() && self.should_read() {
            // A STOP must not overtake data already queued in the UDP socket: drain it
            // first, all of it (a STOP handled with data still queued would request that
            // data again). The socket cannot hold more than its buffer (which the kernel
            // doubles for bookkeeping), so reading that much empties what was queued,
            // without chasing a sender that keeps sending (which would stall this loop,
            // its calls and its timers). Between calls the socket is drained when the
            // next call is posted, before its stashed control (`start_next_call`).
            self.receive_datagrams((2 * self.cfg.socket_buffer_bytes).max(RECV_TURN_BYTES));
        }
        let now = self.now();
        for mut h in frames.drain(..) {
            let from = h.payload_len;
            h.payload_len = 0;
            if h.session != self.session {
                self.local.foreign_session += 1;
                continue;
            }
            match self.slots.get(&h.flow) {
                Some(s) if s.peer == from => self.dispatch(from, &h, Incoming::Bytes(&[]), now),
                Some(_) => self.local.stale += 1,
                None if is_future(call_of(h.flow), self.next_call) && self.stash.len() < STASH_LIMIT => self.stash.push((from, h)),
                None => self.classify_unknown(h.flow),
            }
        }
        self.frames = frames;
        for (peer, e) in lost {
            self.peer_down(peer, e);
        }
    }

    fn peer_down(&mut self, peer: u32, why: LinkDown) {
        if let Some(mut l) = self.links[peer as usize].take() {
            let _ = self.poll.registry().deregister(l.mio());
        }
        let detail = why.to_string();
        self.down[peer as usize] = Some(detail.clone());
        // Lingering endpoints of finished calls have nobody left to talk to.
        self.slots.retain(|_, s| s.peer != peer || !s.finished);
        // Only a call that still needs this peer directly fails now; a wait on it through
        // others ends with the stall timeout.
        let rank = self.rank;
        let involved = self.job.as_ref().is_some_and(|j| {
            j.schedule.transfers.iter().enumerate().any(|(i, t)| {
                ((t.src == rank && t.dst == peer) || (t.src == peer && t.dst == rank)) && !j.exec.is_finished(i as TransferId)
            })
        });
        if involved {
            self.fail_call(NetError::PeerLost { rank: peer, detail });
        }
    }

    /// Feeds a packet to its endpoint (the slot exists for `h.flow`).
    fn dispatch(&mut self, from: u32, h: &Header, payload: Incoming<'_>, now: Time) {
        let len = match payload {
            Incoming::Bytes(b) => b.len() as u32,
            Incoming::Landed(n) => n,
        };
        let rank = self.rank;
        let Some(slot) = self.slots.get_mut(&h.flow) else { return };
        let pkt = Packet {
            kind: h.kind,
            flow: h.flow,
            src: from,
            dst: rank,
            seq: h.seq,
            len,
            wire_bytes: len + HEADER_LEN as u32 + 28,
            priority: h.priority,
            ecn: Ecn { ect: h.ect, ce: h.ce },
            ece: h.ece,
            sent_at: now,
            rank: 0,
        };
        let call = slot.call;
        let placed = slot.ep.receive(now, &pkt);
        let transfer = slot.transfer;
        // The receiver declared the bound met (DLCP FINISH, LTP STOP): for this rank's
        // call the send is over, even if the closing handshake is still running.
        let sender_released = !slot.ep.is_receiver() && matches!(h.kind, PacketKind::Ctrl(CtrlOp::Finish) | PacketKind::Ctrl(CtrlOp::Stop));
        if let Some(job) = self.job.as_mut().filter(|j| j.call == call) {
            job.progressed = true;
            match (placed, payload) {
                (Some(r), Incoming::Bytes(payload)) => {
                    let off = (r.start - h.seq) as usize;
                    let end = (r.end - h.seq) as usize;
                    if end <= payload.len() {
                        job.place(transfer, r, &payload[off..end]);
                    }
                }
                (Some(r), Incoming::Landed(_)) => job.landed(r),
                (None, _) => {}
            }
        }
        if sender_released {
            self.finish_transfer(h.flow);
        }
    }

    // ---- timers and output ------------------------------------------------------------

    fn trace(&mut self, now: Time) {
        if !self.tracing || now < self.trace_at {
            return;
        }
        self.trace_at = now + 10_000_000_000;
        eprintln!("t={:.3}ms rank {} turns {} idle {} counters {:?}", now as f64 / 1e9, self.rank, self.turns, self.idle_turns, self.local);
        for (flow, s) in &self.slots {
            let rate = match &s.ep { Ep::DlcpSend(e) => e.rate_bps(), _ => 0 };
            eprintln!("t={:.3}ms rank {} flow {flow:#x} peer {} recv={} fin={} closed={} rate={:.2}G stats={:?} next={:?}", now as f64 / 1e9, self.rank, s.peer, s.ep.is_receiver(), s.finished, s.ep.is_closed(), rate as f64 / 1e9, s.ep.stats(), s.ep.poll_timeout().map(|t| t as f64 / 1e9));
        }
    }

    fn fire_timers(&mut self, now: Time) {
        self.trace(now);
        for slot in self.slots.values_mut() {
            let ep = slot.ep.endpoint();
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
        }
    }

    fn handle_events(&mut self) {
        let mut done = Vec::new();
        for (&flow, slot) in self.slots.iter_mut() {
            while let Some(ev) = slot.ep.poll_event() {
                match ev {
                    EndpointEvent::Delivered { .. } | EndpointEvent::SenderDone => done.push(flow),
                }
            }
        }
        for flow in done {
            self.finish_transfer(flow);
        }
        // Drop endpoints whose handshake is over.
        self.slots.retain(|_, s| !(s.finished && s.ep.is_closed()));
    }

    fn transmit(&mut self, now: Time) -> bool {
        let burst = self.cfg.transport.burst;
        let catch_up = self.cfg.transport.max_catch_up;
        let mut out = std::mem::take(&mut self.txq);
        let mut more = false;
        for (&flow, slot) in self.slots.iter_mut() {
            let n = match &mut slot.ep {
                Ep::DlcpSend(s) => pace_dlcp(s, &mut slot.pace, now, burst, catch_up, |p| out.push((flow, p))),
                ep => {
                    let ep = ep.endpoint();
                    let mut n = 0;
                    while n < TX_BUDGET {
                        let Some(p) = ep.poll_transmit(now + burst) else { break };
                        out.push((flow, p));
                        n += 1;
                    }
                    n
                }
            };
            more |= n == TX_BUDGET;
        }
        let sent = !out.is_empty();
        for (flow, p) in out.drain(..) {
            self.emit(flow, &p, now);
        }
        self.txq = out;
        more || sent
    }

    fn emit(&mut self, flow: u32, p: &Packet, now: Time) {
        let Some(slot) = self.slots.get(&flow) else { return };
        let (peer, transfer, call) = (slot.peer, slot.transfer, slot.call);
        let is_data = p.kind == PacketKind::Data;
        let header = Header {
            kind: p.kind,
            ect: p.ecn.ect,
            ce: p.ecn.ce,
            ece: p.ece,
            priority: p.priority.min(7),
            session: self.session,
            flow,
            payload_len: if is_data { p.len } else { 0 },
            seq: p.seq,
        };
        if matches!(p.kind, PacketKind::Ctrl(_) | PacketKind::CtrlAck(_)) {
            self.fence |= p.kind == PacketKind::Ctrl(CtrlOp::Stop);
            if let Some(l) = self.links[peer as usize].as_mut() {
                l.queue(&header);
            }
            return;
        }
        let mut head = [0u8; HEADER_LEN];
        header.encode(&mut head);
        let job = self.job.as_mut().filter(|j| j.call == call);
        let payload: &[u8] = match (is_data, job) {
            (false, _) => &[],
            (true, Some(job)) => {
                job.report.bytes_sent += p.len as u64;
                job.report.packets_sent += 1;
                job.payload(transfer, p.seq, p.len)
            }
            (true, None) => return, // the call is gone: nothing to send from
        };
        if self.inject.drop_now(peer) {
            return;
        }
        let tos = tos_byte(p.priority, p.ecn.ect);
        let delay = self.inject.get(peer).delay;
        if !delay.is_zero() {
            let datagram = [&head[..], payload].concat();
            let release = now + delay.as_nanos() as Time * 1000;
            self.inject.held[peer as usize].push_back(Delayed { release, tos, datagram });
            return;
        }
        let len = HEADER_LEN + payload.len();
        let payload = Payload(payload.as_ptr(), payload.len());
        let limit = self.udp.batch_limit(len);
        let i = match self.batches.iter().position(|b| b.peer == peer && b.tos == tos && !b.closed && len <= b.seg) {
            Some(i) => i,
            None => {
                // The key's closed batch leaves first, so datagrams keep their order.
                if let Some(i) = self.batches.iter().position(|b| b.peer == peer && b.tos == tos) {
                    let b = self.batches.swap_remove(i);
                    self.send_one(b);
                }
                let b = self.outbox.batch(peer, tos, len);
                self.batches.push(b);
                self.batches.len() - 1
            }
        };
        let b = &mut self.batches[i];
        b.heads.push(head);
        b.payloads.push(payload);
        // GSO: every datagram but the last has the full segment size.
        b.closed = len < b.seg || b.count() >= limit;
    }

    fn send_one(&mut self, b: Batch) {
        self.outbox.send(b);
    }

    fn flush_batches(&mut self) {
        let mut batches = std::mem::take(&mut self.batches);
        for b in batches.drain(..) {
            self.send_one(b);
        }
        self.batches = batches;
    }

    fn release_delayed(&mut self, now: Time) {
        for peer in 0..self.inject.held.len() {
            while self.inject.held[peer].front().is_some_and(|d| d.release <= now) {
                let d = self.inject.held[peer].pop_front().expect("front");
                self.outbox.send_owned(peer as u32, d.tos, &d.datagram);
            }
        }
    }

    fn flush_links(&mut self) {
        if std::mem::take(&mut self.fence) {
            self.flush_batches();
            self.outbox.wait_idle();
        }
        let mut lost = Vec::new();
        for (peer, link) in self.links.iter_mut().enumerate() {
            if let Some(l) = link.as_mut() {
                if let Err(e) = l.flush() {
                    lost.push((peer as u32, e));
                }
            }
        }
        for (peer, e) in lost {
            self.peer_down(peer, e);
        }
    }
}


#[cfg(test)]
mod tests {

    use gradwire_core::collective::{ring, CollectiveOptions, Op, Transfer};

    use super::*;
    use crate::Communicator;

    fn local_job(n: u32) -> Vec<Communicator> {
        local_job_with(n, EngineConfig::default().transport.mss)
    }

    fn local_job_with(n: u32, mss: u32) -> Vec<Communicator> {
        local_job_cfg(n, mss, false)
    }

    fn local_job_cfg(n: u32, mss: u32, send_thread: bool) -> Vec<Communicator> {
        let mut cfg = EngineConfig { peer_timeout: Duration::from_secs(10), send_thread, ..EngineConfig::default() };
        cfg.transport.mss = mss;
        Communicator::local_job(n, |_| cfg.clone(), crate::CollectiveConfig::default()).unwrap()
    }

    fn data(rank: u32, n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 * 0.37 + rank as f32 * 1.3).sin() * 10.0).round() / 4.0).collect()
    }

    #[test]
    fn ring_allreduce_is_exact_with_direct_all_gather_receives() {
        ring_allreduce_is_exact(EngineConfig::default().transport.mss);
    }

    #[test]
    fn ring_allreduce_is_exact_with_large_segments_read_in_place() {
        let comms = ring_allreduce_is_exact(65_000);
        // The all-gather's segments went straight into place.
        assert!(comms.iter().all(|c| c.counters().received_in_place > 0), "{:?}", comms.iter().map(|c| c.counters()).collect::<Vec<_>>());
    }

    #[test]
    fn ring_allreduce_is_exact_with_a_send_thread() {
        for mss in [1440, 65_000] {
            let comms = ring_allreduce_is_exact_cfg(mss, true);
            assert!(comms.iter().all(|c| c.counters().datagrams_sent > 0 && c.counters().send_drops == 0));
        }
    }

    fn ring_allreduce_is_exact(mss: u32) -> Vec<Communicator> {
        ring_allreduce_is_exact_cfg(mss, false)
    }

    fn ring_allreduce_is_exact_cfg(mss: u32, send_thread: bool) -> Vec<Communicator> {
        let mut last = Vec::new();
        for n in [2u32, 3, 4] {
            let elems = 300_001;
            let comms = local_job_cfg(n, mss, send_thread);
            let sched = Arc::new(ring(n, elems as u64 * 4, 4, &CollectiveOptions::default()));
            let out: Vec<Vec<f32>> = std::thread::scope(|s| {
                let hs: Vec<_> = comms
                    .iter()
                    .enumerate()
                    .map(|(r, c)| {
                        let sched = sched.clone();
                        s.spawn(move || {
                            let mut x = data(r as u32, elems);
                            c.run(sched, &mut x).unwrap();
                            x
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let all: Vec<Vec<f32>> = (0..n).map(|r| data(r, elems)).collect();
            let want: Vec<f32> = (0..elems).map(|i| all.iter().map(|d| d[i]).sum()).collect();
            for (r, x) in out.iter().enumerate() {
                assert!(x == &want, "{n} ranks: rank {r} differs from the sum");
            }
            last = comms;
        }
        last
    }

    #[test]
    fn data_of_a_call_posted_late_is_kept_not_resent() {
        // Rank 1 posts its receive 300 ms after rank 0 has sent everything: 4 MiB wait in
        // the kernel's buffer, unread, and go straight into place.
        let comms = late_copy(local_job(2), 1 << 20);
        assert_eq!(comms[1].counters().early, 0, "nothing was read before the call");
        assert_eq!(comms[1].counters().stale, 0);
    }

    #[test]
    fn data_of_a_call_posted_late_overflows_from_the_socket_into_the_early_store() {
        // A 1 MiB socket buffer: the 4 MiB are read into the early store as they come.
        let mut cfg = EngineConfig { peer_timeout: Duration::from_secs(10), socket_buffer_bytes: 1 << 20, ..EngineConfig::default() };
        cfg.transport.line_rate_bps = 2_000_000_000; // slow enough for the idle engine to keep up
        let comms = late_copy(Communicator::local_job(2, |_| cfg.clone(), crate::CollectiveConfig::default()).unwrap(), 1 << 20);
        assert!(comms[1].counters().early > 0, "the data was kept in the early store");
    }

    /// Rank 0 copies `elems` floats to rank 1, which posts its receive 300 ms late; the
    /// copy is exact and nothing is resent.
    fn late_copy(comms: Vec<Communicator>, elems: usize) -> Vec<Communicator> {
        let t = Transfer { src: 0, dst: 1, range: 0..elems as u64 * 4, op: Op::Copy, after: vec![], loss_bound: 0.0, priority: 1 };
        let sched = Arc::new(Schedule { name: "copy".into(), world: 2, bytes: elems as u64 * 4, elem_bytes: 4, transfers: vec![t] });
        let src = data(0, elems);
        let (sent, got) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                let mut x = src.clone();
                comms[0].run(sched.clone(), &mut x).unwrap()
            });
            let b = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                let mut x = vec![0f32; elems];
                comms[1].run(sched.clone(), &mut x).unwrap();
                x
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(got == src);
        assert_eq!(sent.retransmits, 0, "early data was kept, not resent");
        comms
    }
}
