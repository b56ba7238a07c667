"""Runs of a sweep on a Ray cluster (``--cluster ray`` of ``gradwire sim`` and ``gradwire
reproduce``).

Each run is one Ray task reserving one CPU: the worker simulates it with its own installed
gradwire (the Rust simulator in the worker process) into a scratch directory and returns
the run's files; the driver writes them into the local results directory, ``summary.json``
last, in the same layout as a local run, so ``--resume``, the tables and the plots are
unchanged. A task lost with its worker (the worker process or its node dies) is retried
once by Ray (``max_retries=1``), then reported by name; an error in the run itself (a bad
scenario) is not retried. Ctrl-C cancels every task still queued or running.

The cluster's address comes from ``--address``, else ``RAY_ADDRESS``, else ``auto`` (a
cluster started on this machine with ``ray start --head``). Installed with
``pip install "gradwire[cluster]"``; every node needs the same gradwire.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradwire.extras import require
from gradwire.runner import RunResult, RunSpec

#: Where a sweep's runs go: this machine's processes (the default) or a Ray cluster.
CLUSTERS = ("local", "ray")
#: Seconds between two looks at the cluster (workers, a Ctrl-C) while no run finishes.
POLL_S = 0.5
#: A run whose files are written last: what --resume reads to know the run finished.
LAST_FILE = "summary.json"


class ClusterError(RuntimeError):
    """The cluster cannot be reached or used; ``str()`` is the one line to print."""


class TaskFailed(RuntimeError):
    """A run failed on the cluster: its own error, or lost with its worker twice."""

    def __init__(self, task: Task, message: str, lost: bool = False):
        super().__init__(f"{task.name}: {message}")
        self.task = task
        self.message = message
        self.lost = lost
        """True when the cluster lost the run (not the run's own error)."""


@dataclass
class Task:
    key: Hashable
    """What the caller knows the run by (an index into its jobs)."""
    name: str
    """The run's name in messages (scenario/run)."""
    spec: RunSpec
    out_dir: Path


def connect(address: str | None = None) -> str:
    """Connect this process to the Ray cluster at ``address`` (else ``RAY_ADDRESS``, else
    ``auto``); returns the address used. Raises :class:`gradwire.extras.MissingExtra`
    without ray, :class:`ClusterError` when no cluster answers."""
    require("--cluster ray", "cluster", ("ray",))
    import ray

    addr = address or os.environ.get("RAY_ADDRESS") or "auto"
    if ray.is_initialized():
        return addr
    _probe(addr)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        # the workers' output stays in the cluster's logs: the driver prints its own lines
        ray.init(address=addr, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterError(
            f"no Ray cluster at {addr} ({first}): start one with `ray start --head`, "
            "or give --address HOST:PORT (or RAY_ADDRESS)"
        ) from None
    return addr


def _probe(addr: str, timeout: float = 5.0) -> None:
    """Fail at once when nothing listens at a HOST:PORT address: ray.init would retry for
    minutes. (``auto`` and ``ray://`` addresses are left to Ray.)"""
    host, sep, port = addr.rpartition(":")
    if not sep or "://" in addr or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise ClusterError(
            f"no Ray cluster at {addr} ({e.strerror or e}): start one with `ray start --head`, "
            "or give --address HOST:PORT (or RAY_ADDRESS)"
        ) from None


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def task_cpus(threads: int, node_cpus: Sequence[float]) -> int:
    """The CPUs a run on ``threads`` cores asks Ray for: its threads, but no more than the
    largest node has (Ray would hold a task that fits no node forever; on a smaller node
    the run shares its cores and still ends)."""
    largest = int(max(node_cpus, default=1))
    return max(1, min(int(threads), largest))


def _node_cpus() -> list[float]:
    import ray

    return [n.get("Resources", {}).get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]


def workers() -> tuple[int, int]:
    """(CPUs, alive nodes) of the connected cluster: a run takes one CPU (``threads`` where
    its scenario sets more), so with one-thread runs the CPUs are the runs at once."""
    import ray

    return int(ray.cluster_resources().get("CPU", 0)), sum(1 for n in ray.nodes() if n.get("Alive"))


def describe() -> str:
    """The cluster as the progress bar shows it."""
    try:
        cpus, nodes = workers()
    except Exception:  # the progress line must never end a sweep
        return "Ray"
    return f"Ray: {cpus} worker{'s' if cpus != 1 else ''} on {nodes} node{'s' if nodes != 1 else ''}"


def _simulate_in_worker(spec: RunSpec) -> dict:
    """In a Ray worker: simulate one run into a scratch directory and return its files."""
    from gradwire import __version__
    from gradwire._core import ScenarioError
    from gradwire.runner import simulate

    with tempfile.TemporaryDirectory(prefix="gradwire-run-") as d:
        try:
            res = simulate(spec, Path(d), console=None, show_progress=False)
        except ScenarioError as e:
            return {"error": str(e)}
        files = {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(Path(d).rglob("*")) if p.is_file()}
    import ray

    return {
        "summary": res.summary,
        "wall_seconds": res.wall_seconds,
        "files": files,
        "node": ray.get_runtime_context().get_node_id(),
        "worker": ray.get_runtime_context().get_worker_id(),
        "version": __version__,
    }


def _write_files(out_dir: Path, files: dict[str, bytes]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for rel in sorted(files, key=lambda r: r == LAST_FILE):  # summary.json last
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(files[rel])
        tmp.replace(path)


def run_tasks(
    tasks: Sequence[Task],
    on_done: Callable[[Task, RunResult], None] | None = None,
    on_tick: Callable[[str], None] | None = None,
) -> tuple[dict[Hashable, RunResult], dict]:
    """Run ``tasks`` on the connected cluster, in their order; each finished run's files land
    in its ``out_dir`` as they come back. Returns the results by key and a record: nodes and
    worker processes used, wall and the runs' own seconds, and the overhead (the wall time
    less the busiest worker's run time). Raises :class:`TaskFailed` for the first run that
    fails; on that or any other exception (KeyboardInterrupt) it first disconnects from the
    cluster, which ends every task of this job still queued or running."""
    import ray
    from ray.exceptions import RayError, RayTaskError, TaskCancelledError

    from gradwire import __version__

    remote = ray.remote(num_cpus=1, max_retries=1, retry_exceptions=False)(_simulate_in_worker)
    node_cpus = _node_cpus()
    refs = {}
    for t in tasks:
        cpus = task_cpus(int(t.spec.scenario.get("threads", 1)), node_cpus)
        refs[remote.options(name=t.name, num_cpus=cpus).remote(t.spec)] = t
    pending = list(refs)
    results: dict[Hashable, RunResult] = {}
    nodes: set[str] = set()
    busy: dict[str, float] = {}  # per worker process: the runs' own seconds
    t0 = time.monotonic()
    last_tick = 0.0
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            now = time.monotonic()
            if on_tick is not None and now - last_tick >= 2.0:
                on_tick(describe())
                last_tick = now
            for ref in ready:
                t = refs[ref]
                try:
                    out = ray.get(ref)
                except RayTaskError as e:  # the run's own error: not retried
                    raise TaskFailed(t, str(e.cause) if e.cause is not None else str(e)) from None
                except TaskCancelledError:
                    raise TaskFailed(t, "cancelled on the cluster", lost=True) from None
                except RayError as e:  # lost with its worker, and again on the retry
                    raise TaskFailed(t, f"lost with its worker twice ({type(e).__name__})", lost=True) from None
                if "error" in out:
                    raise TaskFailed(t, out["error"])
                if out["version"] != __version__:
                    raise TaskFailed(
                        t,
                        f"the worker runs gradwire {out['version']}, this machine {__version__}: install the same",
                        lost=True,
                    )
                _write_files(t.out_dir, out["files"])
                res = RunResult(t.spec.name, t.spec.params, t.out_dir, out["summary"], out["wall_seconds"])
                results[t.key] = res
                nodes.add(out["node"])
                busy[out["worker"]] = busy.get(out["worker"], 0.0) + out["wall_seconds"]
                if on_done is not None:
                    on_done(t, res)
    except BaseException:
        # End the job instead of cancelling task by task: Ray kills the worker processes of a
        # job whose driver disconnects, queued tasks included. (ray.cancel(force=True) on a
        # task that completes at that moment aborts the driver in Ray 2.60: "Tried to
        # complete task that was not pending".)
        ray.shutdown()
        raise
    wall = time.monotonic() - t0
    own = sum(busy.values())
    return results, {
        "nodes_used": len(nodes),
        "worker_processes": len(busy),
        "wall_seconds": round(wall, 3),
        "runs_seconds": round(own, 3),
        # what the busiest worker spent outside its runs: Ray's own cost on the critical path
        # (task hand-off, result transfer, a worker's start), not the runs' imbalance
        "overhead_seconds": round(wall - max(busy.values(), default=0.0), 3),
    }
