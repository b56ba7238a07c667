"""The GPU staging of the "gradwire" backend (gradwire/torch/cuda.py) without a GPU: the
chunking, the pinned pool, and the pipeline's schedule against a stand-in for CUDA whose
copies run on a thread of their own (as a side stream's would) and a stand-in for the
runtime's gated calls; then the staged paths end to end on the real runtime against Gloo,
host memory standing in for the device. The GPU itself: benchmarks/gpu_check/run.sh."""

from __future__ import annotations

import json
import queue
import threading
import time

import pytest

torch = pytest.importorskip("torch")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed has no Gloo backend here", allow_module_level=True)

from gradwire.torch import cuda  # noqa: E402


def test_chunks_cover_the_tensor_in_whole_elements():
    assert cuda.chunk_ranges(0, 4, 4096) == []
    assert cuda.chunk_ranges(10, 4, 4096) == [(0, 10)]
    assert cuda.chunk_ranges(2500, 4, 4096) == [(0, 1024), (1024, 1024), (2048, 452)]
    assert cuda.chunk_ranges(3, 8, 4) == [(0, 1), (1, 1), (2, 1)]  # at least one element
    for n, es, cb in [(1, 2, 4096), (100_003, 4, 65536), (77, 8, 100)]:
        r = cuda.chunk_ranges(n, es, cb)
        assert sum(k for _, k in r) == n and all(lo == sum(k for _, k in r[:i]) for i, (lo, _) in enumerate(r))
        assert all(k * es <= max(cb, es) for _, k in r)


class Event:
    def __init__(self) -> None:
        self._e = threading.Event()
        self.at: float | None = None

    def set(self) -> None:
        self.at = time.monotonic()
        self._e.set()

    def query(self) -> bool:
        return self._e.is_set()

    def synchronize(self) -> None:
        self._e.wait(10)


class FakeCopies:
    """CUDA's side stream as a thread: copies queued in order, each `delay` long, each
    with an event; the log records when things happened. Host tensors stand for device
    ones."""

    stages_host = True

    def __init__(self, delay: float, log: list):
        self.delay, self.log = delay, log
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, ev = self._q.get()
            fn()
            ev.set()

    def _queue(self, fn, what) -> Event:
        ev = Event()

        def run():
            time.sleep(self.delay)
            fn()
            self.log.append((time.monotonic(), what))

        self._q.put((run, ev))
        return ev

    def mark(self) -> Event:
        ev = Event()
        ev.set()
        return ev

    def to_host(self, dst, src, after):
        lo = dst.data_ptr()
        return self._queue(lambda: dst.copy_(src), ("d2h", lo))

    def to_device(self, dst, src):
        return self._queue(lambda: dst.copy_(src), ("h2d", src.data_ptr()))  # by host chunk

    def on_side(self, fn):
        return self._queue(fn, ("side",))

    def end(self) -> Event:
        return self._queue(lambda: None, ("end",))

    @staticmethod
    def wait_host(ev) -> None:
        ev.synchronize()

    def pinned(self, nbytes):
        return torch.empty(nbytes, dtype=torch.uint8)


class FakeCall:
    """A gated runtime call: nothing happens before open(); then, `delay` later, its host
    chunk is doubled (a 2-rank sum of equal inputs) and it completes."""

    def __init__(self, host, delay: float, log: list, order: list):
        self.host, self.delay, self.log = host, delay, log
        self.done = threading.Event()
        order.append(self)
        self.opened_at: float | None = None

    def open(self) -> None:
        self.opened_at = time.monotonic()
        self.log.append((self.opened_at, ("open", self.host.data_ptr())))
        FakeNet.put(self)

    def wait(self, timeout=None):
        assert self.done.wait(10)
        return "report"


class FakeNet:
    """The runtime: one call at a time, in the order the gates open (they open in issue
    order)."""

    q: queue.SimpleQueue = queue.SimpleQueue()
    started = False

    @classmethod
    def put(cls, call: FakeCall) -> None:
        if not cls.started:
            cls.started = True
            threading.Thread(target=cls._run, daemon=True).start()
        cls.q.put(call)

    @classmethod
    def _run(cls) -> None:
        while True:
            c = cls.q.get()
            time.sleep(c.delay)
            c.host.mul_(2)
            c.log.append((time.monotonic(), ("done", c.host.data_ptr())))
            c.done.set()


