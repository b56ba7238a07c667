"""The shipped per-layer DNN traffic profiles (crates/gradwire-sim/models/*.json).

Everything here reads the JSON through ``gradwire.models`` and needs no torch,
except the last test, which regenerates ResNet-18 with torch/torchvision and is
skipped when they are not installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

import gradwire.models as models

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "crates" / "gradwire-sim" / "models"
GENERATOR = REPO / "tools" / "dnn_profiles" / "generate.py"

# Reference parameter counts (torchvision docs; BERT-base encoder + pooler).
KNOWN_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "inception_v3": 27_161_264,  # torchvision's, with the auxiliary classifier
    "vgg16": 138_357_544,
    "alexnet": 61_100_840,
    "transformer": 109_482_240,
}

# Forward GFLOPs per sample (2 FLOPs per MAC) in the usual published ballpark.
FWD_GFLOPS_PER_SAMPLE = {
    "resnet18": (3.0, 4.5),
    "resnet50": (7.0, 9.0),
    "inception_v3": (10.0, 13.0),
    "vgg16": (28.0, 35.0),
    "alexnet": (1.0, 1.8),
    "transformer": (20.0, 26.0),
}


def test_all_profiles_shipped():
    assert set(models.list_profiles()) == set(KNOWN_PARAMS)


def test_unknown_profile_is_a_key_error():
    with pytest.raises(KeyError, match="resnet50"):
        models.load_profile("no-such-net")


def test_loader_accepts_case_and_suffix():
    assert models.load_profile("ResNet18.json")["model"] == "resnet18"


@pytest.mark.parametrize("name", sorted(KNOWN_PARAMS))
def test_profile(name):
    p = models.load_profile(name)
    assert p["model"] == name
    known = KNOWN_PARAMS[name]
    assert abs(p["total_params"] - known) / known < 0.01
    assert p["total_bytes"] == 4 * p["total_params"]

    layers = p["layers"]
    assert layers, "no layers"
    assert p["num_layers"] == len(layers)
    assert [lay["index"] for lay in layers] == list(range(len(layers)))
    assert sum(lay["params"] for lay in layers) == p["total_params"]
    assert sum(lay["bytes"] for lay in layers) == p["total_bytes"]
    for lay in layers:
        assert lay["params"] > 0
        assert lay["bytes"] == 4 * lay["params"]
        assert lay["fwd_flops"] >= 0 and lay["bwd_time_s"] >= 0
    assert len({lay["name"] for lay in layers}) == len(layers)

    # FLOPs and times.
    assert sum(lay["fwd_flops"] for lay in layers) == p["total_fwd_flops"]
    lo, hi = FWD_GFLOPS_PER_SAMPLE[name]
    assert lo <= p["total_fwd_flops"] / p["batch_size"] / 1e9 <= hi
    rate = p["device_flops"] * p["efficiency"]
    assert 0 < p["efficiency"] <= 1
    assert p["backward_time_s"] > 0
    assert math.isclose(p["backward_time_s"], 2 * p["total_fwd_flops"] / rate, rel_tol=1e-9)
    assert math.isclose(p["forward_time_s"], p["total_fwd_flops"] / rate, rel_tol=1e-9)
    for lay in layers:
        assert math.isclose(lay["bwd_time_s"], 2 * lay["fwd_flops"] / rate, rel_tol=1e-9, abs_tol=0)

    # Backward runs last layer first: ready offsets accumulate in reverse order.
    offsets = [lay["ready_offset_s"] for lay in layers]
    rev = offsets[::-1]
    assert all(a <= b for a, b in zip(rev, rev[1:])), "ready offsets not monotone in reverse"
    assert math.isclose(offsets[-1], layers[-1]["bwd_time_s"], rel_tol=1e-9)
    assert math.isclose(offsets[0], p["backward_time_s"], rel_tol=1e-9)
    assert offsets[0] > 0


def test_spot_values():
    r50 = models.load_profile("resnet50")
    assert 100e6 < r50["total_bytes"] < 104e6  # ~102 MB of fp32 gradients
    assert r50["layers"][0]["name"] == "conv1"  # input side first
    assert r50["layers"][-1]["name"] == "fc"
    bert = models.load_profile("transformer")
    assert bert["layers"][0]["name"].startswith("embeddings.")
    assert bert["layers"][-1]["name"] == "pooler.dense"
    inc = models.load_profile("inception_v3")
    assert any(lay["name"].startswith("AuxLogits.") for lay in inc["layers"])


def test_regenerated_resnet18_matches_shipped():
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    import torch

    spec = importlib.util.spec_from_file_location("dnn_profiles_generate", GENERATOR)
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen
    spec.loader.exec_module(gen)

    shipped = models.load_profile("resnet18")
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fresh = gen.build_profile(
            "resnet18",
            batch_size=shipped["batch_size"],
            device=shipped["device"],
            device_flops=shipped["device_flops"],
            efficiency=shipped["efficiency"],
        )
    finally:
        torch.set_num_threads(old_threads)
    fresh = json.loads(json.dumps(fresh))  # same types as the file

    for key in ("total_params", "total_bytes", "num_layers", "total_fwd_flops", "batch_size"):
        assert fresh[key] == shipped[key], key
    assert math.isclose(fresh["backward_time_s"], shipped["backward_time_s"], rel_tol=1e-9)
    for a, b in zip(fresh["layers"], shipped["layers"]):
        for key in ("index", "name", "type", "params", "bytes", "fwd_flops"):
            assert a[key] == b[key], (a["name"], key)
        for key in ("bwd_time_s", "ready_offset_s"):
            assert math.isclose(a[key], b[key], rel_tol=1e-9), (a["name"], key)
