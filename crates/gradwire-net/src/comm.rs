//! The public face of the runtime: a communicator per process.
//!
//! `Communicator::init` forms the job (rendezvous), binds the data socket and starts the
//! engine thread. Each collective call hands the engine a schedule and the caller's
//! buffer; the call's [`Pending`] resolves to a [`Report`] (or an error) when this rank's
//! part is done. Every rank must issue the same calls in the same order.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gradwire_core::collective::Schedule;
use gradwire_core::wire::HEADER_LEN;
use mio::Waker;

use crate::algorithms::{Algorithm, CallKind, CollectiveConfig, Schedules};
use crate::auth::{JobKey, TAG_LEN};
use crate::engine::{CallRequest, Command, Counters, Engine, EngineConfig, MAX_TRANSFERS};
use crate::error::NetError;
use crate::job::{Dtype, RawBuffer, Report};
use crate::line_rate::line_rate_to;
use crate::rendezvous::{rendezvous, RendezvousConfig};
use crate::udp::DataSocket;

/// The most a UDP datagram over IPv4 can carry.
const MAX_UDP_PAYLOAD: usize = 65_507;

/// Element types a collective can reduce.
pub trait Element: bytemuck::Pod {
    const DTYPE: Dtype;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
}

impl Element for f64 {
    const DTYPE: Dtype = Dtype::F64;
}

/// A call in flight. Dropping it without waiting is allowed only after the buffer's owner
/// stops caring about its contents; the buffer must stay alive until the call resolves
/// (the safe wrappers block, so this only concerns [`Communicator::submit`]).
pub struct Pending {
    rx: Receiver<Result<Report, NetError>>,
}

impl Pending {
    pub fn wait(self) -> Result<Report, NetError> {
        self.rx.recv().unwrap_or_else(|_| Err(NetError::Protocol("the runtime thread exited".into())))
    }

    /// `None` if not done within `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Report, NetError>> {
        match self.rx.recv_timeout(timeout) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(NetError::Protocol("the runtime thread exited".into()))),
        }
    }
}

/// The gate of a call submitted with [`Communicator::submit_kind_gated`]: the engine starts
/// the call (reads or writes its buffer) only once it is opened. Dropping it opens it, so
/// a caller that gives up never stalls the calls queued behind.
pub struct Gate {
    open: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl Gate {
    pub fn open(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            let _ = self.waker.wake();
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

pub struct Communicator {
    rank: u32,
    world: u32,
    session: u64,
    data_addr: SocketAddr,
    /// Payload bytes per datagram (the job's agreed segment size).
    mss: u32,
    /// DLCP's start rate, bit/s.
    line_rate_bps: u64,
    tx: Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Mutex<Counters>>,
    schedules: Schedules,
}

impl Communicator {
    /// Forms the job with `rdv` (see [`RendezvousConfig::from_env`]) and starts the engine.
    /// The segment size is the one the job agreed on (`rdv.mss`, or from the path MTU);
    /// it replaces `cfg.transport.mss`. A `cfg.transport.line_rate_bps` of 0 means the
    /// speed of the interface toward the peers ([`crate::line_rate`]).
    pub fn init(
        rdv: &RendezvousConfig,
        mut cfg: EngineConfig,
        collectives: CollectiveConfig,
    ) -> Result<Self, NetError> {
        collectives.check(rdv.world_size)?;
        let udp =
            DataSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0), cfg.socket_buffer_bytes, cfg.gso)
                .map_err(|e| NetError::io("binding the UDP data socket", e))?;
        let port = udp.local_addr().map_err(|e| NetError::io("reading the UDP socket address", e))?.port();
        let mesh = rendezvous(rdv, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))?;
        let addrs: Vec<SocketAddr> = mesh.peers.iter().map(|p| p.udp_addr).collect();
        cfg.transport.mss = mesh.mss;
        if rdv.authenticated {
            cfg.auth = Some(JobKey::derive(&rdv.token, mesh.session));
            // The tag rides after the payload: keep the datagram (and so the packet) the
            // size the job agreed on.
            cfg.transport.mss = mesh.mss - TAG_LEN as u32;
        }
        if cfg.transport.line_rate_bps == 0 {
            let next = addrs[((mesh.rank + 1) % rdv.world_size) as usize];
            cfg.transport.line_rate_bps = line_rate_to(next).0;
        }
        Self::start(mesh.rank, mesh.session, udp, mesh.control, addrs, cfg, collectives)
    }