def test_the_pipeline_overlaps_copies_with_the_wire_and_keeps_the_call_order():
    log: list = []
    calls: list[FakeCall] = []
    copies = FakeCopies(0.02, log)
    st = cuda.Stager(copies, chunk_bytes=4096)
    t = torch.arange(4 * 1024, dtype=torch.float32)  # 4 chunks of 1024 floats
    want = t * 2 / 4

    def submit(h):
        log.append((time.monotonic(), ("submit", h.data_ptr())))
        return FakeCall(h, 0.05, log, calls)

    chunks, finish = st.pipelined(t, submit, post=lambda h: h.div_(4))  # AVG over 4 ranks
    # Every chunk's call is in the order before any copy is done or any gate open.
    assert [e[1][0] for e in log[:4]] == ["submit"] * 4 and len(calls) == 4
    for c in chunks:  # what the backend's Work does, in order
        c.wait()
    end = finish()
    end.synchronize()
    assert torch.equal(t, want)
    when = {e[1]: e[0] for e in log if len(e[1]) == 2}
    ptrs = [c.host.data_ptr() for c in calls]
    for p in ptrs:
        assert when[("open", p)] >= when[("d2h", p)], "a gate opened before its chunk was on the host"
        assert when[("done", p)] > when[("open", p)]
        assert when[("h2d", p)] > when[("done", p)]
    # Overlap: chunk k+1 was copied while chunk k was on the wire, and chunk k was copied
    # back while chunk k+1 was on the wire.
    assert any(when[("d2h", ptrs[k + 1])] < when[("done", ptrs[k])] for k in range(3)), log
    assert any(when[("h2d", ptrs[k])] < when[("done", ptrs[k + 1])] for k in range(3)), log
    # The pipeline beats copy-then-send-then-copy: 4 x (20 + 50 + 20) ms in sequence.
    span = max(when.values()) - min(e[0] for e in log)
    assert span < 4 * 0.09, span
    st.shutdown()


def test_pinned_buffers_are_reused_once_their_copies_are_done():
    made = []
    pool = cuda.PinnedPool(lambda n: made.append(n) or torch.empty(n, dtype=torch.uint8))
    a = pool.take(100_000)
    assert a.numel() == 131072 and pool.size_class(65536) == 65536 and pool.size_class(1) == 65536
    busy = Event()
    pool.give(a, busy)
    b = pool.take(100_000)  # a's copies still run: a new buffer
    assert b.data_ptr() != a.data_ptr()
    busy.set()
    assert pool.take(120_000).data_ptr() == a.data_ptr()  # same class, copies done: reused
    pool.give(b, None)
    assert pool.take(70_000).data_ptr() == b.data_ptr()
    assert pool.allocated == 2


def test_staging_whole_tensors_copies_back_only_the_outputs():
    log: list = []
    st = cuda.Stager(FakeCopies(0.0, log), chunk_bytes=4096)
    out, inp = torch.zeros(3), torch.ones(3)
    (h_out, h_inp), back = st.stage([out, inp], outputs=[0])
    assert torch.equal(h_inp, inp) and h_out.data_ptr() != out.data_ptr()
    h_out.fill_(7)
    h_inp.fill_(9)
    back().synchronize()
    assert torch.equal(out, torch.full((3,), 7.0)) and torch.equal(inp, torch.ones(3))


def test_the_staged_paths_on_the_runtime_match_gloo(tmp_path, monkeypatch):
    """Every collective, FSDP and DDP (the hooks included) with each tensor staged as a GPU
    tensor would be (pipelined 4 KiB chunks behind their gates, whole-tensor staging for the
    rest), host memory standing in for the device (GRADWIRE_STAGE_CPU_FOR_TESTS)."""
    from test_torch_backend import FSDP_KINDS, ranks, torchrun

    monkeypatch.setenv("GRADWIRE_STAGE_CPU_FOR_TESTS", "1")
    monkeypatch.setenv("GRADWIRE_CUDA_CHUNK_BYTES", "4096")
    (tmp_path / "c").mkdir()
    torchrun(2, "torch_backend_worker.py", str(tmp_path / "c"))
    for r in ranks(tmp_path / "c", 2):
        assert r["failures"] == [] and len(r["done"]) > 40 and r["async_ok"] is True
    (tmp_path / "f").mkdir()
    torchrun(2, "torch_fsdp_worker.py", json.dumps({"out": str(tmp_path / "f"), "steps": 5, "kinds": FSDP_KINDS}))
    for r in ranks(tmp_path / "f", 2):
        for kind in FSDP_KINDS:
            assert "error" not in r[f"{kind} gradwire"], r[f"{kind} gradwire"]
            torch.testing.assert_close(r[f"{kind} gradwire"]["losses"], r[f"{kind} gloo"]["losses"], rtol=1e-6, atol=0)
