"""`--cluster ray`: sweeps and reproductions as Ray tasks, against a real Ray cluster that
the tests start on loopback (`ray start --head` plus a second node, one CPU each, both
`--node-ip-address=127.0.0.1`): the same table and the same flows as the local pool, byte
for byte but for wall times, Ctrl-C, and a sweep that completes although a node is killed
in the middle of it. (Ray's driver reaches the head by this machine's own address, which
Ray puts in place of 127.0.0.1; the kernel delivers that locally.)"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from interrupt import interrupt

RAY = Path(sys.executable).parent / "ray"
RAY_CLI = str(RAY) if RAY.exists() else shutil.which("ray")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None or RAY_CLI is None,
    reason='needs ray (pip install "gradwire[cluster]")',
)

#: On top of --quick (as test_reproduce.py does): seconds instead of a minute.
TINY = ["--set", "workload.model=resnet18", "--set", "transport.mss_bytes=8960"]
ENV = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", MPLBACKEND="Agg", COLUMNS="200")
ENV.pop("RAY_ADDRESS", None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="gwray", dir="/tmp"))  # short: Ray's socket paths
        self.address = f"127.0.0.1:{_free_port()}"
        self.nodes: list[subprocess.Popen] = []

    def _start(self, *args: str) -> subprocess.Popen:
        log = open(self.tmp / f"node{len(self.nodes)}.log", "w")  # noqa: SIM115 (the node's lifetime)
        p = subprocess.Popen(
            [RAY_CLI, "start", "--block", "--num-cpus=1", "--node-ip-address=127.0.0.1", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=ENV,
            start_new_session=True,  # its own process group: the node and what it starts
        )
        self.nodes.append(p)
        return p

    def start_head(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        self._start(
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={self.tmp}",
            "--object-store-memory=100000000",
        )

    def start_worker(self) -> subprocess.Popen:
        return self._start(f"--address={self.address}", "--object-store-memory=100000000")

    def alive_nodes(self) -> int:
        p = subprocess.run(
            [RAY_CLI, "status", f"--address={self.address}"], capture_output=True, text=True, env=ENV, timeout=60
        )
        active = p.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0]
        return sum(1 for line in active.splitlines() if "node_" in line) if p.returncode == 0 else 0

    def wait_nodes(self, n: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_nodes() != n:
            assert time.monotonic() < deadline, f"the Ray cluster has not {n} nodes after {timeout} s"
            assert all(p.poll() is None for p in self.nodes), "a Ray node exited"
            time.sleep(0.5)

    def kill(self, p: subprocess.Popen) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)

    def stop(self) -> None:
        for p in reversed(self.nodes):
            self.kill(p)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_cluster():
    c = Cluster()
    try:
        c.start_head()
        c.wait_nodes(1)
        c.start_worker()
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()


def gradwire(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "gradwire", *args],
        capture_output=True,
        text=True,
        env=env or ENV,
        timeout=timeout,
    )
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    return p


#: Columns that depend on how fast the run went, not on what it computed.
WALL = ("wall_seconds", "events_per_second")


def table_without_wall(path: Path) -> list[dict]:
    with path.open() as f:
        return [{k: v for k, v in row.items() if k not in WALL} for row in csv.DictReader(f)]


def same_flows(a: Path, b: Path) -> None:
    flows = sorted(p.relative_to(a) for p in a.rglob("flows.csv"))
    assert flows
    assert flows == sorted(p.relative_to(b) for p in b.rglob("flows.csv"))
    for rel in flows:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_reproduce_on_ray_matches_the_local_pool(ray_cluster, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "ray"
    p = gradwire("reproduce", "rat-fig4", "--quick", "--jobs", "2", "--out", str(local))
    assert p.returncode == 0, p.stderr
    p = gradwire(
        "reproduce", "rat-fig4", "--quick", "--cluster", "ray", "--out", str(remote),
        env=dict(ENV, RAY_ADDRESS=ray_cluster.address),
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"on Ray ({ray_cluster.address}: 2 workers on 2 nodes)" in p.stdout
    assert table_without_wall(local / "table.csv") == table_without_wall(remote / "table.csv")
    same_flows(local, remote)
    record = json.loads((remote / "reproduce.json").read_text())
    assert record["cluster"] == "ray" and record["ray"]["nodes_used"] == 2, record.get("ray")
    # --resume reads what Ray wrote as it reads a local run
    p = gradwire("reproduce", "rat-fig4", "--quick", "--resume", "--jobs", "1", "--out", str(remote))
    assert p.returncode == 0 and "6 runs already done, 0 to run" in p.stdout, p.stdout + p.stderr


def test_a_run_on_more_threads_than_a_node_has_cpus_still_runs(ray_cluster, tmp_path):
    """A `threads = 2` run asks Ray for two CPUs, but no more than a node has: on these
    one-CPU nodes it asks for one, where asking for two would wait forever."""
    out = tmp_path / "ray"
    p = gradwire(
        "sim", "leafspine-compare", "--no-plot", "--quiet", "--out", str(out), "--cluster", "ray",
        "--address", ray_cluster.address, "--set", "threads=2",
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(list(out.rglob("flows.csv"))) == 2


def test_sim_sweep_on_ray_with_address(ray_cluster, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "ray"
    p = gradwire("sim", "leafspine-compare", "--no-plot", "--quiet", "--out", str(local))
    assert p.returncode == 0, p.stderr
    p = gradwire(
        "sim", "leafspine-compare", "--no-plot", "--out", str(remote), "--cluster", "ray",
        "--address", ray_cluster.address,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 runs on Ray" in p.stdout
    same_flows(local, remote)
    assert (remote / "runs.json").read_bytes() == (local / "runs.json").read_bytes()
    assert table_without_wall(local / "summary.csv") == table_without_wall(remote / "summary.csv")


def test_no_cluster_at_the_address_is_one_line(tmp_path):
    p = gradwire("sim", "--out", str(tmp_path / "x"), "--cluster", "ray", "--address", f"127.0.0.1:{_free_port()}")
    assert p.returncode == 1
    assert (
        p.stderr.strip().startswith("error: no Ray cluster at 127.0.0.1:") and len(p.stderr.strip().splitlines()) == 1
    )


def _reproduce_on(ray_cluster, out: Path) -> subprocess.Popen:
    """`gradwire reproduce dlcp-fig16 --quick` (tiny) on the cluster, in the background."""
    return subprocess.Popen(
        [sys.executable, "-m", "gradwire", "reproduce", "dlcp-fig16", "--quick", *TINY, "--cluster", "ray",
         "--address", ray_cluster.address, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip


def _wait_for_runs(proc: subprocess.Popen, out: Path, n: int, within: float = 120) -> None:
    """Until `n` runs are back in `out` (the job still running)."""
    deadline = time.monotonic() + within
    while len(list(out.glob("*/*/summary.json"))) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no run came back from the cluster in {within:.0f} s"
        time.sleep(0.05)


def test_ctrl_c_cancels_the_clusters_tasks(ray_cluster, tmp_path):
    """SIGINT once the first runs are back: exit 130 at once, and no run lands afterwards
    (the tasks still queued or running are cancelled, not left to finish)."""
    out = tmp_path / "r"
    proc = _reproduce_on(ray_cluster, out)
    try:
        _wait_for_runs(proc, out, 2)
        stdout, stderr, stopped_in = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert stopped_in < 15, f"took {stopped_in:.1f} s to stop"
    done = len(list(out.glob("*/*/summary.json")))
    time.sleep(2)
    assert len(list(out.glob("*/*/summary.json"))) == done < 42, "runs landed after the interrupt"
    # the cluster is free again: both CPUs available for the next test
    deadline = time.monotonic() + 30
    while (
        "0.0/2.0 CPU"
        not in subprocess.run(
            [RAY_CLI, "status", f"--address={ray_cluster.address}"], capture_output=True, text=True, env=ENV
        ).stdout
    ):
        assert time.monotonic() < deadline, "cancelled tasks still hold the cluster's CPUs"
        time.sleep(0.5)


def test_sweep_completes_when_a_node_dies(ray_cluster, tmp_path):
    """The second node is killed (its whole process group, SIGKILL) once the first runs are
    back: the run it held is retried on the head, the sweep completes, the table is the
    local pool's."""
    local, remote = tmp_path / "local", tmp_path / "ray"
    p = gradwire("reproduce", "dlcp-fig16", "--quick", *TINY, "--jobs", "2", "--out", str(local))
    assert p.returncode == 0, p.stderr
    proc = _reproduce_on(ray_cluster, remote)
    try:
        _wait_for_runs(proc, remote, 2)
        worker = ray_cluster.nodes[1]
        ray_cluster.kill(worker)
        killed_after = len(list(remote.glob("*/*/summary.json")))
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    total = len(list(local.glob("*/*/summary.json")))
    assert killed_after < total, "the sweep had finished before the node was killed"
    assert table_without_wall(local / "table.csv") == table_without_wall(remote / "table.csv")
    same_flows(local, remote)