    /// Starts the engine on an already formed job (tests and embedders).
    pub fn start(
        rank: u32,
        session: u64,
        udp: DataSocket,
        control: Vec<Option<TcpStream>>,
        addrs: Vec<SocketAddr>,
        cfg: EngineConfig,
        collectives: CollectiveConfig,
    ) -> Result<Self, NetError> {
        let world = addrs.len() as u32;
        let tag = if cfg.auth.is_some() { TAG_LEN } else { 0 };
        if cfg.transport.mss as usize + HEADER_LEN + tag > MAX_UDP_PAYLOAD {
            return Err(NetError::Config(format!(
                "mss {} leaves no room for the {HEADER_LEN}-byte header{} in a {MAX_UDP_PAYLOAD}-byte UDP datagram",
                cfg.transport.mss,
                if tag > 0 { " and the 16-byte tag" } else { "" }
            )));
        }
        crate::endpoint::parse_transport(cfg.transport.kind.name()).map_err(NetError::Config)?;
        cfg.transport.builder().map_err(|e| NetError::Config(format!("transport {e}")))?;
        let schedules = Schedules::new(world, collectives)?;
        let data_addr = udp.local_addr().map_err(|e| NetError::io("reading the UDP socket address", e))?;
        let (mss, line_rate_bps) = (cfg.transport.mss, cfg.transport.line_rate_bps);
        let (tx, rx) = channel();
        let counters = Arc::new(Mutex::new(Counters::default()));
        let (engine, waker) = Engine::new(rank, session, cfg, udp, control, addrs, rx, counters.clone())
            .map_err(|e| NetError::io("starting the runtime", e))?;
        let thread = std::thread::Builder::new()
            .name(format!("gradwire-rank{rank}"))
            .spawn(move || engine.run())
            .map_err(|e| NetError::io("spawning the runtime thread", e))?;
        Ok(Communicator {
            rank,
            world,
            session,
            data_addr,
            mss,
            line_rate_bps,
            tx,
            waker,
            thread: Some(thread),
            counters,
            schedules,
        })
    }

