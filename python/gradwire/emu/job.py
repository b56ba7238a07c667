"""Scenario files of ``gradwire emulate``: the network (read by the switch) plus ``[job]``
and an optional ``[sweep]``, run point by point on a fresh emulated network each.

``[job]`` kinds (hosts are numbered as in the simulator: host ``h`` is in rack
``h // hosts_per_leaf``):

- ``allreduce`` (ring), ``ps`` (push then pull, rank 0 the one server; ``sync = true``:
  every rank waits for all at the end of an iteration, as the simulator's PS workload
  runs them, instead of pushing its next iteration as soon as its own pull is in) and ``ddp``
  (training steps of an MLP of about ``bytes`` of parameters under PyTorch DDP, with
  DDP's Gloo allreduce or gradwire's communication hook):
  ``backends`` (``"gloo"`` for torch.distributed's Gloo, or a gradwire
  transport such as ``"dlcp"``; for ``ps`` also kernel TCP ``"cubic"``, ``"reno"``,
  ``"bbr"``), ``bytes``, ``iterations``, ``ranks`` (hosts 0..ranks-1)
  or ``hosts``, ``loss_bound`` (gradwire), ``background`` (kernel-TCP flows running
  meanwhile: ``{src, dst, bytes, cc}``), ``runtime`` (more ``gradwire.init()``
  arguments, e.g. ``{pipeline_chunks = 1}``), ``tcp_cc`` (the ranks' kernels' congestion
  control, so Gloo's: ``cubic``, Linux's default, unless set; a machine's own default,
  which the namespaces would otherwise inherit, may be another, BBR on ours).
- ``flows``: ``flows = [{src, dst, bytes, cc, start_s}]``, kernel TCP with congestion
  control ``cc`` (cubic, reno, bbr).
- ``incast``: ``receiver``, ``senders`` (a list of hosts), ``bytes``, ``cc``.

``[sweep]`` maps dotted keys (network or ``job.*``) to lists of values; every
combination is one run (expanded by the simulator's own code, as ``gradwire run``
does). ``job.timeout_s`` bounds each backend's (or the flows') run.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradwire._core import ScenarioError, expand_scenario

from .network import EmulatedNetwork

JOB_KINDS = ("allreduce", "ps", "ddp", "train", "flows", "incast")
CCS = ("cubic", "reno", "bbr")
# The runtime's NIC clock (engine/output.rs) paces whole datagrams, headers included, at
# this share of the link. The switch's port clock counts the same bytes; the 5 % left over
# lets a port's backlog drain after the user-space switch or a rank was late for a core,
# where at the full rate every stall would add to the queue for good.
LINE_RATE_SHARE = 0.95
# Flows start this long after their processes are launched (they connect meanwhile).
START_LEAD_S = 2.0


class JobError(ValueError):
    """A bad [job] or [sweep] entry."""


@dataclass
class Point:
    name: str
    params: list[tuple[str, Any]]
    overrides: list[str]  # for the switch: --set key=value
    root: dict[str, Any]  # the whole scenario with this point's values
    job: dict[str, Any] = field(default_factory=dict)


def needs_torch(job: dict[str, Any]) -> bool:
    """Whether a checked job's workers import torch: every allreduce and DDP run (torch
    tensors, and Gloo), and a parameter server on a gradwire transport; kernel-TCP flows,
    incasts and parameter servers do not."""
    if job["kind"] in ("allreduce", "ddp", "train"):
        return True
    return job["kind"] == "ps" and any(b not in CCS for b in job["backends"])


def plan(path: Path, sets: list[str] = ()) -> tuple[str, list[Point]]:
    """The scenario's sweep points, each with its checked `[job]`. Overrides and sweeps are
    the simulator's own (`_core.expand_scenario`): the same syntax, values and labels as
    `gradwire run`. The switch gets each point's network keys as `--set` overrides."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise JobError(f"{path}: {e}") from None
    try:
        expanded = expand_scenario(text, list(sets))
    except ScenarioError as e:
        raise JobError(f"{path}: {e}") from None
    fixed = [s for s in sets if not s.split("=", 1)[0].strip().startswith(("job.", "sweep"))]
    name = Path(path).stem
    points = []
    for label, params, root in expanded:
        name = root.get("name", name)
        net = fixed + [f"{k}={literal}" for k, _, _, literal in params if not k.startswith("job.")]
        raw = [(k, v) for k, v, _, _ in params]
        points.append(Point(label or name, raw, net, root, _check_job(root.get("job"), root)))
    return name, points


