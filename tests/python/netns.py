"""Linux network namespaces as test hosts: one namespace per host, wired to a bridge.

    with NetnsCluster(4) as cluster:
        server = cluster.exec(0, [sys.executable, "server.py", cluster.addr(0)])
        client = cluster.exec(1, [sys.executable, "client.py", cluster.addr(0)])

Layout of a cluster (all of it inside namespaces the cluster creates; nothing is added to
the root namespace):

- ``gw<tag>-h<i>`` for host i: loopback up, ``eth0`` with address ``10.A.B.(i+1)/24``;
- ``gw<tag>-br``: the bridge ``br0`` and the host ends ``v<i>`` of the veth pairs.

``<tag>`` holds the pid and a per-process counter, and ``10.A.B.0/24`` is derived from the
same pair, so parallel test runs (and several clusters in one run) never share a name or
a subnet. The namespaces have no route anywhere else.

Teardown ALWAYS happens: on normal exit, on any exception (KeyboardInterrupt included,
which is held back until teardown is done when it arrives during teardown), when setup
fails half-way, and at interpreter exit for a cluster that was never closed. It kills
every process still running inside the cluster's namespaces (those started with
:meth:`NetnsCluster.exec` and their children) and deletes the namespaces, which removes
the bridge and veth pairs with them.

Needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN) and iproute2's ``ip``: use
:func:`netns_available` / :func:`netns_unavailable_reason` to skip otherwise.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

__all__ = ["NetnsCluster", "netns_available", "netns_unavailable_reason", "list_netns", "wait_for_line"]

_counter = itertools.count()
_reason_cache: list[str | None] = []
_live: set[NetnsCluster] = set()


def _ip(*args: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({res.returncode}): {res.stderr.strip()}")
    return res


def list_netns() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_unavailable_reason() -> str | None:
    """Why network namespace tests cannot run here, or None if they can.

    Checks Linux, root, ``ip`` on PATH, and that a namespace can really be created (a
    container may lack the capability). The answer is cached.
    """
    if _reason_cache:
        return _reason_cache[0]
    reason: str | None = None
    if not sys.platform.startswith("linux"):
        reason = f"network namespaces need Linux (this is {sys.platform})"
    elif os.geteuid() != 0:
        reason = "network namespace tests need root (CAP_SYS_ADMIN, CAP_NET_ADMIN): run as root"
    elif shutil.which("ip") is None:
        reason = "network namespace tests need iproute2's `ip` (apt-get install iproute2)"
    else:
        probe = f"gwprobe-{os.getpid()}"
        try:
            res = _ip("netns", "add", probe, check=False)
            if res.returncode != 0:
                reason = f"cannot create a network namespace here: {res.stderr.strip()}"
            else:
                res = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
                if res.returncode != 0:
                    reason = f"cannot create a bridge in a network namespace: {res.stderr.strip()}"
        finally:
            _ip("netns", "del", probe, check=False)
    _reason_cache.append(reason)
    return reason


def netns_available() -> bool:
    """True if :class:`NetnsCluster` can run here (see :func:`netns_unavailable_reason`)."""
    return netns_unavailable_reason() is None


@contextlib.contextmanager
def _sigint_deferred():
    """Hold back Ctrl-C for the duration (main thread only), then raise it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[tuple] = []
    try:
        old = signal.signal(signal.SIGINT, lambda *a: got.append(a))
    except ValueError:  # not in the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got:
            raise KeyboardInterrupt


