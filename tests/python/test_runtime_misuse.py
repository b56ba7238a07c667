"""The runtime under misuse and attack: each test drives real processes into a
hole that once crashed, hung or corrupted a result, and checks it now ends in the right
result or a clear error. Crashes are caught as the rank's exit status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import wait_all

from gradwire.launch import free_port

WORKER = str(Path(__file__).with_name("misuse_worker.py"))
HERE = str(Path(__file__).parent)


def run_ranks(
    world: int,
    plan: dict,
    *,
    timeout: float = 120,
    token: str = "misuse",
    env: dict | None = None,
    env_per_rank: dict | None = None,
) -> list[dict]:
    """Runs `world` ranks of misuse_worker.py; per rank: returncode, result (or None), log."""
    port = free_port()
    procs = []
    extra = env
    for r in range(world):
        env = dict(os.environ)
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(r),
            WORLD_SIZE=str(world),
            GRADWIRE_TOKEN=token,
            PYTHONPATH=HERE + os.pathsep + env.get("PYTHONPATH", ""),
        )
        env.update(extra or {})
        env.update((env_per_rank or {}).get(r, {}))
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, json.dumps(plan)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    out = []
    for r, (p, log) in enumerate(zip(procs, wait_all(procs, timeout))):
        lines = [ln for ln in log.splitlines() if ln.startswith("RESULT ")]
        out.append(
            {
                "rank": r,
                "returncode": p.returncode,
                "log": log,
                "result": json.loads(lines[-1][7:]) if lines else None,
            }
        )
    return out


def describe(rc: int) -> str:
    return f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"


@pytest.mark.parametrize("elems", [20_000, 4_000_000], ids=["80KB", "16MB"])
def test_a_dropped_async_handle_neither_crashes_nor_corrupts_the_peer(elems):
    """Issue 19.1: the call owns its buffer until it completes, whatever happens to the
    handle. Before the fix the 16 MB case segfaulted and the 80 KB case gave the peer
    garbage with no error."""
    plan = {"scenario": "dropped_handles", "elems": elems, "calls": 3}
    ranks = run_ranks(2, plan)
    for r in ranks:
        assert r["returncode"] == 0, f"rank {r['rank']} {describe(r['returncode'])}: {r['log'][-1500:]}"
        assert r["result"]["error"] is None, r["result"]
        assert r["result"]["wrong"] == [], r["result"]["wrong"]
        assert r["result"]["last"] == [1.0] * 8


MISMATCHES = {
    "sizes": ({"elems": 1000}, {"elems": 1001}, "element count"),
    "algorithms": ({"algorithm": "ring"}, {"algorithm": "tree"}, "algorithm"),
    "same_bytes_other_dtype": (
        {"elems": 2000},
        {"elems": 1000, "dtype": "float64"},
        "dtype",
    ),
    "allreduce_vs_broadcast": ({}, {"op": "broadcast"}, "operation"),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_mismatched_calls_fail_fast_on_every_rank_naming_the_field(case):
    """Issue 19.2: before the fix these hung past peer_timeout (or, float32 x 2N against
    float64 x N, returned different garbage on each rank as success)."""
    a, b, field = MISMATCHES[case]
    plan = {
        "scenario": "mismatch",
        "elems": 1000,
        "per_rank": {"0": a, "1": b},
        "init": {"peer_timeout": 120.0},
    }
    # Within the job's 60 s limit, so long before peer_timeout: the mismatch itself ends it.
    ranks = run_ranks(2, plan, timeout=60)
    for r in ranks:
        assert r["returncode"] == 0, f"rank {r['rank']} {describe(r['returncode'])}: {r['log'][-1500:]}"
        err = r["result"]["error"]
        assert err is not None and err.startswith("CallMismatch"), f"rank {r['rank']}: {r['result']}"
        assert field in err and "ranks 0 and 1" in err.replace("ranks 1 and 0", "ranks 0 and 1"), err


def test_forged_datagrams_with_the_session_id_are_dropped_and_counted():
    """Issue 19.4: 128 forged datagrams per rank carrying the session id, sent ahead for
    the next calls, replaced their results on every rank with bytes_lost = 0. Now a
    datagram counts only from the address its peer registered at rendezvous."""
    plan = {"scenario": "forged", "elems": 1000, "calls": 4, "transfers": 32}
    ranks = run_ranks(2, plan)
    for r in ranks:
        assert r["returncode"] == 0, f"rank {r['rank']} {describe(r['returncode'])}: {r['log'][-1500:]}"
        res = r["result"]
        assert res["error"] is None, res
        assert res["wrong"] == [], res["wrong"]
        assert res["counters"].get("wrong_source", 0) >= 4 * 32, res["counters"]


def spoof_available() -> bool:
    import socket

    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not spoof_available(), reason="needs a raw socket (root) to spoof source addresses")
@pytest.mark.parametrize("auth", [False, True], ids=["address-check-only", "authenticated"])
def test_spoofed_source_addresses_are_stopped_only_by_authentication(auth):
    """Datagrams forged with the peer's source address pass the address check: without
    authentication they replace results (which is why the authenticated mode exists);
    with GRADWIRE_AUTH=1 every one fails its tag and the results stay exact."""
    plan = {
        "scenario": "forged",
        "elems": 1000,
        "calls": 4,
        "transfers": 32,
        "spoof": True,
        "tag_bytes": 16 if auth else 0,
    }
    ranks = run_ranks(2, plan, env={"GRADWIRE_AUTH": "1" if auth else "0"})
    for r in ranks:
        assert r["returncode"] == 0, f"rank {r['rank']} {describe(r['returncode'])}: {r['log'][-1500:]}"
        res = r["result"]
        assert res["error"] is None, res
        if auth:
            assert res["wrong"] == [], res["wrong"]
            assert res["counters"]["auth_failures"] >= 4 * 32, res["counters"]
    if not auth:
        assert any(r["result"]["wrong"] for r in ranks), "spoofed datagrams were expected to get through"


def test_ranks_that_disagree_on_authentication_refuse_each_other():
    plan = {
        "scenario": "mismatch",
        "elems": 10,
        "per_rank": {"0": {}, "1": {}},
        "init": {"timeout": 5.0},
    }
    ranks = run_ranks(2, plan, env_per_rank={1: {"GRADWIRE_AUTH": "1"}})
    errors = [r["result"]["error"] or "" for r in ranks]
    assert any("GRADWIRE_AUTH must also agree" in e for e in errors), errors


def test_a_rank_of_another_torchrun_job_on_the_same_port_is_refused():
    """Issue 19.5: with no GRADWIRE_TOKEN, a rank of job B that picked job A's
    MASTER_PORT joined job A and got its results. The default token now comes from
    torchrun's TORCHELASTIC_RUN_ID (and `gradwire launch` hands out a random one)."""
    port = free_port()
    plan = {
        "scenario": "mismatch",
        "elems": 10,
        "per_rank": {"0": {}, "1": {}},
        "init": {"timeout": 20.0},
    }

    def rank(r: int, run_id: str, timeout: float = 20.0) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "GRADWIRE_TOKEN"}
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(r),
            WORLD_SIZE="2",
            TORCHELASTIC_RUN_ID=run_id,
            PYTHONPATH=HERE + os.pathsep + env.get("PYTHONPATH", ""),
        )
        p = {**plan, "init": {"timeout": timeout}}
        return subprocess.Popen(
            [sys.executable, WORKER, json.dumps(p)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    a0 = rank(0, "job-a")
    time.sleep(1.0)
    intruder = rank(1, "job-b", timeout=8.0)
    out_b, _ = intruder.communicate(timeout=60)
    a1 = rank(1, "job-a")
    out_a0, _ = a0.communicate(timeout=60)
    out_a1, _ = a1.communicate(timeout=60)
    result_b = json.loads([ln for ln in out_b.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert result_b["error"] and "token does not match" in result_b["error"], result_b
    for out in (out_a0, out_a1):
        res = json.loads([ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1][7:])
        assert res["error"] is None and res["sum"] == 20.0, res


def test_result_loss_bound_bounds_the_share_of_elements_missing_a_contribution():
    """Issue 19.6: loss_bound applies per transfer (4 ranks, 5 %: up to 8.4 % of elements
    lacked a contribution); result_loss_bound bounds the result instead."""
    world, elems, bound = 4, 400_000, 0.05
    plan = {
        "scenario": "result_bound",
        "elems": elems,
        "calls": 8,
        "bound": bound,
        "algorithms": ["ring", "tree", "ps", "rat"],
        "init": {
            "impair": {r: (0.05, 0.0) for r in range(world)},
            "topology": "0,0,1,1",
            "mss": 1440,
        },
    }
    ranks = run_ranks(world, plan)
    lost_any = False
    for call in range(plan["calls"]):
        missing = np.zeros(elems, bool)
        for r in ranks:
            assert r["result"] and r["result"]["error"] is None, r["log"][-1500:]
            for a, b in r["result"]["bubbles"][call]:
                missing[a:b] = True
        lost_any |= bool(missing.any())
        assert missing.mean() <= bound, f"call {call}: {missing.mean():.4f} of the elements lack a contribution"
    assert lost_any, "the injected loss never cost an element: the test checks nothing"


def test_an_authenticated_job_keeps_its_packet_size_for_large_segments():
    """The tag rides after the payload: with the loopback MSS (65472) it must not push a
    datagram past UDP's 65507 bytes (which hung the first authenticated benchmark)."""
    plan = {"scenario": "mismatch", "elems": 1_000_000, "per_rank": {"0": {}, "1": {}}, "init": {"peer_timeout": 20.0}}
    ranks = run_ranks(2, plan, env={"GRADWIRE_AUTH": "1"}, timeout=90)
    for r in ranks:
        assert r["result"] and r["result"]["error"] is None and r["result"]["sum"] == 2_000_000.0, r["log"][-1500:]
        assert r["result"]["counters"]["auth_failures"] == 0


@pytest.mark.skipif(not spoof_available(), reason="needs a raw socket (root) to spoof source addresses")
@pytest.mark.parametrize(
    "mss,auth",
    [(1440, True), (8940, True), (65456, True), (65456, False)],
    ids=["1440-auth", "8940-auth", "65456-auth", "65456-plain"],
)
def test_forgeries_during_calls_never_reach_an_authenticated_result(mss, auth):
    """Issue 26.1: a forger with root copies the headers of the coming calls' data segments
    (session, flow, segment boundary and length) and sends them from the peers' spoofed data
    addresses while 3 ranks run ring, tree, RAT and PS allreduces. Authenticated, every
    result is exact on every rank whatever the segment size: 1440 and 8940 (genuine data
    arrives in GRO batches, forgeries one at a time between them) and 65456 (large enough
    for the direct read into place, which an authenticated job no longer uses: it placed
    forged payloads before their tag was checked). Unauthenticated, the same forgeries
    replace results: what an unauthenticated job trusts."""
    plan = {
        "scenario": "forged_during_calls",
        "elems": 3 * 65456,  # 256 KiB per rank's chunk
        "algorithms": ["ring", "tree", "rat", "ps"],
        "calls": 3,
        "auth": auth,
        "init": {"mss": mss, "topology": "0,0,1"},
    }
    ranks = run_ranks(3, plan, env={"GRADWIRE_AUTH": "1" if auth else "0"}, timeout=180)
    for r in ranks:
        assert r["returncode"] == 0, f"rank {r['rank']} {describe(r['returncode'])}: {r['log'][-1500:]}"
        assert r["result"]["error"] is None, r["result"]
    forged = int(ranks[0]["result"]["forger"].split()[-1])
    assert forged > 0, "the forger sent nothing"
    if auth:
        for r in ranks:
            assert r["result"]["wrong"] == [], f"rank {r['rank']}: {r['result']['wrong']}"
        assert sum(r["result"]["counters"]["auth_failures"] for r in ranks) > 0, "no forgery arrived"
    else:
        assert any(r["result"]["wrong"] for r in ranks), "spoofed datagrams were expected to replace results"


@pytest.mark.parametrize("any_thread", [False, True], ids=["refused", "any_thread-in-turns"])
def test_two_threads_with_calls_of_one_shape_never_swap_data(any_thread):
    """Issue 26.4: two threads issuing calls of the same shape got each other's data (a
    thread saw 1 + 10 = 11). Now a communicator takes calls from the thread of its first
    call and refuses others by name; with any_thread=True the program's own rule orders
    the calls alike on every rank (here: turns A, B, A, B) and every result is exact."""
    plan = {"scenario": "two_threads", "elems": 1000, "calls": 4, "init": {"any_thread": any_thread}}
    ranks = run_ranks(2, plan, timeout=60)
    for r in ranks:
        assert r["returncode"] == 0, f"rank {r['rank']} {describe(r['returncode'])}: {r['log'][-1500:]}"
        res = r["result"]
        assert res["error"] is None, res
        assert res["wrong"] == [], res["wrong"]
        if any_thread:
            assert res["errors"] == [], res["errors"]
        else:
            assert len(res["errors"]) == 1, res["errors"]
            assert res["errors"][0].startswith("A: RuntimeError"), res["errors"]
            assert 'thread "MainThread"' in res["errors"][0] and 'thread "A" is refused' in res["errors"][0]