#: the keys `at_rate` scales; a sweep that sets one per point cannot be scaled
SCALED_BY_RATE = ("topology.host_link_gbps", "topology.uplink_gbps", "job.bytes", "job.flows", "job.background")


#: Host link rate per core at which the built-in jobs stay network-bound, Gloo's and the
#: runtime's alike: measured at 0.25 Gbit/s on 2 idle cores and 1 Gbit/s on 16 (where 10
#: Gbit/s is bound by the user-space switch), docs/emulation.md; in between it is assumed
#: to scale with the cores.
GBPS_PER_CORE = 0.125


def auto_rate(path: Path, sets: list[str], builtin: bool, cores: int | None = None) -> tuple[float | None, str]:
    """`--gbps auto`: the host link rate to run `path` at on this machine, or None to keep
    the file's, and why. A built-in scenario whose rate this machine's cores cannot keep up
    with runs at the rate they can (0.125 Gbit/s per core), bytes scaled to the
    same wire time; a file of the user's, a rate set with --set, a training job and a sweep
    over a rate keep theirs."""
    cores = cores or os.cpu_count() or 1
    if not builtin:
        return None, "a scenario file of yours runs at its own rate"
    if any(s.split("=", 1)[0].strip() in SCALED_BY_RATE for s in sets):
        return None, "--set gives the rate or the bytes"
    _name, points = plan(path, sets)
    if points[0].job["kind"] == "train" or any(k in SCALED_BY_RATE for pt in points for k, _ in pt.params):
        return None, "its rate or bytes cannot scale"
    file_gbps = float(points[0].root.get("topology", {}).get("host_link_gbps", 100.0))
    cap = GBPS_PER_CORE * cores
    if file_gbps <= cap:
        return None, f"{cores} cores keep up with {file_gbps:g} Gbit/s"
    return cap, (
        f"{cores} cores keep up with {cap:g} Gbit/s, not the scenario's {file_gbps:g} (the run would be "
        f"CPU-bound): links at {cap:g} Gbit/s, bytes scaled to the same wire time; --gbps {file_gbps:g} runs its own"
    )


def at_rate(path: Path, sets: list[str], gbps: float) -> list[str]:
    """`sets` plus the overrides that run the scenario with its host links at `gbps` Gbit/s:
    the uplinks and every byte count of the job (`bytes`, the `flows` and `background`
    flows) scaled by the same factor, so each wire time stays (`gradwire emulate --gbps`).
    Buffers and delays stay as they are."""
    if not (math.isfinite(gbps) and gbps > 0):
        raise JobError(f"--gbps must be a positive number of Gbit/s (got {gbps})")
    _name, points = plan(path, sets)
    swept = sorted({k for pt in points for k, _ in pt.params} & set(SCALED_BY_RATE))
    if swept:
        raise JobError(f"--gbps scales {', '.join(swept)}, which the sweep sets per point: set them with --set instead")
    root, job = points[0].root, points[0].job
    if job["kind"] == "train":
        raise JobError(
            "--gbps: a training job moves its model's bytes, which cannot scale; use --set topology.host_link_gbps"
        )
    topo = root.get("topology", {})
    f = gbps / float(topo.get("host_link_gbps", 100.0))
    out = [
        *sets,
        f"topology.host_link_gbps={gbps!r}",
        f"topology.uplink_gbps={float(topo.get('uplink_gbps', 100.0)) * f!r}",
    ]
    if "bytes" in job:
        out.append(f"job.bytes={max(1, round(job['bytes'] * f))}")
    for key in ("flows", "background"):
        if job.get(key):
            tables = ", ".join(
                f'{{ src = {x["src"]}, dst = {x["dst"]}, bytes = {max(1, round(x["bytes"] * f))}, cc = "{x["cc"]}", '
                f"start_s = {float(x['start_s'])!r} }}"
                for x in job[key]
            )
            out.append(f"job.{key}=[{tables}]")
    return out


def _hosts(root: dict) -> int:
    t = root.get("topology", {})
    return int(t.get("leaves", 1)) * int(t.get("hosts_per_leaf", 2))


