"""What a Python program can hand the runtime: each bad value gets a clear error naming it,
never a panic (pyo3's PanicException), a crash or a wrong result. One rank, in process."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import gradwire
from gradwire import _core
from gradwire.launch import free_port


@pytest.fixture(scope="module")
def comm():
    c = gradwire.Communicator("127.0.0.1", free_port(), 0, 1, token="inputs")
    yield c
    c.close()


def no_panic(call):
    """Runs `call`; returns what it raised (None if nothing), failing on a panic."""
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - PanicException is a BaseException
        assert type(e).__name__ != "PanicException", f"panic: {e}"
        return e
    return None


@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_non_native_byte_order_is_refused_in_python_and_in_rust(comm, dtype):
    """Issue 26.3: a big-endian float32 [1, 2, 3] on two ranks summed to [4.25e37, -0.0, ...]."""
    other = (">" if np.little_endian else "<") + dtype
    x = np.array([1, 2, 3], other)
    with pytest.raises(TypeError, match="byte order is not this machine's"):
        comm.allreduce(x)
    with pytest.raises(ValueError, match="byte order is not this machine's"):
        comm._c.submit("allreduce", x)  # the Rust buffer check, without the Python one
    native = np.array([1, 2, 3], "=" + dtype)
    comm.allreduce(native)
    assert native.tolist() == [1, 2, 3]
    comm.allreduce(x.astype(x.dtype.newbyteorder("=")))  # the conversion the message names


def test_a_0d_array_is_reduced_in_place_and_the_rust_check_says_0d(comm):
    x = np.array(3.5, np.float32)
    comm.allreduce(x)
    assert x.shape == () and float(x) == 3.5
    with pytest.raises(ValueError, match="0-d"):
        comm._c.submit("allreduce", np.array(1.0, np.float32))


def test_wait_takes_any_non_negative_timeout(comm):
    """Issue 26.5: wait(timeout=inf) raised PanicException."""
    for t in (math.inf, 1e300, 5.0, None):
        w = comm.allreduce_async(np.ones(4, np.float32))
        assert w.wait(timeout=t).algorithm == "ring"
    w = comm.allreduce_async(np.ones(4, np.float32))
    assert isinstance(no_panic(lambda: w.wait(timeout=0.0)), TimeoutError | None)
    w.wait()
    for t in (-1.0, math.nan):
        p = comm._c.submit("allreduce", np.ones(4, np.float32))
        with pytest.raises(ValueError, match="timeout must be a non-negative number of seconds"):
            p.wait(t)
        p.wait(None)


BAD_INIT = {
    "timeout=-1": ({"timeout": -1.0}, "timeout must be a positive"),
    "timeout=nan": ({"timeout": math.nan}, "timeout must be a positive"),
    "peer_timeout=0": ({"peer_timeout": 0.0}, "peer_timeout must be a positive"),
    "impair delay 1e30": ({"impair": {0: (0.0, 1e30)}}, "delay in"),
    "impair loss 2": ({"impair": {0: (2.0, 0.0)}}, "loss must be in"),
    "pace_burst_us=1e300": ({"pace_burst_us": 1e300}, "pace_burst_us must be in"),
    "retx_quiet_us=inf": ({"retx_quiet_us": math.inf}, "retx_quiet_us must be in"),
    "line_rate_gbps=1e300": ({"line_rate_gbps": 1e300}, "line_rate_gbps must be in"),
    "pipeline_chunks=2**31": ({"pipeline_chunks": 2**31}, "pipeline_chunks is"),
    "tree_arity=0": ({"tree_arity": 0}, "tree_arity"),
    "ps_servers=0": ({"ps_servers": 0}, "ps_servers"),
    "mss=2**40": ({"mss": 2**40}, ""),
    "authenticate with an empty token": ({"authenticate": True, "token": ""}, "needs a secret job token"),
}


@pytest.mark.parametrize("case", list(BAD_INIT))
def test_bad_settings_are_refused_by_name(case):
    kw, message = BAD_INIT[case]
    kw = {"token": "inputs", "timeout": 5.0, **kw}
    e = no_panic(lambda: gradwire.Communicator("127.0.0.1", free_port(), 0, 1, **kw))
    assert isinstance(e, ValueError | OverflowError), f"{case}: {e!r}"
    assert message in str(e), f"{case}: {e}"


def test_settings_at_their_limits_work():
    """Infinite and huge timeouts mean no limit; they must not overflow a deadline."""
    with gradwire.Communicator(
        "127.0.0.1", free_port(), 0, 1, token="inputs", timeout=math.inf, peer_timeout=1e300, pipeline_chunks=1024
    ) as c:
        x = np.ones(5, np.float32)
        c.allreduce(x, algorithm="tree")
        assert x.tolist() == [1.0] * 5


BAD_CALLS = {
    "root out of range": (lambda c: c.broadcast(np.ones(3, np.float32), root=5), "root"),
    "root past u32": (lambda c: c.broadcast(np.ones(3, np.float32), root=2**40), ""),
    "loss_bound nan": (lambda c: c.allreduce(np.ones(3, np.float32), loss_bound=math.nan), "loss_bound"),
    "loss_bound 2": (lambda c: c.allreduce(np.ones(3, np.float32), loss_bound=2.0), "loss_bound"),
    "push loss_bound -1": (lambda c: c.ps.push(np.ones(3, np.float32), loss_bound=-1.0), "loss_bound"),
    "int32": (lambda c: c.allreduce(np.ones(3, np.int32)), "float32 or float64"),
    "read-only": (lambda c: c._c.submit("allreduce", np.ones(3, np.float32)[::1].view().setflags(write=False)), ""),
    "unknown call": (lambda c: c._c.submit("reduce_scatter", np.ones(3, np.float32)), "unknown call"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_calls_are_refused_and_the_communicator_still_works(comm, case):
    call, message = BAD_CALLS[case]
    e = no_panic(lambda: call(comm))
    assert e is not None and message in str(e), f"{case}: {e!r}"
    x = np.full(3, 2.0, np.float32)
    comm.allreduce(x)
    assert x.tolist() == [2.0] * 3


def test_the_scheduler_bounds_its_memory_whatever_the_sizes():
    """Posting a tensor of 2**64 - 1 bytes cut into 1000-byte partitions was killed by the
    kernel for memory (partitions are cut when posted)."""
    s = _core.Scheduler(1000, 4000)
    for call in (lambda: s.post(1, 2**32 - 1, 2**64 - 1), lambda: s.post(2, 0, 2**63)):
        assert "partitions" in str(no_panic(call))
    s.post(3, 0, 10_000)
    assert "partitions" in str(no_panic(lambda: s.reconfigure(1, 1 << 40))) or s.queued_bytes == 10_000
    assert isinstance(no_panic(lambda: s.complete(12345)), ValueError)
    assert isinstance(no_panic(lambda: _core.Scheduler(0, 0)), ValueError)


def test_a_second_thread_is_refused_by_name(comm):
    comm.allreduce(np.ones(2, np.float32))  # this thread owns the communicator
    seen = []
    t = threading.Thread(
        target=lambda: seen.append(no_panic(lambda: comm.allreduce(np.ones(2, np.float32)))), name="T2"
    )
    t.start()
    t.join()
    assert isinstance(seen[0], RuntimeError) and 'thread "T2" is refused' in str(seen[0]), seen


def test_submit_by_address_names_only_a_tensors_own_memory(comm):
    """The torch backend's path (`submit_ptr`, storage left resizable) takes an address:
    it must lie inside the owner tensor's storage, or a Python program could have the
    engine write anywhere."""
    torch = pytest.importorskip("torch")
    t = torch.ones(8)
    base, n = t.data_ptr(), t.numel() * t.element_size()
    bad = {
        "a numpy array as owner": (np.ones(8, np.float32), base, n, "must be a torch tensor"),
        "past the storage": (t, base + 4, n, "not inside the owner's storage"),
        "another address": (t, 4096, 4, "not inside the owner's storage"),
    }
    for case, (owner, ptr, nbytes, message) in bad.items():
        e = no_panic(
            lambda owner=owner, ptr=ptr, nbytes=nbytes: comm._c.submit_ptr("allreduce", owner, ptr, nbytes, "f32")
        )
        assert isinstance(e, ValueError) and message in str(e), f"{case}: {e!r}"
    view = t[2:6]
    p = comm._c.submit_ptr("allreduce", view, view.data_ptr(), 16, "f32")  # a view inside its storage
    p.wait(None)
    assert t.tolist() == [1.0] * 8
