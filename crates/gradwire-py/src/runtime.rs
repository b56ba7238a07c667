//! The socket runtime for Python: a `Communicator` class over `gradwire-net`.
//!
//! Buffers travel zero-copy through the buffer protocol: the call keeps a `PyBuffer` (and
//! with it the exporting object) alive until it resolves, and the GIL is released while
//! the engine works and while Python waits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gradwire_core::collective::RackMap;
use gradwire_net::endpoint::{parse_transport, runtime_transports};
use gradwire_net::inject::Impairment;
use gradwire_net::rendezvous::{MAX_MSS, MIN_MSS};
use gradwire_net::{
    Algorithm, CallKind, CollectiveConfig, Communicator, Dtype, EngineConfig, Gate, NetError, Pending, RawBuffer,
    RendezvousConfig, Report,
};
use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

create_exception!(_core, CommError, PyRuntimeError, "A collective or the job failed; `kind` says how.");
create_exception!(_core, PeerTimeout, CommError, "Nothing came from a peer within the timeout (dead or stalled peer).");
create_exception!(_core, PeerLost, CommError, "A peer's control connection closed mid-job.");
create_exception!(_core, Refused, CommError, "The job refused this process (token, world size or rank).");
create_exception!(
    _core,
    CallMismatch,
    CommError,
    "Ranks made different calls (size, dtype, operation, algorithm, root, loss bound or transport)."
);

fn to_py(e: NetError) -> PyErr {
    let msg = e.to_string();
    match e {
        NetError::Config(_) => PyValueError::new_err(msg),
        NetError::Timeout { .. } => PeerTimeout::new_err(msg),
        NetError::PeerLost { .. } => PeerLost::new_err(msg),
        NetError::Refused(_) => Refused::new_err(msg),
        NetError::CallMismatch { .. } => CallMismatch::new_err(msg),
        NetError::Protocol(_) | NetError::Io { .. } => CommError::new_err(msg),
    }
}