def _check_job(job: Any, root: dict) -> dict:
    if not isinstance(job, dict) or job.get("kind") not in JOB_KINDS:
        raise JobError(f"[job] needs kind = one of {', '.join(JOB_KINDS)}")
    n = _hosts(root)
    job = dict(job)

    def host(key: str, h: Any) -> int:
        if not isinstance(h, int) or not 0 <= h < n:
            raise JobError(f"job.{key}: host {h!r} is out of range (the topology has {n} hosts)")
        return h

    def flows(items: Any, key: str) -> list[dict]:
        out = []
        for i, f in enumerate(items or []):
            cc = f.get("cc", "cubic")
            if cc not in CCS:
                raise JobError(f"job.{key}[{i}].cc = {cc!r}: one of {', '.join(CCS)}")
            out.append(
                {
                    "src": host(f"{key}[{i}].src", f.get("src")),
                    "dst": host(f"{key}[{i}].dst", f.get("dst")),
                    "bytes": int(f.get("bytes", 10_000_000)),
                    "cc": cc,
                    "start_s": float(f.get("start_s", 0.0)),
                }
            )
            if out[-1]["src"] == out[-1]["dst"]:
                raise JobError(f"job.{key}[{i}]: src equals dst")
        return out

    if job["kind"] in ("allreduce", "ps", "ddp", "train"):
        hosts = job.get("hosts") or list(range(int(job.get("ranks", n))))
        job["hosts"] = [host("hosts", h) for h in hosts]
        if len(job["hosts"]) < 2:
            raise JobError(f"job: a {job['kind']} needs at least 2 ranks")
        b = job.get("backends", ["gloo", "dlcp"])
        job["backends"] = [b] if isinstance(b, str) else list(b)
        job["bytes"] = int(job.get("bytes", 25_000_000))
        job["iterations"] = int(job.get("iterations", 3))
        job["loss_bound"] = float(job.get("loss_bound", 0.0))
        if not isinstance(job.get("sync", False), bool):
            raise JobError(f"job.sync = {job['sync']!r}: true or false")
        if job.get("sync") and job["kind"] != "ps":
            raise JobError(f"job.sync: only a ps job has it (this one is {job['kind']!r})")
        job["background"] = flows(job.get("background"), "background")
        job["tcp_cc"] = job.get("tcp_cc", "cubic")
        if job["tcp_cc"] not in CCS:
            raise JobError(f"job.tcp_cc = {job['tcp_cc']!r}: one of {', '.join(CCS)}")
        if job["kind"] == "train":
            job["iterations"] = 1  # one row per backend: the whole training run
            job["train"] = _train_plan(job)
    elif job["kind"] == "incast":
        rx = host("receiver", job.get("receiver", 0))
        senders = job.get("senders") or [h for h in range(n) if h != rx]
        job["flows"] = flows(
            [
                {
                    "src": s,
                    "dst": rx,
                    "bytes": job.get("bytes", 10_000_000),
                    "cc": job.get("cc", "cubic"),
                }
                for s in senders
            ],
            "senders",
        )
    else:
        job["flows"] = flows(job.get("flows"), "flows")
        if not job["flows"]:
            raise JobError("job.flows is empty")
    return job


# -- running ------------------------------------------------------------------------------
def _train_plan(job: dict) -> dict:
    """gradwire.train.worker's plan for a `kind = "train"` job: `model` ("cnn", the
    default, or "resnet18") and `epochs`, `lr`, `batch`, `target`, `seed` (the model's
    `gradwire train` defaults where left out)."""
    from gradwire.train.job import MODEL_DEFAULTS

    model = job.get("model", "cnn")
    if model not in MODEL_DEFAULTS:
        raise JobError(f"job.model = {model!r}: one of {', '.join(MODEL_DEFAULTS)}")
    plan = {"model": model, "seed": int(job.get("seed", 0)), **MODEL_DEFAULTS[model]}
    for key, kind in (("epochs", int), ("lr", float), ("batch", int), ("target", float)):
        if key in job:
            plan[key] = kind(job[key])
    return plan


def _worker(*args: Any) -> list[str]:
    return [sys.executable, "-m", "gradwire.emu.worker", *map(str, args)]


