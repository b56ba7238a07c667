//! The runtime's event loop: one thread per process owning the sockets and endpoints.
//!
//! Each turn: take new calls, read datagrams and control frames, fire due timers, let
//! every endpoint transmit (data batched per peer and TOS into GSO sends, control onto
//! the peer's TCP link), act on endpoint events (apply a delivered receive, start the
//! sends it unblocks, finish the call), then sleep in `epoll` until the next deadline.
//!
//! This file holds the state and the loop; `calls.rs` a call's lifecycle, `input.rs` the
//! reads and dispatch, `output.rs` the batching of what endpoints send (they pace themselves;
//! one NIC clock holds the senders together to the line rate), `early.rs` the datagrams of
//! calls not posted yet, `trace.rs` `GRADWIRE_TRACE`.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gradwire_core::collective::{Schedule, TransferId};
use gradwire_core::packet::{CtrlOp, Ecn, Packet, PacketKind};
use gradwire_core::tensor::importance_mask;
use gradwire_core::time::Time;
use gradwire_core::transport::{Builder, EndpointEvent, HostState, Transfer};
use gradwire_core::wire::{Header, HEADER_LEN};
use mio::{Interest, Poll, Token, Waker};

use crate::algorithms::CallKind;
use crate::auth::JobKey;
use crate::control::{LinkAuth, LinkDown, LinkFrame, PeerLink};
use crate::descriptor::CallDesc;
use crate::endpoint::{Ep, TransportConfig};
use crate::error::NetError;
use crate::inject::{Delayed, Impairment, Injector};
use crate::job::{Dtype, Job, RawBuffer, Reply};
use crate::tx::{Batch, Outbox, Payload};
use crate::udp::{tos_byte, DataSocket, RecvBufs};
use output::Nic;

mod calls;
mod early;
mod input;
mod output;
#[cfg(test)]
mod tests;
mod trace;
mod wait;

use early::EarlyStore;
use input::Incoming;
use trace::Tracer;
use wait::Waiter;

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
/// A disarmed data socket ([`wait`]) is read at least this often, and at most this
/// rarely, whatever the pacing burst (the interval otherwise).
const RX_INTERVAL_MIN: Time = 20_000_000; // 20 µs
const RX_INTERVAL_MAX: Time = 1_000_000_000; // 1 ms

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
    /// Tag every datagram and control frame with this job key, and drop what does not
    /// verify ([`crate::auth`]); `None`: no tags (the default).
    pub auth: Option<JobKey>,
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
            auth: None,
        }
    }
}

pub struct CallRequest {
    /// What the caller asked for (`None`: a schedule of its own), for the descriptor.
    pub kind: Option<CallKind>,
    pub schedule: Arc<Schedule>,
    pub buf: RawBuffer,
    pub dtype: Dtype,
    pub reply: Reply,
    /// Closed: the call (and every call behind it) waits, its buffer untouched, until the
    /// caller opens it (a GPU tensor's copy into the buffer is still running).
    pub gate: Option<Arc<AtomicBool>>,
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
    /// Datagrams whose authentication tag did not verify (authenticated jobs only).
    pub auth_failures: u64,
    /// Datagrams from an address no peer registered at rendezvous, or from a rank that is
    /// not the flow's peer: dropped unread (forged, or a stray of another program).
    pub wrong_source: u64,
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
}

pub struct Engine {
    rank: u32,
    session: u64,
    cfg: EngineConfig,
    /// Builds every transfer's endpoints (the core's, from `cfg.transport`).
    transports: Builder,
    /// What this rank's transfers share (the core's `HostState`: LTP's measured RTprop per
    /// peer, ...). One per engine: every transfer it drives has this rank at one end, and
    /// only the engine thread touches it, so it needs no lock.
    host: HostState,
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
    /// Rank of each peer's registered data address: datagrams from anywhere else are dropped.
    peer_ranks: HashMap<SocketAddr, u32>,
    /// Calls started so far (the number of the next call's descriptor).
    calls_started: u64,
    /// Per peer: descriptors of calls this rank has not started yet, in call order.
    peer_descs: Vec<VecDeque<CallDesc>>,
    /// The engine's own frames read this turn, with their link (kept to reuse the allocation).
    descs_in: Vec<(u32, LinkFrame)>,
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
    /// Packets of one turn, kept to reuse the allocation.
    txq: Vec<(u32, Packet)>,
    tracer: Tracer,
    /// Datagrams of calls not posted yet.
    early: EarlyStore,
    /// The NIC every DLCP sender's data leaves through (see [`Nic`]).
    nic: Nic,
    /// Sleeps, and when the data socket is read (see [`wait`]).
    wait: Waiter,
    /// Per peer: its control link became readable since it was last read to the end.
    link_ready: Vec<bool>,
}