/// A float as Python prints it (1e+300, not 301 digits).
fn num(v: f64) -> String {
    if v != 0.0 && !(1e-4..1e16).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Seconds from Python as a `Duration`: `None` for infinity (no limit). Refuses NaN and
/// negative values by `name`; values past what a deadline can hold are no limit too.
fn seconds(name: &str, v: f64) -> PyResult<Option<Duration>> {
    if v.is_nan() || v < 0.0 {
        return Err(PyValueError::new_err(format!("{name} must be a non-negative number of seconds, got {}", num(v))));
    }
    // About 31 years: a deadline that far never comes, and `Instant + Duration` cannot
    // overflow below it.
    const FOREVER: f64 = 1e9;
    Ok((v < FOREVER).then(|| Duration::from_secs_f64(v)))
}

/// A positive number of seconds for a setting that must end (infinity: about 31 years).
fn positive_seconds(name: &str, v: f64) -> PyResult<Duration> {
    if v.is_nan() || v <= 0.0 {
        return Err(PyValueError::new_err(format!("{name} must be a positive number of seconds, got {}", num(v))));
    }
    Ok(seconds(name, v)?.unwrap_or(Duration::from_secs(1_000_000_000)))
}

/// The native byte-order prefixes of a buffer format string (PEP 3118): none, '@', '=',
/// and the explicit one of this machine.
fn native_order(format: &str) -> bool {
    match format.as_bytes().first() {
        Some(b'<') => cfg!(target_endian = "little"),
        Some(b'>' | b'!') => cfg!(target_endian = "big"),
        _ => true,
    }
}

/// A caller's buffer, held (and its exporter kept alive) for the call's duration; only
/// its `Drop`, which releases the buffer, matters.
#[allow(dead_code)]
enum Held {
    F32(PyBuffer<f32>),
    F64(PyBuffer<f64>),
    /// Memory the caller named by address (a torch tensor's `data_ptr()`): the object
    /// that owns it is kept alive, and nothing about it is changed (no buffer export, so
    /// no lasting flag on a tensor's storage).
    Object(Py<PyAny>),
}

impl Held {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<(Held, RawBuffer, Dtype)> {
        // pyo3 matches the element type but not its byte order: a big-endian float32
        // buffer would be summed as native floats.
        let order = |format: &std::ffi::CStr| -> PyResult<()> {
            let f = format.to_string_lossy();
            if native_order(&f) {
                Ok(())
            } else {
                Err(PyValueError::new_err(format!(
                    "the buffer's byte order is not this machine's (format {f:?}); collectives sum native floats: \
                     convert it first (numpy: x.astype(x.dtype.newbyteorder('=')))"
                )))
            }
        };
        let (held, ptr, len, readonly, contiguous, dtype) = if let Ok(b) = PyBuffer::<f32>::get(obj) {
            order(b.format())?;
            let t = (b.buf_ptr() as *mut u8, b.len_bytes(), b.readonly(), b.is_c_contiguous());
            (Held::F32(b), t.0, t.1, t.2, t.3, Dtype::F32)
        } else if let Ok(b) = PyBuffer::<f64>::get(obj) {
            order(b.format())?;
            let t = (b.buf_ptr() as *mut u8, b.len_bytes(), b.readonly(), b.is_c_contiguous());
            (Held::F64(b), t.0, t.1, t.2, t.3, Dtype::F64)
        } else {
            let zero_d = obj.getattr("ndim").and_then(|n| n.extract::<usize>()).is_ok_and(|n| n == 0);
            return Err(PyValueError::new_err(if zero_d {
                "the buffer is 0-d (a scalar): pass a 1-element view (numpy: x.reshape(1)); gradwire.Communicator does this itself"
            } else {
                "expected a buffer of float32 or float64 (a numpy array or a CPU torch tensor)"
            }));
        };
        if readonly {
            return Err(PyValueError::new_err("the buffer is read-only; collectives write their result in place"));
        }
        if !contiguous {
            return Err(PyValueError::new_err("the buffer is not C-contiguous"));
        }
        Ok((held, RawBuffer { ptr, len }, dtype))
    }
}

fn report_dict<'py>(py: Python<'py>, r: &Report) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("algorithm", &r.algorithm)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("bytes_sent", r.bytes_sent)?;
    d.set_item("bytes_received", r.bytes_received)?;
    d.set_item("bytes_lost", r.bytes_lost)?;
    d.set_item("retransmits", r.retransmits)?;
    d.set_item("packets_sent", r.packets_sent)?;
    d.set_item("transfers_sent", r.transfers_sent)?;
    d.set_item("transfers_received", r.transfers_received)?;
    d.set_item("min_delivered_fraction", r.min_delivered_fraction)?;
    let bubbles = PyList::empty(py);
    for b in &r.bubbles {
        bubbles.append((b.src, b.offset, b.len))?;
    }
    d.set_item("bubbles", bubbles)?;
    Ok(d)
}

/// Calls whose handle was dropped before they resolved, with the buffers they still use.
/// Reaped (on the Python side, holding the GIL, which releasing a buffer needs) once their
/// call has resolved; the engine thread never touches Python objects.
type Orphans = Arc<Mutex<Vec<(Pending, Held)>>>;

fn reap(orphans: &Orphans) {
    if let Ok(mut o) = orphans.lock() {
        o.retain(|(p, _)| p.wait_timeout(Duration::ZERO).is_none());
    }
}

/// A call in flight; `wait` resolves it.
///
/// The call owns a reference to its buffer until the engine has replied: `held` is
/// released only after the reply, and a handle dropped earlier hands its call and buffer
/// to the communicator's orphans instead of releasing it (see docs/runtime.md, "Buffers").
#[pyclass(name = "PendingCall", module = "gradwire._core")]
pub struct PyPending {
    pending: Mutex<Option<Pending>>,
    result: Mutex<Option<Result<Report, PyErr>>>,
    held: Mutex<Option<Held>>,
    orphans: Orphans,
    /// A gated call's gate (`submit_ptr(..., gated=True)`); dropped (so opened) with the handle.
    gate: Mutex<Option<Gate>>,
}

