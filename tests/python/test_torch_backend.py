"""The "gradwire" torch.distributed backend in real processes: every collective against
Gloo's result, DDP against DDP over Gloo, under torchrun and under `gradwire launch`."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from gradwire.launch import command, run_job

torch = pytest.importorskip("torch")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed has no Gloo backend here", allow_module_level=True)
pytest.importorskip("sklearn")

HERE = Path(__file__).parent


def torchrun(world: int, script: str, *args: str, timeout: float = 240) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world}",
        str(HERE / script),
        *args,
    ]
    r = run_job(cmd, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def launch(world: int, script: str, *args: str, timeout: float = 240) -> None:
    cmd = command([sys.executable, str(HERE / script), *args], world)
    r = run_job(cmd, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def ranks(tmp: Path, world: int) -> list[dict]:
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("runner, world", [(torchrun, 2), (launch, 3)])
def test_every_collective_matches_gloo(tmp_path, runner, world):
    runner(world, "torch_backend_worker.py", str(tmp_path))
    for r in ranks(tmp_path, world):
        assert r["failures"] == []
        if hasattr(torch.distributed.Backend, "_ensure_backend_registered"):  # torch reads entry points
            assert r["imported_before"] is False  # init_process_group found "gradwire" by itself
        for call in (
            "all_reduce max torch.float32",
            "all_reduce sum torch.int64",
            "all_gather torch.bfloat16",
            "reduce_scatter",
            "reduce_scatter_tensor",
            "scatter",
            "gather",
            "all_gather_object",
            "barrier",
        ):
            assert call in r["done"]
        for call in (
            "isend/irecv torch.uint8",
            "isend/irecv torch.bfloat16",
            "send/recv tagged",
            "recv any source",
            "batch_isend_irecv",
            "send/recv_object_list",
            "all_to_all",
            "all_to_all_single torch.bfloat16",
            "all_to_all_single uneven",
            "allreduce_coalesced",
            "all_gather_into_tensor coalesced",
            "reduce_scatter_tensor coalesced",
            "monitored_barrier",
        ):
            # older torch: Gloo lacks all_to_all (2.11), torch runs monitored_barrier on Gloo only
            assert call in r["done"] or any(u.startswith(f"{call}: torch ") for u in r["unchecked"]), call
        assert r["errors"]["allreduce_sparse"] != "no error"
        assert r["calls"] > 0
        assert r["waiter_threads_sync"] == 0  # synchronous calls wait in the caller's thread
        assert r["async_ok"] is True
        assert r["resizable"] == ["all_reduce", "broadcast", "all_gather_into_tensor"]


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_on_gradwire_has_gloo_losses_step_for_step(tmp_path, world):
    plan = {"out": str(tmp_path), "steps": 20, "batch": 16, "bucket_mb": 0.02}
    torchrun(world, "torch_ddp_worker.py", json.dumps(plan))
    rs = ranks(tmp_path, world)
    for r in rs:
        for name in ("gradwire", "hook", "sched", "tuned", "autobyte", "autobyte-bg"):
            assert len(r[name]["losses"]) == 20
            # Summation order differs from Gloo's: equal to float rounding.
            torch.testing.assert_close(r[name]["losses"], r["gloo"]["losses"], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(
                torch.tensor(r[name]["params"]),
                torch.tensor(r["gloo"]["params"]),
                rtol=1e-4,
                atol=1e-5,
            )
            assert r[name]["replicas_identical"]
    # The losses moved: the comparison is not between two untrained models.
    assert rs[0]["gloo"]["losses"][-1] < rs[0]["gloo"]["losses"][0]
    # Bucket priority: every rank issued the same calls in the same order, and the 16 KiB
    # of back-layer chunks held back went on the wire after the front bucket.
    orders = [[tuple(e) for e in r["hook"]["issue_order"]] for r in rs]
    assert all(o == orders[0] for o in orders)
    order = orders[0]
    front = max(b for b, _ in order)
    back_after = [e for e in order[order.index((front, 0)) :] if e[0] < front]
    assert len(back_after) == 2, order
    # ByteScheduler: the same calls in the same order on every rank; back-layer partitions
    # the credit held back went after the front bucket's first partition.
    orders = [[tuple(e) for e in r["sched"]["issue_order"]] for r in rs]
    assert all(o == orders[0] for o in orders)
    order = orders[0]
    front = max(b for b, _ in order)
    assert [e for e in order[order.index((front, 0)) :] if e[0] < front], order
    # Online tuning: a grid of three tried in rounds of 3 steps, the same choice on every
    # rank, and the fastest one kept once the grid is done.
    for r in rs:
        hist = r["tuned"]["history"]
        assert [h[1:3] for h in hist[:3]] == [[8192, 8192], [4096, 4096], [8192, 16384]], hist
        assert r["tuned"]["config"] == rs[0]["tuned"]["config"]
    # AutoByte online (fine-tuning in the round, or in a thread on rank 0): a round every 3
    # steps (6 in 20 steps), each with what every rank measured; the same configuration on
    # every rank; rank 0's loop saw every round.
    for r, name in itertools.product(rs, ("autobyte", "autobyte-bg")):
        ab = r[name]
        assert [h[0] for h in ab["history"]] == [4, 7, 10, 13, 16, 19], ab["history"]
        assert ab["config"] == rs[0][name]["config"]
        obs = ab["observation"]
        assert obs == rs[0][name]["observation"]  # gathered: the same on every rank
        assert obs["workers"] == world and len(obs["upload_gbps"]) == world
        assert all(x > 0 for x in obs["upload_gbps"] + obs["download_gbps"]), obs
        assert len(obs["backward_ms"]) > 1, "one entry per DDP bucket (0.02 MB buckets)"
        assert all(len(b) == world and min(b) >= 0 for b in obs["backward_ms"])
        assert sum(map(sum, obs["backward_ms"])) > 0
    assert rs[0]["autobyte"]["groups_observed"] == rs[0]["autobyte-bg"]["groups_observed"] == 6


FSDP_KINDS = ["full_shard", "shard_grad_op", "no_shard", "use_orig_params", "fsdp2"]


@pytest.mark.parametrize("world", [2, 3])
def test_fsdp1_and_fsdp2_on_gradwire_have_gloo_losses(tmp_path, world):
    """FSDP1 under every sharding strategy (the ones that free and regrow their flat
    parameters' storage included) and FSDP2's fully_shard train on the gradwire group with
    Gloo's losses, step for step, over 20 steps."""
    torchrun(world, "torch_fsdp_worker.py", json.dumps({"out": str(tmp_path), "steps": 20, "kinds": FSDP_KINDS}))
    for r in ranks(tmp_path, world):
        for kind in FSDP_KINDS:
            mine, ref = r[f"{kind} gradwire"], r[f"{kind} gloo"]
            assert "error" not in mine, (kind, mine)
            assert "error" not in ref, (kind, ref)
            torch.testing.assert_close(mine["losses"], ref["losses"], rtol=1e-6, atol=0)
            torch.testing.assert_close(torch.tensor(mine["params"]), torch.tensor(ref["params"]), rtol=1e-5, atol=1e-6)
        assert r["full_shard gloo"]["losses"][-1] != r["full_shard gloo"]["losses"][0]


def test_torch_timeout_is_the_backends(tmp_path):
    """init_process_group(timeout=T) is how long a call waits for a late rank: under 3 s a
    rank 6 s late fails the call on time with an error that says so; under 20 s a rank 4 s
    late is waited for. monitored_barrier names the rank that missed it. A group made again
    on the same store works."""
    torchrun(2, "torch_timeout_worker.py", json.dumps({"out": str(tmp_path), "timeout": 3, "delay": 6}))
    r0 = ranks(tmp_path, 2)[0]
    assert r0["error"] is not None and r0["error"].startswith("PeerTimeout: timed out after 3.0 s"), r0
    assert 2.5 < r0["seconds"] < 5.5, r0
    plan = {"out": str(tmp_path), "timeout": 20, "delay": 4, "barrier_delay": 3, "reinit": True}
    torchrun(2, "torch_timeout_worker.py", json.dumps(plan))
    r0, r1 = ranks(tmp_path, 2)
    for r in (r0, r1):
        assert r["error"] is None and r["sum"] == 2.0 and r["is_completed"] is True, r
    assert r0["seconds"] > 3.5, r0  # it did wait for the late rank
    if r0["barrier"] == "ValueError: monitored_barrier is only implemented for GLOO backend.":
        pytest.skip(f"torch {torch.__version__} refuses monitored_barrier on any backend but Gloo")
    assert r0["barrier"] == "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 1000 ms", r0
    assert r0["barrier_seconds"] < 2.5, r0
    assert r0["reinit_sum"] == r1["reinit_sum"] == 21.0, (r0, r1)  # destroy, init again on the same store


def test_options_are_checked_and_read_from_the_environment(monkeypatch):
    import gradwire.torch as gt

    assert "gradwire" in torch.distributed.Backend.backend_list
    monkeypatch.setenv("GRADWIRE_LOSS_BOUND", "0.02")
    monkeypatch.setenv("GRADWIRE_ALGORITHM", "tree")
    o = gt.Options(transport="dlcp").resolved()
    assert (o.loss_bound, o.algorithm, o.transport, o.inject_loss) == (
        0.02,
        "tree",
        "dlcp",
        0.0,
    )
    assert gt.Options(loss_bound=0.0).resolved().loss_bound == 0.0  # code beats the environment
    monkeypatch.setenv("GRADWIRE_LOSS_BOUND", "lots")
    with pytest.raises(ValueError, match="GRADWIRE_LOSS_BOUND='lots'"):
        gt.Options().resolved()
    with pytest.raises(ValueError, match="loss_bound must be in"):
        gt.Options(loss_bound=1.5).resolved()
    with pytest.raises(ValueError, match="unknown algorithm"):
        gt.Options(algorithm="carrier-pigeon", loss_bound=0.0).resolved()


AUTH_WORKER = """
import json, os, sys
import torch, torch.distributed as dist
import gradwire.torch
out = {"error": None}
try:
    dist.init_process_group("gradwire")
    t = torch.full((3,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    out["sum"] = t.tolist()
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(out, f)
"""


def test_authentication_under_the_torch_backend_needs_a_token_of_its_own(tmp_path, monkeypatch):
    """The backend's default token is rank 0's random one, sent in clear through torch's
    store: with GRADWIRE_AUTH=1 and no GRADWIRE_TOKEN it refuses; with a GRADWIRE_TOKEN (which
    `gradwire launch` sets) the job authenticates and the token never enters the store."""
    script = tmp_path / "auth_worker.py"
    script.write_text(AUTH_WORKER)
    monkeypatch.setenv("GRADWIRE_AUTH", "1")
    monkeypatch.delenv("GRADWIRE_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    torchrun(2, str(script), str(tmp_path))
    for r in ranks(tmp_path, 2):
        assert r["error"] is not None and "needs GRADWIRE_TOKEN" in r["error"], r
    launch(2, str(script), str(tmp_path))
    for r in ranks(tmp_path, 2):
        assert r["error"] is None, r
        assert r["sum"] == [3.0, 3.0, 3.0]
