"""GPU tensors on the "gradwire" backend: staged through pinned host memory.

The runtime moves host memory, so a CUDA tensor travels as a copy in a pinned host buffer
(taken from a pool and reused across calls). The copies run on a side stream of the
tensor's device, ordered after the work the caller's current stream had queued when the
collective was issued, and `Work.wait()` makes the caller's current stream wait for the
copies back (the host thread does not wait for them), as c10d asks of a GPU backend.

Float SUM/AVG allreduce (DDP's and FSDP's gradients) is pipelined: the tensor is cut into
chunks of `chunk_bytes`, one runtime call per chunk, all submitted at once so that every
rank issues the same calls in the same order, each *gated*: the engine starts chunk k's call
only once chunk k's device-to-host copy is done (an opener thread waits for each copy's
event and opens its gate), so chunk k is on the wire while chunk k+1 is still being copied;
as each call completes, its chunk is copied back (host-to-device) while the next chunk is on
the wire. Every other call stages its tensors whole: copied to host (the issuing thread
waits for that copy), run as on CPU, copied back.

`Copies` is the one place that touches CUDA; the pipeline is written against it, so its
scheduling is tested on CPU with a stand-in (`tests/python/test_torch_cuda_staging.py`), and
`benchmarks/gpu_check/run.sh` checks the real thing on a GPU.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

#: Bytes per pipelined chunk (GRADWIRE_CUDA_CHUNK_BYTES overrides).
DEFAULT_CHUNK_BYTES = 4 << 20


def chunk_bytes_from_env() -> int:
    raw = os.environ.get("GRADWIRE_CUDA_CHUNK_BYTES", "")
    if not raw:
        return DEFAULT_CHUNK_BYTES
    try:
        v = int(raw)
    except ValueError:
        raise ValueError(f"GRADWIRE_CUDA_CHUNK_BYTES={raw!r}: expected a number of bytes") from None
    if v < 4096:
        raise ValueError(f"GRADWIRE_CUDA_CHUNK_BYTES={v}: expected at least 4096 bytes")
    return v


def chunk_ranges(numel: int, elem_size: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """(first element, element count) of each chunk: whole elements, at most `chunk_bytes`
    each (at least one element), covering `numel` elements in order."""
    if numel <= 0:
        return []
    per = max(1, chunk_bytes // elem_size)
    return [(lo, min(per, numel - lo)) for lo in range(0, numel, per)]


class Copies:
    """The copies between a CUDA device and host memory, on a side stream of the device."""

    def __init__(self, device: torch.device):
        self.device = device
        self.side = torch.cuda.Stream(device)

    def mark(self) -> Any:
        """An event at the end of the work the caller's current stream has queued."""
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.device))
        return ev

    def to_host(self, dst: torch.Tensor, src: torch.Tensor, after: Any) -> Any:
        """Queues dst <- src (device to pinned host) after `after`; its completion event."""
        with torch.cuda.stream(self.side):
            self.side.wait_event(after)
            src.record_stream(self.side)  # the caller may free it; the copy still reads it
            dst.copy_(src, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.side)
        return ev

    def to_device(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        """Queues dst <- src (pinned host to device) on the side stream; its event."""
        with torch.cuda.stream(self.side):
            dst.record_stream(self.side)
            dst.copy_(src, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.side)
        return ev

    def on_side(self, fn: Callable[[], Any]) -> Any:
        with torch.cuda.stream(self.side):
            return fn()

    def end(self) -> Any:
        """An event after everything queued on the side stream so far."""
        ev = torch.cuda.Event()
        ev.record(self.side)
        return ev

    @staticmethod
    def wait_host(ev: Any) -> None:
        ev.synchronize()

    def current_waits(self, ev: Any) -> None:
        """The caller's current stream waits for `ev` (the host does not)."""
        torch.cuda.current_stream(self.device).wait_event(ev)

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def future(self) -> torch.futures.Future:
        return torch.futures.Future(devices=[self.device])

    def resolve(self, fut: torch.futures.Future, value: Any) -> None:
        # A CUDA-aware future records the setter's current streams: the side stream, after
        # the copies back; whoever reads the value has its own current stream wait for them.
        with torch.cuda.stream(self.side):
            fut.set_result(value)


class PinnedPool:
    """Pinned host buffers by size class (powers of two from 64 KiB), reused once the copies
    that last used them are done (their event), at most `keep` per class."""

    def __init__(self, alloc: Callable[[int], torch.Tensor], keep: int = 4):
        self._alloc = alloc
        self._keep = keep
        self._free: dict[int, list[tuple[torch.Tensor, Any]]] = {}
        self._lock = threading.Lock()
        self.allocated = 0  # buffers made (tests check reuse)

    @staticmethod
    def size_class(nbytes: int) -> int:
        return max(1 << 16, 1 << max(0, nbytes - 1).bit_length())

    def take(self, nbytes: int) -> torch.Tensor:
        c = self.size_class(nbytes)
        with self._lock:
            free = self._free.get(c, [])
            for i, (buf, ev) in enumerate(free):
                if ev is None or ev.query():
                    del free[i]
                    return buf
            self.allocated += 1
        return self._alloc(c)

    def give(self, buf: torch.Tensor, ready: Any) -> None:
        with self._lock:
            free = self._free.setdefault(buf.numel(), [])
            if len(free) < self._keep:
                free.append((buf, ready))


class Opener:
    """One thread per group that opens gated calls' gates in issue order, each once its
    copy to host is done."""

    def __init__(self, wait_host: Callable[[Any], None]):
        self._wait_host = wait_host
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, ev: Any, work: Any) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gradwire-cuda-open", daemon=True)
                self._thread.start()
        self._queue.put((ev, work))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            ev, work = item
            try:
                self._wait_host(ev)
            finally:
                work.open()  # never leave the engine waiting: a failed copy fails the call's data, not the job

    def shutdown(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join(5.0)
                self._thread = None


class Chunk:
    """One pipelined chunk's runtime call: once waited for, its host chunk is post-processed
    (AVG's division) and copied back to the device; `wait` is the runtime Work's."""

    def __init__(self, work: Any, back: Callable[[], None]):
        self._work = work
        self._back = back
        self._done = False

    def wait(self, timeout: float | None = None) -> Any:
        rep = self._work.wait(timeout)
        if not self._done:
            self._done = True
            self._back()
        return rep


class Stager:
    """A group's GPU staging: its copies, pinned pool and opener."""

    def __init__(self, copies: Any, chunk_bytes: int | None = None):
        self.copies = copies
        self.chunk_bytes = chunk_bytes or chunk_bytes_from_env()
        self.pool = PinnedPool(copies.pinned)
        self.opener = Opener(copies.wait_host)

    def host_view(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A pinned buffer from the pool and its view as `t`'s dtype and shape (contiguous)."""
        nbytes = t.numel() * t.element_size()
        buf = self.pool.take(nbytes)
        return buf, buf[:nbytes].view(t.dtype).view(t.shape)

    def pipelined(
        self,
        t: torch.Tensor,
        submit: Callable[[torch.Tensor], Any],
        post: Callable[[torch.Tensor], None] | None = None,
    ) -> tuple[list[Chunk], Callable[[], Any]]:
        """Runs `submit(host_chunk)` (a gated runtime call) per chunk of `t`, pipelined
        as the module says; `post(host_chunk)` runs on each chunk before it is copied back.
        Returns the chunks' calls (to wait for in order) and what finishes: it returns the
        event the caller's stream must wait for."""
        c = self.copies
        copied = not t.is_contiguous()
        flat = (t.contiguous() if copied else t).view(-1)
        buf, host = self.host_view(flat)
        start = c.mark()
        ranges = chunk_ranges(flat.numel(), flat.element_size(), self.chunk_bytes)
        # Every chunk's call first, in order (the order every rank issues), then the copies.
        works = [submit(host[lo : lo + n]) for lo, n in ranges]
        for (lo, n), w in zip(ranges, works):
            self.opener.put(c.to_host(host[lo : lo + n], flat[lo : lo + n], start), w)

        def back(lo: int, n: int) -> Callable[[], None]:
            def run() -> None:
                if post is not None:
                    post(host[lo : lo + n])
                c.to_device(flat[lo : lo + n], host[lo : lo + n])

            return run

        chunks = [Chunk(w, back(lo, n)) for (lo, n), w in zip(ranges, works)]

        def finish() -> Any:
            if copied:
                c.on_side(lambda: t.copy_(flat.view(t.shape)))
            end = c.end()
            self.pool.give(buf, end)
            return end

        return chunks, finish

    def stage(self, args: Sequence[Any], outputs: Sequence[int]) -> tuple[list[Any], Callable[[], Any]]:
        """`args` with every CUDA tensor (in lists too) replaced by a pinned host copy,
        the copies done when this returns; then what copies the tensors of `args[i]` for i
        in `outputs` back and returns the event the caller's stream must wait for."""
        c = self.copies
        start = c.mark()
        pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

        host_too = getattr(c, "stages_host", False)

        def mirror(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and (host_too or x.device.type != "cpu"):
                buf, host = self.host_view(x)
                c.to_host(host, x, start)
                pairs.append((x, host, buf))
                return host
            if isinstance(x, list):
                return [mirror(y) for y in x]
            return x

        host_args = [mirror(a) for a in args]
        c.wait_host(c.end())
        out_ids = {id(x) for i in outputs for x in _tensors(args[i])}

        def finish() -> Any:
            for dev, host, _ in pairs:
                if id(dev) in out_ids:
                    c.to_device(dev, host)
            end = c.end()
            for _, _, buf in pairs:
                self.pool.give(buf, end)
            return end

        return host_args, finish

    def shutdown(self) -> None:
        self.opener.shutdown()


class HostCopies:
    """`Copies` with host memory standing in for the device: plain copies, no streams,
    no events. The backend uses it for CPU tensors under GRADWIRE_STAGE_CPU_FOR_TESTS=1,
    so the staged paths (pipelined chunks behind their gates included) run against the
    real runtime, and Gloo's results, on a machine without a GPU."""

    device = torch.device("cpu")
    stages_host = True  # host tensors are the ones staged

    def mark(self) -> None:
        return None

    def to_host(self, dst: torch.Tensor, src: torch.Tensor, after: Any) -> None:
        dst.copy_(src)

    def to_device(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    def on_side(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def end(self) -> None:
        return None

    @staticmethod
    def wait_host(ev: Any) -> None:
        pass

    def current_waits(self, ev: Any) -> None:
        pass

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def future(self) -> torch.futures.Future:
        return torch.futures.Future()

    def resolve(self, fut: torch.futures.Future, value: Any) -> None:
        fut.set_result(value)


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list):
        return [t for y in x for t in _tensors(y)]
    return []


def has_device_tensor(args: Sequence[Any]) -> bool:
    for a in args:  # per call on every collective: kept cheap (is_cpu, no device objects)
        if isinstance(a, torch.Tensor):
            if not a.is_cpu:
                return True
        elif isinstance(a, list) and a:
            if any(not t.is_cpu for t in _tensors(a)):
                return True
    return False
