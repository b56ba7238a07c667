"""Start N local processes of a gradwire job, as torchrun does (``gradwire launch``).

Each process gets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and a fresh
GRADWIRE_TOKEN; its output lines are prefixed with its rank. If one process fails, the
others are stopped, and the launcher exits with the first failure's code.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Sequence


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _pump(rank: int, stream, out, width: int) -> None:
    for line in iter(stream.readline, ""):
        out.write(f"[rank {rank:>{width}}] {line}")
        out.flush()


def launch(argv: Sequence[str], nproc: int, *, master_addr: str = "127.0.0.1", master_port: int | None = None,
           env: dict[str, str] | None = None, timeout: float | None = None) -> int:
    """Runs `argv` as `nproc` ranks; returns 0 if all succeed, else the first failure's code."""
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    port = master_port or free_port(master_addr)
    token = secrets.token_hex(8)
    procs: list[subprocess.Popen] = []
    pumps = []
    width = len(str(nproc - 1))
    for rank in range(nproc):
        e = dict(os.environ)
        e.update(env or {})
        e.update(MASTER_ADDR=master_addr, MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                 WORLD_SIZE=str(nproc), GRADWIRE_TOKEN=token, PYTHONUNBUFFERED="1")
        p = subprocess.Popen(list(argv), env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        t = threading.Thread(target=_pump, args=(rank, p.stdout, sys.stdout, width), daemon=True)
        t.start()
        pumps.append(t)
    deadline = None if timeout is None else time.monotonic() + timeout
    code = 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed and code == 0:
                code = failed[0].returncode
                _stop(procs)
            if deadline is not None and time.monotonic() > deadline:
                code = code or 124
                _stop(procs)
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs)
        code = 130
    for t in pumps:
        t.join(timeout=2)
    if code == 0:
        code = next((p.returncode for p in procs if p.returncode != 0), 0)
    return code


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