def _env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # the package's parent, for `-m gradwire...`
    e["PYTHONPATH"] = src + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    return e


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def start_flows(net: EmulatedNetwork, flows: list[dict], base_port: int = 5100) -> list[tuple[dict, subprocess.Popen]]:
    """Start kernel-TCP flows (a sink per flow); returns (flow, sender process) pairs."""
    sinks = []
    for i, f in enumerate(flows):
        s = net.popen(
            f["dst"],
            _worker("tcp-sink", base_port + i, 1),
            env=_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        sinks.append(s)
    for s in sinks:
        s.stdout.readline()  # {"listening": port}
    senders = []
    # every sender connects first and starts at the same wall-clock instant (plus its
    # start_s): the namespaces share the clock, and process start-up takes a while
    start_at = time.time() + START_LEAD_S
    for i, f in enumerate(flows):
        p = net.popen(
            f["src"],
            _worker(
                "tcp-send",
                net.addr(f["dst"]),
                base_port + i,
                f["bytes"],
                f["cc"],
                start_at + f["start_s"],
            ),
            env=_env(GRADWIRE_EMU_SWITCH_PID=str(net.proc.pid) if net.proc else ""),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        senders.append((dict(f, flow=i), p))
    return senders


def finish_flows(senders: list[tuple[dict, subprocess.Popen]], timeout: float) -> list[dict]:
    """The flows' rows; each carries the CPU shares over all the flows together (from the
    first sender's start to the last one's end; `ranks_share` is the senders' CPU, a sink's
    counts as `other_share`)."""
    rows, results = [], []
    for f, p in senders:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        res = _json_lines(out)
        r = {
            "kind": "flow",
            "label": f"{f['cc']} {f['src']}->{f['dst']}",
            "flow": f["flow"],
            "src": f["src"],
            "dst": f["dst"],
            "bytes": f["bytes"],
            "cc": f["cc"],
        }
        if res:
            results.append(res[0])
            r.update(
                time_s=res[0]["fct_s"],
                gbps=res[0]["gbps"],
                retransmits=res[0]["retransmits"],
            )
        else:
            r.update(
                time_s=float("nan"),
                error=(err or "no result").strip().splitlines()[-1:],
            )
        rows.append(r)
    shares = cpu_shares(results, 0) if len(results) == len(rows) else {}
    for r in rows:
        r.update(shares)
    return rows


# The hosts' kernel counters a run reports (summed over its hosts, `/proc/net/snmp` and
# `/proc/net/netstat` of each namespace): column name -> (table, counter).
KERNEL_COUNTERS = {
    # datagrams dropped because a socket's receive buffer was full: loss past the switch,
    # when a receiving process does not keep up
    "host_rcvbuf_drops": ("Udp", "RcvbufErrors"),
    # how the kernels' TCP recovered (Gloo, kernel-TCP flows and parameter servers)
    "tcp_retrans_segs": ("Tcp", "RetransSegs"),
    "tcp_timeouts": ("TcpExt", "TCPTimeouts"),
    "tcp_loss_probes": ("TcpExt", "TCPLossProbes"),
    "tcp_sack_recoveries": ("TcpExt", "TCPSackRecovery"),
    "tcp_lost_retransmits": ("TcpExt", "TCPLostRetransmit"),
    "tcp_spurious_rtos": ("TcpExt", "TCPSpuriousRTOs"),
    # CUBIC's slow-start exits by HyStart (ACK train, delay) and the windows they left at,
    # summed: what the simulator's `transport.tcp_hystart` is checked against
    "tcp_hystart_train": ("TcpExt", "TCPHystartTrainDetect"),
    "tcp_hystart_train_cwnd": ("TcpExt", "TCPHystartTrainCwnd"),
    "tcp_hystart_delay": ("TcpExt", "TCPHystartDelayDetect"),
    "tcp_hystart_delay_cwnd": ("TcpExt", "TCPHystartDelayCwnd"),
}


def _kernel_counters(net: EmulatedNetwork, hosts: list[int]) -> dict[str, int]:
    """`KERNEL_COUNTERS` now, summed over `hosts` (each namespace has its own)."""
    total = dict.fromkeys(KERNEL_COUNTERS, 0)
    for h in hosts:
        text = net.run(h, ["cat", "/proc/net/snmp", "/proc/net/netstat"], capture_output=True, text=True).stdout
        tables: dict[str, dict[str, int]] = {}
        lines = [ln.split() for ln in text.splitlines() if ln.strip()]
        # each table is a header line of names and a line of values, both "Name: ..."
        for names, values in zip(lines, lines[1:]):
            if names[0] == values[0] and not names[1].lstrip("-").isdigit():
                tables[names[0].rstrip(":")] = dict(zip(names[1:], (int(v) for v in values[1:])))
        for col, (table, name) in KERNEL_COUNTERS.items():
            total[col] += tables.get(table, {}).get(name, 0)
    return total


def _delta(before: dict, after: dict) -> dict:
    """The switch's counters over one backend's run: packets, ECN marks, and drops split
    into random loss, host NIC queues (ports host*->) and switch ports."""

    def drops(stats: dict, nic: bool) -> int:
        return sum(
            v
            for p in stats["ports"]
            if p["name"].startswith("host") == nic
            for k, v in p["drops"].items()
            if k != "random_loss"
        )

    def rx_cpu(stats: dict) -> float:
        return stats.get("tun", {}).get("write_cpu_seconds", 0.0)

    return {
        "packets": after["packets"]["sent"] - before["packets"]["sent"],
        "ecn_marks": after["ecn_marks"] - before["ecn_marks"],
        "random_loss": after["drops"]["random_loss"] - before["drops"]["random_loss"],
        "nic_drops": drops(after, True) - drops(before, True),
        "switch_drops": drops(after, False) - drops(before, False),
        "switch_cpu_s": round(after["cpu_seconds"] - before["cpu_seconds"], 3),
        # of which the hosts' kernel receive path, run inside the switch's TUN writes
        "switch_rx_cpu_s": round(rx_cpu(after) - rx_cpu(before), 3),
    }


# An iteration is CPU-bound when the machine's cores were busy at least this share of it:
# then some thread of the job (a rank's engine, the switch, a kernel softirq) waited for
# a core, and its time says as much about this machine as about the network.
CPU_BOUND_BUSY = 0.9


def iteration_periods(results: list[dict], iterations: int) -> list[float]:
    """Each iteration's period on the wall clock every namespace shares: from the last rank's
    end of the iteration before (the first: the first rank's start) to the last rank's end
    of this one, from the ranks' samples around each call (`worker.cpu_sample`). Back to
    back, a rank done early starts its next call early and waits in it for the others, so
    the slowest rank's call (`time_s`) can exceed the period by the ranks' skew (a one-way
    delay of a ring at 10 ms RTT); the simulator's iterations are periods. NaN without
    samples."""
    wins = [r.get("cpu_windows") or [] for r in results]
    if not wins or any(len(w) < iterations for w in wins):
        return [math.nan] * iterations
    ends = [max(w[it][1][0] for w in wins) for it in range(iterations)]
    starts = [min(w[0][0][0] for w in wins), *ends[:-1]]
    return [round(e - s, 6) for s, e in zip(starts, ends)]


def cpu_shares(results: list[dict], it: int, cores: int | None = None) -> dict[str, Any]:
    """Iteration `it`'s CPU, from the ranks' samples around it (`worker.cpu_sample`):
    the window runs from the first rank's start to the last rank's end. Shares are of
    all the machine's cores over that window: `ranks_share` (the ranks' processes, user +
    system), `switch_share` (the switch process, user + system; about half is the hosts'
    receive path its TUN writes run), `kernel_share` (the
    machine's system, irq and softirq time, whoever it ran for: the ranks' and the
    switch's system time are in it too), `other_share` (busy time that is neither the
    ranks' nor the switch's: other processes on the machine, kernel threads, softirqs not
    charged to them), `machine_busy`; `cpu_bound` when `machine_busy >= CPU_BOUND_BUSY`.
    The machine's counters tick every 10 ms: about ±3 % of a 0.3 s window. Empty when a
    rank sent no samples."""
    cores = cores or os.cpu_count() or 1
    wins = [r["cpu_windows"][it] for r in results if len(r.get("cpu_windows") or []) > it]
    if not wins or len(wins) != len(results) or not all("cpu_s" in r for r in results):
        return {}
    first = min((w[0] for w in wins), key=lambda x: x[0])
    last = max((w[1] for w in wins), key=lambda x: x[0])
    cap = (last[0] - first[0]) * cores
    if cap <= 0:
        return {}
    busy, kernel, switch = (last[i] - first[i] for i in (1, 2, 3))
    ranks = sum(r["cpu_s"][it] for r in results)
    return {
        "iter_switch_cpu_s": round(switch, 3),
        "kernel_cpu_s": round(kernel, 3),
        "ranks_share": round(ranks / cap, 3),
        "switch_share": round(switch / cap, 3),
        "kernel_share": round(kernel / cap, 3),
        "other_share": round(max(0.0, busy - ranks - switch) / cap, 3),
        "machine_busy": round(busy / cap, 3),
        "cpu_bound": bool(busy / cap >= CPU_BOUND_BUSY),
    }


def run_allreduce(
    net: EmulatedNetwork,
    job: dict,
    root: dict,
    log: Callable[[str], None],
    timeout: float,
) -> list[dict]:
    rows = []
    gbps = float(root.get("topology", {}).get("host_link_gbps", 1.0))
    hosts = job["hosts"]
    for k, backend in enumerate(job["backends"]):
        before = net.stats()
        kernel0 = _kernel_counters(net, hosts)
        bg = start_flows(net, job["background"], base_port=5100 + 100 * k) if job["background"] else []
        env = _env(
            MASTER_ADDR=net.addr(hosts[0]),
            MASTER_PORT=str(29500 + 10 * k),  # a job may use the next ports too
            WORLD_SIZE=str(len(hosts)),
            GRADWIRE_TOKEN=secrets.token_hex(8),
            GLOO_SOCKET_IFNAME="eth0",
            GRADWIRE_EMU_LINE_GBPS=str(gbps * LINE_RATE_SHARE),
            GRADWIRE_EMU_INIT=json.dumps(job.get("runtime", {})),
            GRADWIRE_EMU_SYNC="1" if job.get("sync") else "",
            GRADWIRE_EMU_SWITCH_PID=str(net.proc.pid) if net.proc else "",
            GRADWIRE_EMU_TRAIN=json.dumps({**job.get("train", {}), "out": str(net.workdir / "train")}),
        )
        procs, logs = [], []
        for rank, h in enumerate(hosts):
            e = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
            # A rank's stderr goes to a file, not a pipe: a pipe read only after the rank
            # before it has exited fills (GRADWIRE_TRACE=1 writes megabytes) and blocks it.
            logs.append(net.workdir / f"{backend}-rank{rank}.log")
            with open(logs[-1], "w") as err_file:
                procs.append(
                    net.popen(
                        h,
                        _worker(
                            job["kind"],
                            backend,
                            job["bytes"],
                            job["iterations"],
                            job["loss_bound"],
                        ),
                        env=e,
                        stdout=subprocess.PIPE,
                        stderr=err_file,
                        text=True,
                    )
                )
        results, errors = [], []
        deadline = time.monotonic() + timeout
        for rank, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                late = ""
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                late = f"timed out after {timeout:.0f} s"
            err = logs[rank].read_text()
            if not err.strip():
                logs[rank].unlink()
            err = err + "\n" + late if late else err
            res = _json_lines(out)
            if res:
                results.append(res[0])
            else:
                errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit code {p.returncode}")
        for _f, p in bg:
            if p.poll() is None:
                p.kill()
        counts = _delta(before, net.stats())
        counts.update({k: v - kernel0[k] for k, v in _kernel_counters(net, hosts).items()})
        if errors:
            log(f"{backend}: failed: {errors[0]}")
            rows.append(
                {
                    "kind": job["kind"],
                    "label": backend,
                    "bytes": job["bytes"],
                    "iteration": 0,
                    "time_s": float("nan"),
                    "error": errors[0],
                }
            )
            continue
        periods = iteration_periods(results, job["iterations"])
        for it in range(job["iterations"]):
            # an allreduce ends when its slowest rank has the result
            rows.append(
                {
                    "kind": job["kind"],
                    "label": backend,
                    "bytes": job["bytes"],
                    "iteration": it,
                    "time_s": max(r["times_s"][it] for r in results),
                    "period_s": periods[it],
                    # CPU time of all ranks together in this iteration, and whether every
                    # rank got the exact sum (allreduce jobs only: None for the others)
                    "ranks_cpu_s": (
                        round(sum(r["cpu_s"][it] for r in results), 3) if all("cpu_s" in r for r in results) else None
                    ),
                    "exact": all(r["exact"][it] for r in results) if all("exact" in r for r in results) else None,
                    "lost_bytes": sum(r["lost_bytes"] for r in results),
                    # the congestion control the ranks' kernel TCP ran (Gloo's)
                    "tcp_cc": results[0].get("tcp_cc"),
                    "retransmits": sum(r["retransmits"] for r in results),
                    **counts,
                    # this iteration's CPU: ranks, switch, kernel, and whether it was CPU-bound
                    **cpu_shares(results, it),
                    # what rank 0 measured beyond the time (train: the time to accuracy)
                    **results[0].get("row", {}),
                }
            )
        t = [r["time_s"] for r in rows if r["label"] == backend]
        if job["kind"] == "train":
            tta = rows[-1].get("time_to_accuracy_s")
            reached = f"{tta:.2f} s to {job['train']['target']:.0%}" if tta is not None else "target not reached"
            log(f"{backend}: {job['train']['model']} on {len(hosts)} ranks, {t[-1]:.2f} s of steps, {reached}")
            continue
        log(f"{backend}: {job['bytes'] / 1e6:g} MB on {len(hosts)} ranks, {min(t):.3f}-{max(t):.3f} s")
    return rows


def allow_congestion_control(cc: str, proc: Path = Path("/proc/sys/net/ipv4")) -> None:
    """A namespace other than the machine's may only pick a congestion control that the
    machine's namespace allows (tcp_allowed_congestion_control; some kernels allow reno and
    their default alone): allow `cc` there if the kernel has it, else say which it has."""
    available = (proc / "tcp_available_congestion_control").read_text().split()
    if cc not in available:
        raise JobError(f"job.tcp_cc = {cc!r}: this kernel has {' '.join(available)} (modprobe tcp_{cc}?)")
    allowed = (proc / "tcp_allowed_congestion_control").read_text().split()
    if cc not in allowed:
        (proc / "tcp_allowed_congestion_control").write_text(" ".join([*allowed, cc]))


def run_point(
    scenario: Path,
    point: Point,
    out_dir: Path,
    log: Callable[[str], None] = print,
    timeout: float = 600.0,
) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    job = point.job
    timeout = float(job.get("timeout_s", timeout))
    with EmulatedNetwork(scenario, out_dir, overrides=point.overrides) as net:
        if job["kind"] in ("allreduce", "ps", "ddp", "train"):
            # Gloo's sockets take the namespace's default congestion control, which a new
            # namespace inherits from the machine's: pin it, so a verdict is not this host's.
            allow_congestion_control(job["tcp_cc"])
            for h in job["hosts"]:
                net.sysctl(h, "net.ipv4.tcp_congestion_control", job["tcp_cc"])
            rows = run_allreduce(net, job, point.root, log, timeout)
        else:
            hosts = sorted({h for f in job["flows"] for h in (f["src"], f["dst"])})
            kernel0 = _kernel_counters(net, hosts)
            rows = finish_flows(start_flows(net, job["flows"]), timeout)
            # the kernels' recovery over all the flows together (one run: every row the same)
            kernel = {k: v - kernel0[k] for k, v in _kernel_counters(net, hosts).items()}
            for r in rows:
                r.update(kernel)
                log(f"flow {r['label']}: {r['time_s']:.3f} s")
    switch = net.final_stats()
    summary = {
        "name": point.name,
        "params": dict(point.params),
        "job": job["kind"],
        "rows": rows,
        "drops": switch["drops"],
        "ecn_marks": switch["ecn_marks"],
        "packets": switch["packets"],
        "switch_cpu_seconds": switch["cpu_seconds"],
        # the receiving hosts' kernel input path, which a TUN write runs in the writer
        "switch_rx_cpu_seconds": switch.get("tun", {}).get("write_cpu_seconds", 0.0),
        "wall_seconds": switch["wall_seconds"],
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    import pandas as pd

    df = pd.DataFrame(rows)
    for k, v in point.params:
        df[k] = v
    df.insert(0, "run", point.name)
    df.to_csv(out_dir / "results.csv", index=False)
    return summary
