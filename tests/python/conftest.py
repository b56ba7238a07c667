"""Shared fixtures. Every test runs the real extension (gradwire._core), no mocks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# A suite started in the background by a non-interactive shell (`cmd &`) inherits SIGINT
# ignored, and so would every command the Ctrl-C tests start: exec keeps an ignored signal,
# and Python then raises no KeyboardInterrupt. A user's terminal delivers it; so do we.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

DATA = Path(__file__).parent / "data"
INCAST = DATA / "incast-small.toml"

#: Shrinks the built-in 144-host scenarios to 8 hosts so they run in a blink.
SMALL = [
    "topology.leaves=2",
    "topology.hosts_per_leaf=4",
    "topology.spines=2",
    "topology.uplinks_per_leaf=2",
]


def set_args(overrides):
    out = []
    for o in overrides:
        out += ["--set", o]
    return out


@pytest.fixture
def incast_text() -> str:
    return INCAST.read_text()


@pytest.fixture(scope="session")
def gradwire_cmd() -> list[str]:
    """The installed `gradwire` console script if it belongs to this interpreter, else
    `python -m gradwire`."""
    exe = Path(sys.executable).parent / "gradwire"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("gradwire")
    if found and Path(found).parent == Path(sys.executable).parent:
        return [found]
    return [sys.executable, "-m", "gradwire"]


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """The output of every process in `procs`, all given `timeout` seconds together; on a
    hang, kills them all and fails naming the first rank still running."""
    deadline = time.monotonic() + timeout
    logs = []
    for r, p in enumerate(procs):
        try:
            log, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {r} still running after {timeout} s (hang)") from None
        logs.append(log)
    return logs


def run_cli(args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", MPLBACKEND="Agg")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
