"""Ctrl-C as a test sends it: SIGINT to a running command, then how long it took to stop."""

from __future__ import annotations

import signal
import subprocess
import time


def interrupt(proc: subprocess.Popen, within: float = 60) -> tuple[str, str, float]:
    """SIGINT to `proc` alone (as `kill -INT` would), then wait for it: its stdout, stderr
    and the seconds it took to exit. Killed if it outlives `within` (and the test fails on
    the timeout)."""
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    try:
        stdout, stderr = proc.communicate(timeout=within)
    finally:
        if proc.poll() is None:
            proc.kill()
    return stdout, stderr, time.monotonic() - t0