    /// `n` ranks of one job inside this process, meshed over loopback without a
    /// rendezvous (tests, benchmarks, single-machine embedding). `cfg(rank)` configures
    /// each rank's engine.
    pub fn local_job(
        n: u32,
        cfg: impl Fn(u32) -> EngineConfig,
        collectives: CollectiveConfig,
    ) -> Result<Vec<Self>, NetError> {
        fn io(what: &'static str) -> impl Fn(std::io::Error) -> NetError {
            move |e| NetError::io(format!("local job: {what}"), e)
        }
        let listeners =
            (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>().map_err(io("binding"))?;
        let mut control: Vec<Vec<Option<TcpStream>>> = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for i in 0..n as usize {
            for j in (i + 1)..n as usize {
                let c =
                    TcpStream::connect(listeners[i].local_addr().map_err(io("address"))?).map_err(io("connecting"))?;
                let (s, _) = listeners[i].accept().map_err(io("accepting"))?;
                control[i][j] = Some(s);
                control[j][i] = Some(c);
            }
        }
        let mut socks = Vec::with_capacity(n as usize);
        for r in 0..n {
            let c = cfg(r);
            socks.push(
                DataSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0), c.socket_buffer_bytes, c.gso)
                    .map_err(io("binding UDP"))?,
            );
        }
        let addrs = socks.iter().map(|s| s.local_addr()).collect::<Result<Vec<_>, _>>().map_err(io("address"))?;
        // Only needs to differ between jobs on this machine: clock and pid.
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let session = (nanos ^ (std::process::id() as u64) << 32) | 1;
        socks
            .into_iter()
            .zip(control)
            .enumerate()
            .map(|(r, (udp, ctl))| {
                Self::start(r as u32, session, udp, ctl, addrs.clone(), cfg(r as u32), collectives.clone())
            })
            .collect()
    }

    /// Runs `f(rank, comm)` for every communicator of a [`Communicator::local_job`], each
    /// in its own thread (a collective returns only once every rank has called it), and
    /// returns the results in rank order. A panic in any rank's `f` is raised here.
    pub fn on_each<R: Send>(comms: &[Communicator], f: impl Fn(u32, &Communicator) -> R + Sync) -> Vec<R> {
        std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .enumerate()
                .map(|(r, c)| {
                    let f = &f;
                    s.spawn(move || f(r as u32, c))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn world_size(&self) -> u32 {
        self.world
    }

    /// Where this rank receives datagrams.
    pub fn data_addr(&self) -> SocketAddr {
        self.data_addr
    }

    /// Payload bytes per datagram, the same on every rank of the job.
    pub fn mss(&self) -> u32 {
        self.mss
    }

    /// The rate DLCP senders start at (bit/s): configured, or the interface's speed.
    pub fn line_rate_bps(&self) -> u64 {
        self.line_rate_bps
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn counters(&self) -> Counters {
        self.counters.lock().map(|c| *c).unwrap_or_default()
    }

    /// Queues a collective on raw memory.
    ///
    /// # Safety
    /// `buf` must stay valid, and nobody else may read or write it, until the returned
    /// [`Pending`] has resolved.
    pub unsafe fn submit(&self, schedule: Arc<Schedule>, buf: RawBuffer, dtype: Dtype) -> Result<Pending, NetError> {
        self.submit_request(None, schedule, buf, dtype, None)
    }

    /// # Safety
    /// As [`Communicator::submit`].
    unsafe fn submit_request(
        &self,
        kind: Option<CallKind>,
        schedule: Arc<Schedule>,
        buf: RawBuffer,
        dtype: Dtype,
        gate: Option<Arc<AtomicBool>>,
    ) -> Result<Pending, NetError> {
        check(&schedule, self.world, buf.len, dtype)?;
        let (reply, rx) = channel();
        self.tx
            .send(Command::Run(CallRequest { kind, schedule, buf, dtype, reply, gate }))
            .map_err(|_| NetError::Protocol("the runtime thread exited".into()))?;
        self.waker.wake().map_err(|e| NetError::io("waking the runtime", e))?;
        Ok(Pending { rx })
    }

    /// The schedule a call of `kind` on `bytes` bytes of `elem_bytes`-byte elements runs.
    pub fn schedule(&self, kind: CallKind, bytes: u64, elem_bytes: u32) -> Result<Arc<Schedule>, NetError> {
        self.schedules.get(kind, bytes, elem_bytes)
    }

    pub fn collective_config(&self) -> &CollectiveConfig {
        self.schedules.config()
    }

    /// Queues a call of `kind` on raw memory (see [`Communicator::submit`] for the contract).
    ///
    /// # Safety
    /// As [`Communicator::submit`].
    pub unsafe fn submit_kind(&self, kind: CallKind, buf: RawBuffer, dtype: Dtype) -> Result<Pending, NetError> {
        let s = self.schedule(kind, buf.len as u64, dtype.size())?;
        self.submit_request(Some(kind), s, buf, dtype, None)
    }

    /// Queues a call of `kind` that starts only once the returned [`Gate`] is opened:
    /// the call takes its place in the order now (every rank's calls run in issue order)
    /// while its buffer is still being filled (a GPU tensor copied to host memory in the
    /// background). Calls submitted after it wait for it, as always.
    ///
    /// # Safety
    /// As [`Communicator::submit`]; the engine does not touch `buf` before the gate opens.
    pub unsafe fn submit_kind_gated(
        &self,
        kind: CallKind,
        buf: RawBuffer,
        dtype: Dtype,
    ) -> Result<(Pending, Gate), NetError> {
        let s = self.schedule(kind, buf.len as u64, dtype.size())?;
        let open = Arc::new(AtomicBool::new(false));
        let pending = self.submit_request(Some(kind), s, buf, dtype, Some(open.clone()))?;
        Ok((pending, Gate { open, waker: self.waker.clone() }))
    }

    /// Sums `data` over all ranks, in place. With `loss_bound > 0` the reduce half may
    /// lose up to that share of each transfer (zeros, reported as bubbles); the result
    /// is still broadcast reliably, so all ranks end with the same bits.
    pub fn allreduce<T: Element>(
        &self,
        data: &mut [T],
        algorithm: Algorithm,
        loss_bound: f64,
    ) -> Result<Report, NetError> {
        self.call(CallKind::Allreduce { algorithm, loss_bound }, data)
    }

    /// Copies `root`'s `data` to every rank.
    pub fn broadcast<T: Element>(&self, data: &mut [T], root: u32) -> Result<Report, NetError> {
        self.call(CallKind::Broadcast { root }, data)
    }

    pub fn call<T: Element>(&self, kind: CallKind, data: &mut [T]) -> Result<Report, NetError> {
        let buf = RawBuffer::from_slice(data);
        // SAFETY: `data` is borrowed mutably until `wait` returns.
        unsafe { self.submit_kind(kind, buf, T::DTYPE)? }.wait()
    }

    /// Runs `schedule` on `data` and waits for this rank's part to finish.
    pub fn run<T: Element>(&self, schedule: Arc<Schedule>, data: &mut [T]) -> Result<Report, NetError> {
        let buf = RawBuffer::from_slice(data);
        // SAFETY: `data` is borrowed mutably until `wait` returns.
        unsafe { self.submit(schedule, buf, T::DTYPE)? }.wait()
    }
}

/// The schedule fits the world and the buffer.
fn check(s: &Schedule, world: u32, len: usize, dtype: Dtype) -> Result<(), NetError> {
    if s.world != world {
        return Err(NetError::Config(format!("the schedule is for {} ranks but the job has {world}", s.world)));
    }
    if s.bytes != len as u64 {
        return Err(NetError::Config(format!("the schedule covers {} bytes but the buffer has {len}", s.bytes)));
    }
    if s.elem_bytes != dtype.size() {
        return Err(NetError::Config(format!(
            "the schedule's elements are {} bytes, the buffer's {}",
            s.elem_bytes,
            dtype.size()
        )));
    }
    if s.transfers.len() >= MAX_TRANSFERS {
        return Err(NetError::Config(format!(
            "a schedule of {} transfers exceeds the limit {MAX_TRANSFERS}",
            s.transfers.len()
        )));
    }
    s.validate().map_err(|e| NetError::Config(format!("invalid schedule: {e}")))
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
