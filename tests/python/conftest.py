"""Shared fixtures. Every test runs the real extension (gradwire._core), no mocks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
INCAST = DATA / "incast-small.toml"

#: Shrinks the built-in 144-host scenarios to 8 hosts so they run in a blink.
SMALL = [
    "topology.leaves=2",
    "topology.hosts_per_leaf=4",
    "topology.spines=2",
    "topology.uplinks_per_leaf=2",
]


def set_args(overrides):
    out = []
    for o in overrides:
        out += ["--set", o]
    return out


@pytest.fixture
def incast_text() -> str:
    return INCAST.read_text()


@pytest.fixture(scope="session")
def gradwire_cmd() -> list[str]:
    """The installed `gradwire` console script if it belongs to this interpreter, else
    `python -m gradwire`."""
    exe = Path(sys.executable).parent / "gradwire"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("gradwire")
    if found and Path(found).parent == Path(sys.executable).parent:
        return [found]
    return [sys.executable, "-m", "gradwire"]


def run_cli(args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", MPLBACKEND="Agg")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
