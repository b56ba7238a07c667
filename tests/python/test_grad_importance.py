"""DLCP's median-rule importance profiles (crates/gradwire-sim/models/importance/*.json) and
the rule that wrote them (tools/dnn_profiles/grad_importance.py).

The shipped files are checked without torch; the rule itself needs torch (skipped
without it), and regenerating a profile needs torchvision too (skipped without it).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "crates" / "gradwire-sim" / "models"
GENERATOR = REPO / "tools" / "dnn_profiles" / "grad_importance.py"
SHIPPED = sorted((MODELS_DIR / "importance").glob("*.json"))


def _generator():
    spec = importlib.util.spec_from_file_location("grad_importance", GENERATOR)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_importance_profile_matches_its_layer_profile():
    assert {p.stem for p in SHIPPED} == {"resnet18", "resnet50", "inception_v3"}
    for path in SHIPPED:
        imp = json.loads(path.read_text())
        layers = json.loads((MODELS_DIR / f"{path.stem}.json").read_text())["layers"]
        assert imp["model"] == path.stem
        assert [(lay["index"], lay["name"], lay["bytes"]) for lay in imp["layers"]] == [
            (lay["index"], lay["name"], lay["bytes"]) for lay in layers
        ]
        for lay in imp["layers"]:
            assert 0.0 <= lay["important_share"] <= 1.0
            assert len(lay["per_step"]) == len(imp["training"]["recorded_steps"])
        # a packet's mean |g| beats the median |g| more often than not: well above half
        assert 0.6 < imp["important_share_by_bytes"] < 0.95, path.stem


def test_the_rule_compares_each_packets_mean_with_the_sampled_median():
    torch = pytest.importorskip("torch")
    g = _generator()
    # 2 000 elements: the 0.1 % sample is elements 0 and 1000, lower median = |g[0]|
    flat = torch.ones(2000)
    flat[0], flat[1000] = 0.5, 3.0
    assert g.sample_median_abs(flat) == 0.5
    # segments of 100: the first (mean 0.995) and all others (1.0 or 1.02) pass 0.5
    assert g.important_share(flat, 100) == 1.0
    # scale half the segments down below the threshold
    flat = torch.cat([torch.full((1000,), 0.1), torch.full((1000,), 1.0)])
    assert g.sample_median_abs(flat) == pytest.approx(0.1)
    assert g.important_share(flat, 100) == 1.0  # 0.1 >= 0.1: ties are important
    flat[0] = 0.5  # the sample's lower median is now 0.5
    assert g.important_share(flat, 100) == 0.5
    # a ragged last segment counts as one segment
    assert g.important_share(torch.ones(250), 100) == 1.0
    assert g.important_share(torch.zeros(0), 100) == 0.0


def test_regenerating_resnet18_gives_the_shipped_file(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    g = _generator()
    assert g.main(["resnet18", "--steps", "5", "--record-every", "5", "--out-dir", str(tmp_path)]) == 0
    fresh = json.loads((tmp_path / "resnet18.json").read_text())
    shipped = json.loads((MODELS_DIR / "importance" / "resnet18.json").read_text())
    # the same seed and data: the first five steps' losses and the step-5 shares agree
    assert fresh["training"]["loss"] == shipped["training"]["loss"][:5]
    assert [lay["per_step"][0] for lay in fresh["layers"]] == [lay["per_step"][0] for lay in shipped["layers"]]