impl PyPending {
    /// A submitted call's handle, holding its buffer until the engine replies.
    fn new(pending: Pending, held: Held, orphans: Orphans, gate: Option<Gate>) -> PyPending {
        PyPending {
            pending: Mutex::new(Some(pending)),
            result: Mutex::new(None),
            held: Mutex::new(Some(held)),
            orphans,
            gate: Mutex::new(gate),
        }
    }

    fn resolve(&self, r: Result<Report, NetError>) {
        if let Ok(mut g) = self.result.lock() {
            *g = Some(r.map_err(to_py));
        }
        // The engine is done with the buffer: let the exporter go.
        if let Ok(mut h) = self.held.lock() {
            h.take();
        }
    }
}

impl Drop for PyPending {
    fn drop(&mut self) {
        let pending = self.pending.get_mut().ok().and_then(Option::take);
        let held = self.held.get_mut().ok().and_then(Option::take);
        if let (Some(p), Some(h)) = (pending, held) {
            // No reply yet: the engine may be reading or writing the buffer, so it must
            // outlive this handle.
            if p.wait_timeout(Duration::ZERO).is_none() {
                match self.orphans.lock() {
                    Ok(mut o) => o.push((p, h)),
                    // A poisoned lock: leaking the buffer is safe, releasing it is not.
                    Err(_) => std::mem::forget(h),
                }
            }
        }
    }
}

#[pymethods]
impl PyPending {
    /// Waits (GIL released; Ctrl-C still works) and returns the report dict; `None` if
    /// `timeout` seconds pass first. Raises the call's error.
    #[pyo3(signature = (timeout=None))]
    fn wait<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let limit = match timeout {
            Some(t) => seconds("timeout", t)?,
            None => None,
        };
        let deadline = limit.and_then(|d| std::time::Instant::now().checked_add(d));
        loop {
            let mut guard = self.pending.lock().map_err(|_| CommError::new_err("a waiter panicked"))?;
            let Some(p) = guard.take() else { break };
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(std::time::Instant::now()).min(Duration::from_millis(100)),
                None => Duration::from_millis(100),
            };
            // `Pending` is Send but not Sync: move it into the GIL-free section and back.
            let (p, got) = py.allow_threads(move || {
                let r = p.wait_timeout(slice);
                (p, r)
            });
            *guard = Some(p);
            match got {
                Some(r) => {
                    *guard = None;
                    self.resolve(r);
                    break;
                }
                None if deadline.is_some_and(|d| std::time::Instant::now() >= d) => return Ok(None),
                None => {
                    drop(guard);
                    py.check_signals()?;
                }
            }
        }
        match self.result.lock().map_err(|_| CommError::new_err("a waiter panicked"))?.as_ref() {
            Some(Ok(r)) => Ok(Some(report_dict(py, r)?)),
            Some(Err(e)) => Err(e.clone_ref(py)),
            None => Err(CommError::new_err("the call never ran")),
        }
    }

    /// Opens a gated call's gate: the engine may start it (its buffer is ready). A no-op
    /// for a call submitted without a gate, or opened already.
    fn open(&self) {
        if let Ok(g) = self.gate.lock() {
            if let Some(g) = g.as_ref() {
                g.open();
            }
        }
    }

    /// True once the call has resolved (successfully or not); never blocks.
    fn done(&self) -> bool {
        let Ok(mut guard) = self.pending.lock() else { return true };
        let Some(p) = guard.as_ref() else { return true };
        match p.wait_timeout(Duration::ZERO) {
            Some(r) => {
                *guard = None;
                self.resolve(r);
                true
            }
            None => false,
        }
    }
}

#[pyclass(name = "Communicator", module = "gradwire._core")]
pub struct PyCommunicator {
    /// Dropped before `orphans` (field order): the engine thread is joined before the
    /// buffers of orphaned calls are released.
    inner: Mutex<Option<Arc<Communicator>>>,
    orphans: Orphans,
    /// The thread that made the first call, and its Python name; `None` until then, or
    /// for ever with `any_thread` (see [`Self::check_thread`]).
    owner: Mutex<Option<(std::thread::ThreadId, String)>>,
    any_thread: bool,
}