fn flow_id(call: u16, t: TransferId) -> u32 {
    ((call & CALL_MASK) as u32) << TRANSFER_BITS | t
}

fn call_of(flow: u32) -> u16 {
    (flow >> TRANSFER_BITS) as u16
}

/// `call` is one this rank has not reached yet (within half the 12-bit space).
fn is_future(call: u16, next: u16) -> bool {
    call.wrapping_sub(next) & CALL_MASK < CALL_MASK.div_ceil(2)
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
        let transports = cfg
            .transport
            .builder()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("transport {e}")))?;
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        // The data socket is registered by the `Waiter`, one-shot (receive moderation). An
        // ACK-clocked transport's reads are not held back: LTP's window (2 BtlBw x RTprop)
        // covers the path's round trip, not reads once per 250 µs burst (4 ranks, 20 µs
        // RTT, 16 cores: 4.0x its twin moderated, 1.84x before moderation).
        let rx_interval = if cfg.transport.kind.spec().ack_clocked() {
            0
        } else {
            cfg.transport.burst.clamp(RX_INTERVAL_MIN, RX_INTERVAL_MAX)
        };
        let wait = Waiter::new(poll.as_raw_fd(), udp.raw_fd(), UDP.0 as u64, rx_interval)?;
        let mut wrapped = Vec::with_capacity(links.len());
        for (i, l) in links.into_iter().enumerate() {
            let link = match l {
                Some(s) => {
                    let mut link = PeerLink::new(s)?;
                    if let Some(key) = &cfg.auth {
                        link.authenticate(LinkAuth {
                            key: key.clone(),
                            me: rank,
                            peer: i as u32,
                            sent: 0,
                            received: 0,
                        });
                    }
                    poll.registry().register(
                        link.mio(),
                        Token(PEER_BASE + i),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    Some(link)
                }
                None => None,
            };
            wrapped.push(link);
        }
        let world = addrs.len();
        let peer_ranks =
            addrs.iter().enumerate().filter(|&(r, _)| r as u32 != rank).map(|(r, &a)| (a, r as u32)).collect();
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
            transports,
            host: HostState::new(),
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
            peer_ranks,
            calls_started: 0,
            peer_descs: vec![VecDeque::new(); world],
            descs_in: Vec::new(),
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
            txq: Vec::new(),
            tracer: Tracer::from_env(),
            early: EarlyStore::new(cfg.early_buffer_bytes),
            nic: Nic::default(),
            wait,
            link_ready: vec![true; world],
            cfg,
        };
        Ok((engine, waker))
    }

    fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time * 1000
    }

    /// Runs until `Command::Shutdown` (or the handle is dropped) and the last transfers
    /// have closed or `linger` has passed.
    pub fn run(mut self) {
        Waiter::tighten_timer_slack();
        loop {
            let busy = self.turn();
            self.tracer.count_turn(busy);
            self.publish_counters();
            if let Some(since) = self.shutting_down {
                // Stay until our receivers have their CONFIRMs (so every peer has read our
                // FINISH) and every control frame is written, or `linger` passes.
                let lingering = self.slots.values().any(|s| !s.ep.is_closed());
                let unflushed = self.links.iter().flatten().any(|l| l.has_pending());
                if (!lingering && !unflushed && self.job.is_none() && self.queue.is_empty())
                    || since.elapsed() > self.cfg.linger
                {
                    self.flush_links();
                    self.close_calls();
                    return;
                }
            }
            let timeout = if busy { Some(Duration::ZERO) } else { self.sleep_for() };
            let ready = &mut self.link_ready;
            let woke = self.wait.wait(timeout, |token| {
                // a control link's event (readable, writable, hung up): read it next turn
                if let Some(r) = (token as usize).checked_sub(PEER_BASE).and_then(|i| ready.get_mut(i)) {
                    *r = true;
                }
            });
            if let Err(e) = woke {
                self.fail_all(NetError::io("epoll", e));
                self.close_calls();
                return;
            }
        }
    }

    /// Before the thread exits: the send thread has sent every batch that points into a
    /// call's buffer, and then each call still here gets its reply (an error), so no
    /// caller releases a buffer this runtime may still read.
    fn close_calls(&mut self) {
        self.outbox.wait_idle();
        self.fail_all(NetError::Protocol("the communicator was closed before the call finished".into()));
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
        if started {
            self.wait.read_soon(self.now());
        }
        // Bounded, so timers and control keep running while a fast sender fills the socket.
        // Read when the socket woke the engine or its next read is due (see `wait`).
        let mut busy = false;
        if self.wait.rx_due(self.now()) {
            if self.should_read() {
                busy = self.receive_datagrams(RECV_TURN_BYTES);
            } else {
                self.wait.skipped_read(self.now());
            }
        }
        self.read_control();
        let now = self.now();
        self.fire_timers(now);
        busy |= self.transmit(now);
        self.release_delayed(now);
        self.flush_batches();
        self.flush_links();
        busy |= self.handle_events();
        self.check_stall();
        if self.job.is_none() && self.start_next_call() {
            self.wait.read_soon(self.now());
            busy = true;
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
        !between_calls || self.udp.receive_queue().is_none_or(|(held, limit)| held >= limit / 2)
    }

    fn sleep_for(&self) -> Option<Duration> {
        let now = self.now();
        // A sender waits for the NIC's share too (see `transmit`): at most one packet's time.
        let nic_free = self.nic.free_at(self.cfg.transport.burst);
        let mut next: Option<Time> = self
            .slots
            .values()
            .filter_map(|s| {
                let t = s.ep.poll_timeout()?;
                Some(if s.ep.is_receiver() { t } else { t.max(nic_free) })
            })
            .min();
        if let Some(r) = self.inject.next_release() {
            next = Some(next.map_or(r, |n| n.min(r)));
        }
        // A disarmed data socket's read rides on a wake due within half an interval of it
        // (`Waiter::rx_due` reads that early): one wake per pacing burst, not two.
        if let Some(r) = self.wait.deadline() {
            if next.is_none_or(|n| n > r + self.wait.interval / 2) {
                next = Some(next.map_or(r, |n| n.min(r)));
            }
        }
        // Wake at least every 100 ms to check for stalls and shutdown.
        let cap = Duration::from_millis(100);
        match next {
            None => Some(cap),
            Some(t) if t <= now => Some(Duration::ZERO),
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

    fn fire_timers(&mut self, now: Time) {
        self.trace(now);
        for slot in self.slots.values_mut() {
            let ep = slot.ep.endpoint();
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout_with(now, &mut self.host);
            }
        }
    }

    /// True if any endpoint had an event (what follows from it may send at once).
    fn handle_events(&mut self) -> bool {
        let mut any = false;
        let mut done = Vec::new();
        for (&flow, slot) in self.slots.iter_mut() {
            while let Some(ev) = slot.ep.poll_event() {
                any = true;
                match ev {
                    EndpointEvent::Delivered { .. } | EndpointEvent::SenderDone => done.push(flow),
                    // every live endpoint's deadline is asked each turn
                    EndpointEvent::Wake { .. } => {}
                    // before `finish_transfer` below starts what depends on this transfer
                    EndpointEvent::HandOn => slot.ep.endpoint().hand_on(&mut self.host),
                }
            }
        }
        // a flow whose view of the host changed (none of the runtime's transports makes
        // one: DLCP runs without pair state here) reads it again
        while let Some(flow) = self.host.take_stale() {
            if let Some(slot) = self.slots.get_mut(&flow) {
                slot.ep.endpoint().hand_on(&mut self.host);
            }
        }
        for flow in done {
            self.finish_transfer(flow);
        }
        // Drop endpoints whose handshake is over.
        self.slots.retain(|_, s| !(s.finished && s.ep.is_closed()));
        any
    }
}
