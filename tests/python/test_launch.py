"""`gradwire launch`: torchrun-style local jobs, and the runtime demo under it."""

import subprocess
import sys


def gw(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gradwire.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_the_demo_runs_every_algorithm_exactly_under_the_launcher():
    r = gw("launch", "-n", "3", "--", sys.executable, "-m", "gradwire.demo", "--mb", "0.2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("[rank 0]")]
    table = {line.split()[2]: line.split()[-1] for line in lines if line.split()[2] in ("ring", "tree", "rat", "ps")}
    assert table == {"ring": "True", "tree": "True", "rat": "True", "ps": "True"}, r.stdout


def test_the_launcher_sets_the_environment_and_propagates_failure():
    code = "import os, sys; print('env', os.environ['RANK'], os.environ['WORLD_SIZE'], len(os.environ['GRADWIRE_TOKEN'])); sys.exit(3 if os.environ['RANK'] == '1' else 0)"
    r = gw("launch", "-n", "2", "--", sys.executable, "-c", code)
    assert r.returncode == 3
    assert "[rank 0] env 0 2 16" in r.stdout and "[rank 1] env 1 2 16" in r.stdout


def test_the_launcher_needs_a_command():
    r = gw("launch", "-n", "2")
    assert r.returncode == 2 and "give the command" in (r.stdout + r.stderr)