/// `ptr .. ptr + nbytes` lies in the memory of `owner`, a CPU torch tensor's storage: a
/// Python program cannot name any other address. Read through `torch.Tensor`'s own methods,
/// so a subclass cannot answer for them.
fn check_owned(py: Python<'_>, owner: &Bound<'_, PyAny>, ptr: usize, nbytes: usize) -> PyResult<()> {
    let refuse = |why: String| Err(PyValueError::new_err(format!("submit_ptr: {why}")));
    let tensor = py.import("torch")?.getattr("Tensor")?;
    if !owner.is_instance(&tensor)? {
        return refuse(format!("the owner must be a torch tensor, not {}", owner.get_type().name()?));
    }
    let device: String = tensor.getattr("device")?.call_method1("__get__", (owner,))?.getattr("type")?.extract()?;
    if device != "cpu" {
        return refuse(format!("the owner is on {device}; the runtime reads and writes host memory"));
    }
    let storage = tensor.getattr("untyped_storage")?.call1((owner,))?;
    let start: usize = storage.call_method0("data_ptr")?.extract()?;
    let len: usize = storage.call_method0("nbytes")?.extract()?;
    if ptr < start || ptr.checked_add(nbytes).is_none_or(|end| end > start.saturating_add(len)) {
        return refuse(format!(
            "{nbytes} bytes at {ptr:#x} are not inside the owner's storage ({len} bytes at {start:#x})"
        ));
    }
    Ok(())
}

fn python_thread_name(py: Python<'_>) -> String {
    py.import("threading")
        .and_then(|t| t.call_method0("current_thread"))
        .and_then(|t| t.getattr("name"))
        .and_then(|n| n.extract())
        .unwrap_or_else(|_| "?".into())
}

impl PyCommunicator {
    /// Ranks match calls by the order they are issued in. Two threads' calls interleave
    /// differently on each rank, and calls of equal shape would then swap data silently,
    /// so a communicator takes calls from the thread that made its first one, unless it
    /// was made with `any_thread` (the caller orders calls alike on every rank, as
    /// torch.distributed's contract asks).
    fn check_thread(&self, py: Python<'_>) -> PyResult<()> {
        if self.any_thread {
            return Ok(());
        }
        let me = std::thread::current().id();
        let mut owner = self.owner.lock().map_err(|_| CommError::new_err("a caller panicked"))?;
        match owner.as_ref() {
            None => *owner = Some((me, python_thread_name(py))),
            Some((id, _)) if *id == me => {}
            Some((_, name)) => {
                return Err(PyRuntimeError::new_err(format!(
                    "this communicator takes calls from thread {name:?}, which made its first call; a call from \
                     thread {:?} is refused: ranks match calls by the order they are issued in, and two threads' \
                     calls interleave differently on each rank (calls of equal shape would swap data). Issue \
                     every call from one thread, or create the communicator with any_thread=True if your \
                     program issues its calls in the same order on every rank",
                    python_thread_name(py)
                )))
            }
        }
        Ok(())
    }

    fn comm(&self) -> PyResult<Arc<Communicator>> {
        self.inner.lock().ok().and_then(|g| g.clone()).ok_or_else(|| CommError::new_err("the communicator is closed"))
    }
}

fn parse_kind(kind: &str, algorithm: &str, loss_bound: f64, root: u32) -> PyResult<CallKind> {
    Ok(match kind {
        "allreduce" => CallKind::Allreduce {
            algorithm: algorithm.parse::<Algorithm>().map_err(|e| to_py(NetError::Config(e)))?,
            loss_bound,
        },
        "broadcast" => CallKind::Broadcast { root },
        "ps_push" => CallKind::PsPush { loss_bound },
        "ps_pull" => CallKind::PsPull { loss_bound },
        _ => return Err(PyValueError::new_err(format!("unknown call {kind:?}"))),
    })
}

