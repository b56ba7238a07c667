"""Start N local processes of a gradwire job, as torchrun does (``gradwire launch``).

Each process gets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, a fresh random
GRADWIRE_TOKEN (so two jobs never join each other, even on one port) and, if given,
GRADWIRE_TOPOLOGY; its output lines are prefixed with its rank. If one process fails, the
others are stopped, the launcher says which rank failed and how, and exits with the first
failure's code (128 + the signal number for a rank killed by a signal, as a shell does;
124 on --timeout).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

EXIT_TIMEOUT = 124


class LaunchError(ValueError):
    """The command cannot be started (not found, not executable)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _pump(rank: int, stream, out, width: int) -> None:
    for line in iter(stream.readline, ""):
        out.write(f"[rank {rank:>{width}}] {line}")
        out.flush()


def describe_exit(code: int) -> str:
    """How a process ended, from its Popen return code."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def exit_code(code: int) -> int:
    """The launcher's exit status for a rank's return code (128 + signal, as shells do)."""
    return 128 - code if code < 0 else code


def _check_command(argv: Sequence[str]) -> None:
    exe = argv[0]
    if os.sep in exe:
        if not os.path.exists(exe):
            raise LaunchError(f"cannot run {exe!r}: no such file")
        if not os.access(exe, os.X_OK):
            raise LaunchError(f"cannot run {exe!r}: not executable")
    elif shutil.which(exe) is None:
        raise LaunchError(f"cannot run {exe!r}: command not found on PATH")


def command(argv: Sequence[str], nproc: int, *, timeout: float | None = None) -> list[str]:
    """The command line that runs `argv` as `nproc` ranks with `gradwire launch`, for
    programs that start jobs as subprocesses (benchmarks, `gradwire train`, tests)."""
    limit = ["--timeout", f"{timeout:g}"] if timeout is not None else []
    return [sys.executable, "-m", "gradwire", "launch", "-n", str(nproc), *limit, "--", *argv]


def run_job(cmd: Sequence[str], *, timeout: float | None = None, cwd: str | os.PathLike | None = None):
    """Runs a local job's command line (from `command`, or torchrun's) to its end, output
    captured as text, every rank with one OpenMP thread: the ranks share this machine's
    cores, and torch's default of a thread per core in every rank oversubscribes them.
    Returns the `subprocess.CompletedProcess`; a non-zero exit is the caller's to judge."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def leave(code: int = 0) -> None:
    """Ends a rank at once, after its output is flushed, without the interpreter's teardown:
    Gloo's C++ threads can abort it ("terminate called without an active exception",
    SIGABRT) after the job is done and its results are written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(
    argv: Sequence[str],
    nproc: int,
    *,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    topology: str | None = None,
) -> int:
    """Runs `argv` as `nproc` ranks; returns 0 if all succeed, else the first failure's
    code. Raises LaunchError (one line) if the command cannot be started."""
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    _check_command(argv)
    port = master_port or free_port(master_addr)
    token = secrets.token_hex(8)
    procs: list[subprocess.Popen] = []
    pumps = []
    width = len(str(nproc - 1))
    for rank in range(nproc):
        e = dict(os.environ)
        e.update(env or {})
        e.update(
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(port),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(nproc),
            GRADWIRE_TOKEN=token,
            PYTHONUNBUFFERED="1",
        )
        if topology is not None:
            e["GRADWIRE_TOPOLOGY"] = topology
        try:
            p = subprocess.Popen(
                list(argv),
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        except OSError as err:
            _stop(procs)
            raise LaunchError(f"cannot run {argv[0]!r}: {err.strerror or err}") from None
        procs.append(p)
        t = threading.Thread(target=_pump, args=(rank, p.stdout, sys.stdout, width), daemon=True)
        t.start()
        pumps.append(t)
    deadline = None if timeout is None else time.monotonic() + timeout
    code = 0
    first_failure: tuple[int, int] | None = None
    try:
        while any(p.poll() is None for p in procs):
            failed = [(r, p.returncode) for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed and first_failure is None:
                first_failure = failed[0]
                code = exit_code(failed[0][1])
                _stop(procs)
            if deadline is not None and time.monotonic() > deadline:
                running = [r for r, p in enumerate(procs) if p.poll() is None]
                _note(f"timed out after {timeout:g} s (--timeout): stopping ranks {', '.join(map(str, running))}")
                code = code or EXIT_TIMEOUT
                _stop(procs)
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs)
        code = 130
    for t in pumps:
        t.join(timeout=2)
    if first_failure is None:
        first_failure = next(((r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0), None)
        if first_failure is not None and code == 0:
            code = exit_code(first_failure[1])
    if first_failure is not None and code != EXIT_TIMEOUT:
        rank, rc = first_failure
        _note(f"rank {rank} {describe_exit(rc)}; the other ranks were stopped")
    return code


def _note(message: str) -> None:
    print(f"[launch] {message}", file=sys.stderr, flush=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
