"""An emulated network: hosts in namespaces, joined by the emulator's switch (``gradwire-emu``).

    with EmulatedNetwork("scenario.toml", workdir) as net:
        server = net.popen(1, [sys.executable, "server.py"])
        net.run(0, [sys.executable, "client.py", net.addr(1)])
        print(net.stats()["packets"])

The switch process builds the namespaces and removes them when it stops: on a normal
exit, on an exception or Ctrl-C here (the context manager stops it), when this process
dies (the switch watches its stdin pipe and its parent), and when the switch itself is
killed (the next run sweeps namespaces whose owner is gone).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from .binary import EmulatorUnavailable, switch_command


class EmulatedNetwork:
    def __init__(
        self,
        scenario: str | os.PathLike,
        workdir: str | os.PathLike,
        *,
        overrides: Sequence[str] = (),
        ready_timeout: float = 60.0,
    ):
        self.scenario = Path(scenario)
        self.overrides = list(overrides)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stats_path = self.workdir / "switch.json"
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.hosts: list[dict[str, Any]] = []
        self.ports: list[str] = []
        self._children: list[subprocess.Popen] = []

    # -- lifecycle --------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        switch = switch_command()
        self._log = open(self.workdir / "switch.log", "w")  # noqa: SIM115 (closed by close())  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [
                *switch,
                "run",
                str(self.scenario),
                "--stats",
                str(self.stats_path),
                "--watch-stdin",
                *[a for ov in self.overrides for a in ("--set", ov)],
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        deadline = time.monotonic() + self.ready_timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()  # the switch prints one line when ready
            if line or self.proc.poll() is not None:
                break
        if not line.startswith("{"):
            self.proc.wait(timeout=30)
            self._log.flush()
            err = (self.workdir / "switch.log").read_text().strip()
            raise EmulatorUnavailable(f"the emulated network did not come up: {err or 'no output'}")
        ready = json.loads(line)
        self.hosts = ready["hosts"]
        self.ports = ready["ports"]
        # where a running job's hosts are, for `ip netns exec` from another shell
        (self.workdir / "network.json").write_text(json.dumps(dict(ready, switch_pid=self.proc.pid), indent=2))

    def close(self) -> None:
        for p in self._children:
            if p.poll() is None:
                p.kill()
        for p in self._children:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdin:
            self.proc.stdin.close()
        if getattr(self, "_log", None):
            self._log.close()

    # -- hosts ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.hosts)

    def addr(self, host: int) -> str:
        return self.hosts[host]["addr"]

    def netns(self, host: int) -> str:
        return self.hosts[host]["netns"]

    def wrap(self, host: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns(host), *map(str, argv)]

    def popen(self, host: int, argv: Sequence[str], **kw: Any) -> subprocess.Popen:
        """Start `argv` in host `host`'s namespace; it is killed when the network closes."""
        p = subprocess.Popen(self.wrap(host, argv), **kw)
        self._children.append(p)
        return p

    def run(self, host: int, argv: Sequence[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess:
        return subprocess.run(self.wrap(host, argv), timeout=timeout, check=kw.pop("check", False), **kw)

    def sysctl(self, host: int, key: str, value: str) -> None:
        self.run(
            host,
            ["sysctl", "-q", "-w", f"{key}={value}"],
            check=True,
            capture_output=True,
        )

    # -- counters ---------------------------------------------------------------------
    def stats(self, fresh: bool = True) -> dict[str, Any]:
        """The switch's counters (rewritten every 200 ms; `fresh` waits for a new copy)."""
        deadline = time.monotonic() + 10
        while not self.stats_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if fresh:
            before = self.stats_path.stat().st_mtime_ns
            deadline = time.monotonic() + 5
            while self.stats_path.stat().st_mtime_ns == before and time.monotonic() < deadline:
                time.sleep(0.02)
        return json.loads(self.stats_path.read_text())

    def final_stats(self) -> dict[str, Any]:
        """Counters written when the switch stopped (call after close)."""
        return json.loads(self.stats_path.read_text())