#[pymethods]
impl PyCommunicator {
    /// Joins the job (blocking, GIL released) and starts the runtime thread.
    #[new]
    #[pyo3(signature = (master_addr, master_port, rank, world_size, *, token=String::new(), timeout=30.0, peer_timeout=30.0,
        transport="dlcp", mss=None, line_rate_gbps=None, topology=None, ps_servers=None, tree_arity=2, pipeline_chunks=4,
        impair=None, gso=true, send_thread=false, authenticate=false, retx_quiet_us=0.0, pace_burst_us=None,
        any_thread=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        master_addr: String,
        master_port: u16,
        rank: u32,
        world_size: u32,
        token: String,
        timeout: f64,
        peer_timeout: f64,
        transport: &str,
        mss: Option<u32>,
        line_rate_gbps: Option<f64>,
        topology: Option<String>,
        ps_servers: Option<u32>,
        tree_arity: u32,
        pipeline_chunks: u32,
        impair: Option<Vec<(f64, f64)>>,
        gso: bool,
        send_thread: bool,
        authenticate: bool,
        retx_quiet_us: f64,
        pace_burst_us: Option<f64>,
        any_thread: bool,
    ) -> PyResult<Self> {
        let mut rdv = RendezvousConfig::new(master_addr, master_port, rank, world_size);
        rdv.token = token;
        rdv.authenticated = authenticate;
        rdv.timeout = positive_seconds("timeout", timeout)?;
        let mut cfg = EngineConfig {
            peer_timeout: positive_seconds("peer_timeout", peer_timeout)?,
            gso,
            send_thread,
            ..EngineConfig::default()
        };
        cfg.transport.kind = parse_transport(transport).map_err(PyValueError::new_err)?;
        // Times in the engine are u64 picoseconds: bounded here so none overflows there.
        if !(0.0..=1e7).contains(&retx_quiet_us) {
            return Err(PyValueError::new_err(format!(
                "retx_quiet_us must be in [0, 1e7] (10 s), got {retx_quiet_us}"
            )));
        }
        cfg.transport.retx_quiet = (retx_quiet_us * 1e6) as u64;
        // How far ahead of real time a turn may send: longer bursts, fewer wakeups (and no
        // spinning between packets at low line rates), a deeper queue at the NIC.
        if let Some(us) = pace_burst_us {
            if !(us > 0.0 && us <= 1e6) {
                return Err(PyValueError::new_err(format!("pace_burst_us must be in (0, 1e6] (1 s), got {}", num(us))));
            }
            cfg.transport.burst = (us * 1e6) as u64;
            cfg.transport.max_catch_up = cfg.transport.max_catch_up.max(cfg.transport.burst);
        }
        // A datagram is mss + 32 header bytes and must fit UDP's 65507-byte payload;
        // segments carry the most whole elements that fit, so any mss works. None: the
        // job takes it from the path MTU.
        if let Some(m) = mss.filter(|m| !(MIN_MSS..=MAX_MSS).contains(m)) {
            return Err(PyValueError::new_err(format!(
                "mss {m} is outside {MIN_MSS}..={MAX_MSS} (1440 for 1500-byte packets, 8940 for 9000-byte jumbo)"
            )));
        }
        rdv.mss = mss;
        // None: the speed of the interface toward the peers (100 Gbit/s on loopback).
        cfg.transport.line_rate_bps = match line_rate_gbps {
            None => 0,
            Some(g) if g > 0.0 && g <= 1e5 => ((g * 1e9) as u64).max(1),
            Some(g) => {
                return Err(PyValueError::new_err(format!("line_rate_gbps must be in (0, 1e5] Gbit/s, got {}", num(g))))
            }
        };
        if let Some(imp) = impair {
            if imp.len() != world_size as usize {
                return Err(PyValueError::new_err(format!(
                    "impair has {} entries; expected one (loss, delay_s) per rank ({world_size})",
                    imp.len()
                )));
            }
            cfg.impairments = imp
                .into_iter()
                .map(|(loss, delay)| {
                    if !((0.0..=1.0).contains(&loss) && (0.0..=3600.0).contains(&delay)) {
                        return Err(PyValueError::new_err(format!(
                            "impair entry ({}, {}): loss must be in [0, 1], delay in [0, 3600] s",
                            num(loss),
                            num(delay)
                        )));
                    }
                    Ok(Impairment { loss, delay: Duration::from_secs_f64(delay) })
                })
                .collect::<PyResult<_>>()?;
        }
        let rack_map = match topology {
            Some(t) => Some(RackMap::parse(&t).map_err(|e| PyValueError::new_err(format!("topology {t:?}: {e}")))?),
            None => None,
        };
        let coll =
            CollectiveConfig { rack_map, ps_servers, tree_arity, pipeline_chunks, ..CollectiveConfig::default() };
        let comm = py.allow_threads(|| Communicator::init(&rdv, cfg, coll)).map_err(to_py)?;
        Ok(PyCommunicator {
            inner: Mutex::new(Some(Arc::new(comm))),
            orphans: Orphans::default(),
            owner: Mutex::new(None),
            any_thread,
        })
    }

    #[getter]
    fn rank(&self) -> PyResult<u32> {
        Ok(self.comm()?.rank())
    }

    #[getter]
    fn world_size(&self) -> PyResult<u32> {
        Ok(self.comm()?.world_size())
    }

    /// Payload bytes per datagram, agreed by the job (explicit or from the path MTU).
    #[getter]
    fn mss(&self) -> PyResult<u32> {
        Ok(self.comm()?.mss())
    }

    /// DLCP's start rate in Gbit/s: given, or the interface's speed.
    #[getter]
    fn line_rate_gbps(&self) -> PyResult<f64> {
        Ok(self.comm()?.line_rate_bps() as f64 / 1e9)
    }

    #[getter]
    fn session(&self) -> PyResult<u64> {
        Ok(self.comm()?.session())
    }

    /// Queues a call on `buffer` (float32/float64, writable, C-contiguous) and returns
    /// a `PendingCall`. `kind`: "allreduce", "broadcast", "ps_push", "ps_pull".
    #[pyo3(signature = (kind, buffer, algorithm="ring", loss_bound=0.0, root=0))]
    fn submit(
        &self,
        py: Python<'_>,
        kind: &str,
        buffer: &Bound<'_, PyAny>,
        algorithm: &str,
        loss_bound: f64,
        root: u32,
    ) -> PyResult<PyPending> {
        let call = parse_kind(kind, algorithm, loss_bound, root)?;
        let comm = self.comm()?;
        self.check_thread(py)?;
        reap(&self.orphans);
        let (held, raw, dtype) = Held::get(buffer)?;
        // SAFETY: `held` pins the buffer and keeps its exporter alive until the engine has
        // replied: `PyPending` releases it only after the reply, and a handle dropped
        // earlier moves it to `orphans`, released after the reply or once the engine
        // thread has been joined (`close`, or this communicator's drop).
        let pending = unsafe { comm.submit_kind(call, raw, dtype) }.map_err(to_py)?;
        Ok(PyPending::new(pending, held, self.orphans.clone(), None))
    }

    /// Queues a call on `nbytes` bytes at address `ptr`, memory owned by `owner` (a CPU
    /// torch tensor's `data_ptr()`, which `gradwire.Communicator` passes instead of a
    /// buffer export: `tensor.numpy()` would mark the tensor's storage non-resizable for
    /// good, and FSDP frees and regrows its flat parameters' storage). `dtype`: "f32" or
    /// "f64". `owner` is held until the call resolves, as `submit` holds its buffer; the
    /// caller promises the memory stays allocated, unresized and untouched until then.
    /// With `gated`, the call takes its place in the order now but starts only once the
    /// handle's `open()` is called (or the handle is dropped): the memory may be written
    /// until then (a GPU tensor's copy to host running on a side stream).
    #[pyo3(signature = (kind, owner, ptr, nbytes, dtype, algorithm="ring", loss_bound=0.0, root=0, gated=false))]
    #[allow(clippy::too_many_arguments)]
    fn submit_ptr(
        &self,
        py: Python<'_>,
        kind: &str,
        owner: &Bound<'_, PyAny>,
        ptr: usize,
        nbytes: usize,
        dtype: &str,
        algorithm: &str,
        loss_bound: f64,
        root: u32,
        gated: bool,
    ) -> PyResult<PyPending> {
        let call = parse_kind(kind, algorithm, loss_bound, root)?;
        let dtype = match dtype {
            "f32" => Dtype::F32,
            "f64" => Dtype::F64,
            d => return Err(PyValueError::new_err(format!("dtype {d:?}: expected \"f32\" or \"f64\""))),
        };
        let align = dtype.size() as usize;
        // An empty tensor may have no address; the call's own checks refuse it by size.
        let ptr = if nbytes == 0 { align } else { ptr };
        if ptr == 0 || !ptr.is_multiple_of(align) || !nbytes.is_multiple_of(align) || nbytes > isize::MAX as usize {
            return Err(PyValueError::new_err(format!(
                "address {ptr:#x} with {nbytes} bytes is not an aligned buffer of {align}-byte elements"
            )));
        }
        if nbytes > 0 {
            check_owned(py, owner, ptr, nbytes)?;
        }
        let comm = self.comm()?;
        self.check_thread(py)?;
        reap(&self.orphans);
        let held = Held::Object(owner.clone().unbind());
        let raw = RawBuffer { ptr: ptr as *mut u8, len: nbytes };
        // SAFETY: the caller vouches for the memory (see above); `held` keeps its owner
        // alive exactly as `submit` keeps a buffer's exporter alive.
        let (pending, gate) = if gated {
            let (p, g) = unsafe { comm.submit_kind_gated(call, raw, dtype) }.map_err(to_py)?;
            (p, Some(g))
        } else {
            (unsafe { comm.submit_kind(call, raw, dtype) }.map_err(to_py)?, None)
        };
        Ok(PyPending::new(pending, held, self.orphans.clone(), gate))
    }

    /// Runtime-wide counters: malformed, foreign_session, wrong_source, stale, early, ...
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.comm()?.counters();
        let d = PyDict::new(py);
        d.set_item("malformed", c.malformed)?;
        d.set_item("foreign_session", c.foreign_session)?;
        d.set_item("wrong_source", c.wrong_source)?;
        d.set_item("auth_failures", c.auth_failures)?;
        d.set_item("stale", c.stale)?;
        d.set_item("early", c.early)?;
        d.set_item("injected_drops", c.injected_drops)?;
        d.set_item("send_drops", c.send_drops)?;
        d.set_item("datagrams_sent", c.datagrams_sent)?;
        d.set_item("datagrams_received", c.datagrams_received)?;
        d.set_item("received_in_place", c.received_in_place)?;
        Ok(d)
    }

    /// Where this rank receives data, "ip:port".
    fn data_addr(&self) -> PyResult<String> {
        Ok(self.comm()?.data_addr().to_string())
    }

    /// Stops the runtime after its last transfers' handshakes (GIL released).
    fn close(&self, py: Python<'_>) {
        let c = self.inner.lock().ok().and_then(|mut g| g.take());
        py.allow_threads(move || drop(c));
        // The engine thread has exited (unless another thread is still inside a call on
        // this communicator): every orphan has its reply, or will never get one.
        reap(&self.orphans);
    }
}

/// The allreduce algorithms the runtime knows, by name (Python's `runtime.ALGORITHMS`).
#[pyfunction]
fn algorithms() -> Vec<&'static str> {
    Algorithm::ALL.iter().map(|a| a.name()).collect()
}

/// The transports the runtime runs, by name (Python's `runtime.TRANSPORTS`).
#[pyfunction]
fn transports() -> Vec<&'static str> {
    runtime_transports().iter().map(|k| k.name()).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(transports, m)?)?;
    m.add("CommError", m.py().get_type::<CommError>())?;
    m.add("PeerTimeout", m.py().get_type::<PeerTimeout>())?;
    m.add("PeerLost", m.py().get_type::<PeerLost>())?;
    m.add("Refused", m.py().get_type::<Refused>())?;
    m.add("CallMismatch", m.py().get_type::<CallMismatch>())?;
    m.add_class::<PyCommunicator>()?;
    m.add_class::<PyPending>()?;
    Ok(())
}
