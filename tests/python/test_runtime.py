"""The socket runtime between real processes: loopback and one network namespace per rank.

Each rank is a separate Python process (tests/python/runtime_worker.py) that joins the job
through the torchrun-style environment and runs a plan of collectives; the test then
checks every rank's results against numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import wait_all
from netns import NetnsCluster, netns_available, netns_unavailable_reason
from runtime_worker import data

from gradwire.launch import free_port

WORKER = str(Path(__file__).with_name("runtime_worker.py"))
HERE = str(Path(__file__).parent)


def env_for(rank: int, world: int, addr: str, port: int, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), GRADWIRE_TOKEN="t0k")
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_job(
    tmp: Path,
    world: int,
    plan: dict,
    *,
    netns: NetnsCluster | None = None,
    timeout: float = 120,
    env_extra: dict[int, dict[str, str]] | None = None,
) -> list[dict]:
    plan = {**plan, "out": str(tmp)}
    port = free_port()
    addr = netns.addr(0) if netns else "127.0.0.1"
    procs = []
    for r in range(world):
        env = env_for(r, world, addr, port, **(env_extra or {}).get(r, {}))
        argv = [sys.executable, WORKER, json.dumps(plan)]
        if netns:
            procs.append(netns.exec(r, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        else:
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = wait_all(procs, timeout)
    results = []
    for r in range(world):
        f = tmp / f"rank{r}.json"
        if not f.exists():
            results.append({"rank": r, "missing": True, "log": logs[r], "returncode": procs[r].returncode})
            continue
        res = json.loads(f.read_text())
        res["arrays"] = dict(np.load(tmp / f"rank{r}.npz"))
        res["log"] = logs[r]
        results.append(res)
    return results


def expected_sum(world: int, elems: int, call: int) -> np.ndarray:
    return np.sum([data(r, elems, call) for r in range(world)], axis=0, dtype=np.float32)


ALLREDUCE_PLAN = [
    {"op": "allreduce", "algorithm": "ring"},
    {"op": "allreduce", "algorithm": "tree"},
    {"op": "allreduce", "algorithm": "ps"},
    {"op": "allreduce", "algorithm": "rat"},
    {"op": "allreduce_async", "algorithm": "ring"},
    {"op": "broadcast", "root": 1},
]


def check_allreduce_plan(results: list[dict], world: int, elems: int) -> None:
    for res in results:
        assert not res.get("missing"), res
        assert res["error"] is None, (res["rank"], res["error"], res["log"][-2000:])
    for i, call in enumerate(ALLREDUCE_PLAN):
        if call["op"] == "broadcast":
            want = data(call["root"], elems, i)
        else:
            want = expected_sum(world, elems, i)
        for res in results:
            got = res["arrays"][f"call{i}"]
            np.testing.assert_array_equal(got, want, err_msg=f"call {i} {call} rank {res['rank']}")
        # Bitwise equal across ranks.
        first = results[0]["arrays"][f"call{i}"].tobytes()
        assert all(r["arrays"][f"call{i}"].tobytes() == first for r in results)
        for res in results:
            assert res["reports"][i]["bytes_lost"] == 0


def racks(world: int) -> str:
    return ",".join(str(r * 2 // world) for r in range(world))


@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_collective_is_exact_between_processes_on_loopback(tmp_path, world):
    elems = 100_003
    plan = {"elems": elems, "calls": ALLREDUCE_PLAN, "init": {"topology": racks(world), "peer_timeout": 60}}
    results = run_job(tmp_path, world, plan)
    check_allreduce_plan(results, world, elems)
    # Loopback: 64 KiB segments, and the loopback line rate (there is no link speed).
    assert {(r["mss"], r["line_rate_gbps"]) for r in results} == {(65472, 100.0)}


needs_netns = pytest.mark.skipif(not netns_available(), reason=netns_unavailable_reason() or "")


@needs_netns
@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_collective_is_exact_across_network_namespaces(tmp_path, world):
    elems = 50_001
    plan = {"elems": elems, "calls": ALLREDUCE_PLAN, "init": {"topology": racks(world), "peer_timeout": 60}}
    with NetnsCluster(world) as cluster:
        results = run_job(tmp_path, world, plan, netns=cluster)
    check_allreduce_plan(results, world, elems)
    # A 1500-byte fabric: 1500-byte packets; DLCP starts at the veth's reported 10 Gbit/s.
    assert {(r["mss"], r["line_rate_gbps"]) for r in results} == {(1440, 10.0)}


def test_lossy_push_meets_its_bound_and_reports_exact_bubbles(tmp_path):
    world, elems, bound = 4, 200_000, 0.05
    # Every rank drops 2% of the datagrams it sends to any peer.
    imp = {str(p): [0.02, 0.0] for p in range(world)}
    plan = {
        "elems": elems,
        "calls": [{"op": "push", "loss_bound": bound}, {"op": "allreduce", "algorithm": "ring", "loss_bound": bound}],
        # 1500-byte packets: hundreds of datagrams per transfer, so 2% loss always hits
        # (loopback's default 64 KiB segments would make ~13 per push).
        "init": {"impair": {int(k): tuple(v) for k, v in imp.items()}, "ps_servers": 1, "mss": 1440},
    }
    # JSON keys must be strings; the worker passes `init` straight to gradwire.init.
    plan["init"]["impair"] = {k: v for k, v in imp.items()}
    results = run_job(tmp_path, world, plan, env_extra=None)
    for res in results:
        assert res["error"] is None, (res["rank"], res["error"], res["log"][-2000:])
    assert sum(r["counters"]["injected_drops"] for r in results) > 0
    # Push: one server (rank 0) holds its own data plus each worker's with bubbles zeroed.
    server = results[0]
    rep = server["reports"][0]
    assert rep["min_delivered_fraction"] >= 1 - bound
    want = data(0, elems, 0).copy()
    for w in range(1, world):
        d = data(w, elems, 0).copy()
        for src, off, ln in rep["bubbles"]:
            if src == w:
                d[off // 4 : (off + ln) // 4] = 0
        want += d
    np.testing.assert_array_equal(server["arrays"]["call0"], want)
    assert rep["bytes_lost"] == sum(b[2] for b in rep["bubbles"])
    # Lossy ring allreduce: bound met everywhere, and every rank ends with the same bits.
    for res in results:
        assert res["reports"][1]["min_delivered_fraction"] >= 1 - bound
    first = results[0]["arrays"]["call1"].tobytes()
    assert all(r["arrays"]["call1"].tobytes() == first for r in results)
    exact = expected_sum(world, elems, 1)
    close = np.isclose(results[0]["arrays"]["call1"], exact).mean()
    assert close >= 1 - 2 * bound * world, close


def test_torch_tensors_work_in_place_even_when_not_contiguous(tmp_path):
    torch = pytest.importorskip("torch")
    del torch
    world, elems = 2, 10_000
    plan = {"elems": elems, "calls": [{"op": "allreduce_torch", "algorithm": "ring"}]}
    results = run_job(tmp_path, world, plan)
    for res in results:
        assert res["error"] is None, res["error"]
        np.testing.assert_array_equal(res["arrays"]["call0"], expected_sum(world, elems, 0))


def test_a_rank_with_the_wrong_token_is_refused_and_the_job_still_forms(tmp_path):
    world = 2
    port = free_port()
    plan = json.dumps({"out": str(tmp_path), "elems": 1000, "calls": [{"op": "allreduce"}]})

    def rank(r: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, WORKER, plan],
            env=env_for(r, world, "127.0.0.1", port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    # Rank 0 waits for rank 1; an intruder with another token claims to be rank 1 first.
    good = [rank(0)]
    intruder = subprocess.run(
        [sys.executable, "-c", "import gradwire; gradwire.init(timeout=10)"],
        env=env_for(1, world, "127.0.0.1", port, GRADWIRE_TOKEN="wrong"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert intruder.returncode != 0
    assert "Refused" in intruder.stderr and "token does not match" in intruder.stderr, intruder.stderr[-1500:]
    good.append(rank(1))
    for p in good:
        p.communicate(timeout=60)
    for r in range(world):
        res = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert res["error"] is None, res


def joiner_refused(joiner_env: dict[str, str]) -> str:
    """Starts rank 0 of a 2-rank job and one joiner with `joiner_env`; the joiner must fail.
    Returns the joiner's stderr."""
    port = free_port()
    master = subprocess.Popen(
        [sys.executable, "-c", "import gradwire; gradwire.init(timeout=8)"],
        env=env_for(0, 2, "127.0.0.1", port),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wrong = subprocess.run(
            [sys.executable, "-c", "import gradwire; gradwire.init(timeout=5)"],
            env={**joiner_env, "MASTER_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        master.kill()
        master.communicate()
    assert wrong.returncode != 0, wrong.stdout[-1500:]
    return wrong.stderr


def test_a_rank_with_the_wrong_world_size_is_refused(tmp_path):
    err = joiner_refused(env_for(1, 3, "127.0.0.1", 0))
    assert "WORLD_SIZE is 3 but the job has 2 ranks" in err, err[-1500:]


def test_the_job_agrees_on_one_segment_size(tmp_path):
    script = "import gradwire; c = gradwire.init(timeout=20); print('mss', c.mss); c.close()"

    def job(**extra: str) -> list[int]:
        port = free_port()
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script],
                env=env_for(r, 2, "127.0.0.1", port, **extra),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for r in range(2)
        ]
        outs = [p.communicate(timeout=60)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        return [int(o.split("mss")[-1].split()[0]) for o in outs]

    # From the path MTU: loopback's 64 KiB (capped at 65535 by IP) less 20 + 8 + 32 header bytes.
    assert job() == [65472, 65472]
    assert job(GRADWIRE_MSS="8940") == [8940, 8940]


def test_a_rank_with_another_segment_size_is_refused(tmp_path):
    err = joiner_refused(env_for(1, 2, "127.0.0.1", 0, GRADWIRE_MSS="1440"))
    assert "asks for mss=1440 but rank 0 chooses it from the path MTU" in err, err[-1500:]


def test_a_rank_that_dies_mid_job_gives_the_others_an_error_within_the_timeout(tmp_path):
    world, elems = 3, 50_000
    plan = {"elems": elems, "calls": [{"op": "allreduce"}, {"op": "allreduce"}], "init": {"peer_timeout": 3.0}}
    t0 = time.monotonic()
    # Rank 2 finishes call 0, then exits abruptly before call 1.
    plan2 = {**plan, "die_after": 1}
    port = free_port()
    procs = []
    for r in range(world):
        p = plan2 if r == 2 else plan
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, json.dumps({**p, "out": str(tmp_path)})],
                env=env_for(r, world, "127.0.0.1", port),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for p in procs:
        p.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    assert procs[2].returncode == 3
    for r in range(2):
        res = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert res["error"] is not None, f"rank {r} finished without rank 2"
        assert "PeerLost" in res["error"] or "PeerTimeout" in res["error"], res["error"]
        assert "rank 2" in res["error"] or "ranks [" in res["error"], res["error"]
    assert elapsed < 30, elapsed


def test_bad_arguments_get_clear_errors():
    import gradwire

    with pytest.raises(ValueError, match="WORLD_SIZE is not set"):
        env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE",)}
        os.environ.pop("WORLD_SIZE", None)
        try:
            gradwire.Communicator("127.0.0.1", 1, 0)
        finally:
            os.environ.clear()
            os.environ.update(env)
    with pytest.raises(ValueError, match="mss"):
        gradwire.Communicator("127.0.0.1", 1, 0, 1, mss=7)
    with pytest.raises(ValueError, match="mss"):
        gradwire.Communicator("127.0.0.1", 1, 0, 1, mss=70_000)
    with pytest.raises(ValueError, match="unknown transport"):
        gradwire.Communicator("127.0.0.1", 1, 0, 1, transport="tcp")
    with pytest.raises(ValueError, match="pace_burst_us"):
        gradwire.Communicator("127.0.0.1", 1, 0, 1, pace_burst_us=0)
    with pytest.raises(ValueError, match="topology"):
        gradwire.Communicator("127.0.0.1", 1, 0, 1, topology="a,b")