class NetnsCluster:
    """``n`` hosts in their own network namespaces, on one bridge. A context manager."""

    def __init__(self, n: int):
        if not 1 <= n <= 250:
            raise ValueError(f"NetnsCluster(n): n must be in 1..250, got {n}")
        self.n = n
        pid = os.getpid()
        k = next(_counter)
        self.tag = f"{pid}x{k}"
        v = (pid * 64 + k) % (256 * 256)
        #: The cluster's subnet, 10.A.B.0/24.
        self.subnet = f"10.{v >> 8}.{v & 0xFF}.0/24"
        self._prefix = f"10.{v >> 8}.{v & 0xFF}."
        #: Namespace of each host.
        self.namespaces = [f"gw{self.tag}-h{i}" for i in range(n)]
        #: Namespace holding the bridge.
        self.bridge_namespace = f"gw{self.tag}-br"
        self._procs: list[subprocess.Popen] = []
        self._created: list[str] = []
        self._closed = True

    # -- addresses -----------------------------------------------------------------

    def addr(self, i: int) -> str:
        """IPv4 address of host ``i`` (on its ``eth0``)."""
        if not 0 <= i < self.n:
            raise IndexError(f"host {i} is outside 0..{self.n}")
        return f"{self._prefix}{i + 1}"

    @property
    def all_namespaces(self) -> list[str]:
        return [*self.namespaces, self.bridge_namespace]

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> NetnsCluster:
        reason = netns_unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self._closed = False
        _live.add(self)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add_ns(self, name: str) -> None:
        # Record first: a name that `ip netns add` half-created is still deleted.
        self._created.append(name)
        _ip("netns", "add", name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _setup(self) -> None:
        br = self.bridge_namespace
        self._add_ns(br)
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            self._add_ns(ns)
            # Both ends are created directly in their namespaces: nothing in the root one.
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"v{i}", "netns", br)
            _ip("-n", br, "link", "set", f"v{i}", "master", "br0")
            _ip("-n", br, "link", "set", f"v{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def close(self) -> None:
        """Kill everything running in the cluster and delete it. Idempotent."""
        if self._closed:
            return
        with _sigint_deferred():
            try:
                self._teardown()
            finally:
                self._closed = True
                _live.discard(self)

    def _teardown(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
        mine = [ns for ns in list_netns() if ns.startswith(f"gw{self.tag}-")]
        names = list(dict.fromkeys([*self._created, *mine]))
        # Whatever else runs inside (children of exec'd processes) would keep a namespace
        # alive after its name is gone: kill it by pid.
        for ns in names:
            out = _ip("netns", "pids", ns, check=False).stdout
            for pid in out.split():
                with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        errors = []
        for ns in reversed(names):
            res = _ip("netns", "del", ns, check=False)
            if res.returncode != 0 and ns in list_netns():
                errors.append(f"{ns}: {res.stderr.strip()}")
        self._created.clear()
        if errors:
            raise RuntimeError("could not delete network namespaces: " + "; ".join(errors))

    # -- running things ------------------------------------------------------------

    def exec(
        self,
        i: int,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        **popen_kwargs,
    ) -> subprocess.Popen:
        """Start ``argv`` inside host ``i``'s namespace (``ip netns exec``).

        ``env`` is the whole environment of the process (None: this process's). Other
        keyword arguments go to :class:`subprocess.Popen` (``stdout=subprocess.PIPE``...).
        The process is killed when the cluster closes.
        """
        if self._closed:
            raise RuntimeError("NetnsCluster.exec on a cluster that is not open (use it in a `with`)")
        ns = self.namespaces[i]
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], env=None if env is None else dict(env), **popen_kwargs)
        self._procs.append(p)
        return p

    def run(self, i: int, argv: Sequence[str], timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` in host ``i`` to completion, capturing text output."""
        p = self.exec(i, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@atexit.register
def _close_forgotten() -> None:
    for c in list(_live):
        with contextlib.suppress(Exception):
            c.close()


def wait_for_line(p: subprocess.Popen, want: str, timeout: float = 10) -> str:
    """Read ``p``'s text stdout until a line containing ``want`` (at most ``timeout`` s)."""
    lines: list[str] = []

    def reader() -> None:
        for line in p.stdout:
            lines.append(line)
            if want in line:
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if lines and want in lines[-1]:
        return lines[-1]
    raise RuntimeError(f"no line with {want!r} from {p.args} within {timeout} s: {''.join(lines)!r}")
