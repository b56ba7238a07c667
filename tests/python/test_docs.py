"""The docs stay true: docs/scenarios.md's example runs and every key is documented;
the crates have the layers docs/ARCHITECTURE.md draws (no import circle)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradwire import Simulation, load_scenario

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"

pytestmark = pytest.mark.skipif(not DOC.is_file(), reason="docs/scenarios.md not in this checkout")


def _toml_blocks():
    return re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_complete_example_loads_and_builds():
    example = _toml_blocks()[-1]
    runs = load_scenario(example, [])
    assert [r.name for r in runs] == ["kind=newreno", "kind=dctcp"]
    for r in runs:
        Simulation(r)


def _keys(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _keys(v, f"{prefix}{k}.")
            yield k
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v, prefix)


def test_every_schema_key_is_documented():
    """Every key of a fully populated typed scenario appears as `key` (or a table as
    `[key]`) in the doc."""
    text = (
        '[workload]\nkind = "flows"\nflows = [{src = 0, dst = 1, bytes = 1000}]\n'
        '[[failures]]\nat_us = 1.0\nnode = "spine0"\n'
    )
    cfg = load_scenario(text, [])[0].config()
    doc = DOC.read_text(encoding="utf-8")
    missing = sorted({k for k in _keys(cfg) if f"`{k}`" not in doc and f"[{k}]" not in doc})
    assert not missing, f"keys missing from docs/scenarios.md: {missing}"


def test_the_rust_crates_have_no_import_circle():
    """docs/ARCHITECTURE.md draws the crates' modules as layers; a file that imports one
    importing it back breaks that picture (tools/import_cycles.py lists the circle)."""
    tool = Path(__file__).resolve().parents[2] / "tools" / "import_cycles.py"
    run = subprocess.run([sys.executable, str(tool)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("0 import circle(s)")
