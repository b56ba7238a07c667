"""`gradwire launch`: torchrun-style local jobs, and the runtime demo under it."""

import subprocess
import sys


def gw(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "gradwire.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_the_demo_runs_every_algorithm_exactly_under_the_launcher():
    r = gw("launch", "-n", "3", "--", sys.executable, "-m", "gradwire.demo", "--mb", "0.2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("[rank 0]")]
    table = {line.split()[2]: line.split()[-1] for line in lines if line.split()[2] in ("ring", "tree", "rat", "ps")}
    assert table == {"ring": "True", "tree": "True", "rat": "True", "ps": "True"}, r.stdout


def test_the_launcher_sets_the_environment_and_propagates_failure(tmp_path):
    # Rank 1 fails only once rank 0 has printed: a failing rank stops the others, and on a
    # loaded machine rank 0 could otherwise be stopped before its line.
    printed = tmp_path / "rank0-printed"
    code = (
        "import os, sys, time, pathlib; m = pathlib.Path(sys.argv[1]); r = os.environ['RANK']\n"
        "print('env', r, os.environ['WORLD_SIZE'], len(os.environ['GRADWIRE_TOKEN']), flush=True)\n"
        "if r == '0': m.touch()\n"
        "end = time.monotonic() + 60\n"
        "while r == '1' and not m.exists() and time.monotonic() < end: time.sleep(0.01)\n"
        "sys.exit(3 if r == '1' else 0)"
    )
    r = gw("launch", "-n", "2", "--", sys.executable, "-c", code, str(printed))
    assert r.returncode == 3
    assert "[rank 0] env 0 2 16" in r.stdout and "[rank 1] env 1 2 16" in r.stdout


def test_the_launcher_needs_a_command():
    r = gw("launch", "-n", "2")
    assert r.returncode == 2 and "give the command" in (r.stdout + r.stderr)


def test_a_command_that_does_not_exist_is_one_line_not_a_traceback():
    r = gw("launch", "-n", "2", "--", "nosuchcmd-gradwire")
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "nosuchcmd-gradwire" in out and "not found" in out, out
    assert "Traceback" not in out and len(out.strip().splitlines()) <= 2, out


def test_a_rank_killed_by_a_signal_is_named_with_its_signal():
    code = (
        "import os, signal, time, sys\n"
        "if os.environ['RANK'] == '1': os.kill(os.getpid(), signal.SIGSEGV)\n"
        "time.sleep(30)"
    )
    r = gw("launch", "-n", "2", "--", sys.executable, "-c", code)
    assert r.returncode == 128 + 11, (r.returncode, r.stderr)
    assert "rank 1 was killed by SIGSEGV" in r.stderr, r.stderr


def test_the_launcher_timeout_says_so():
    r = gw("launch", "-n", "2", "--timeout", "2", "--", sys.executable, "-c", "import time; time.sleep(60)")
    assert r.returncode == 124 and "timed out after 2 s" in r.stderr, (r.returncode, r.stderr)


def test_rat_runs_under_the_launcher_with_a_topology():
    code = (
        "import gradwire, numpy as np\n"
        "gradwire.init()\n"
        "x = np.ones(10_000, np.float32)\n"
        "gradwire.allreduce(x, algorithm='rat')\n"
        "assert (x == 4).all(), x[:4]\n"
        "print('rat ok')"
    )
    r = gw("launch", "-n", "4", "--topology", "0,0,1,1", "--", sys.executable, "-c", code)
    assert r.returncode == 0 and r.stdout.count("rat ok") == 4, r.stdout[-2000:] + r.stderr[-2000:]


def _bare_env(**extra):
    import os

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "GRADWIRE_TOKEN", "TORCHELASTIC_RUN_ID")
    }
    env.update(extra)
    return env


def test_a_script_started_without_a_launcher_gets_one_line():
    r = subprocess.run(
        [sys.executable, "-c", "import gradwire; gradwire.init()"],
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "not started by a launcher" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_out_of_range_master_port_names_the_variable():
    env = _bare_env(MASTER_ADDR="127.0.0.1", MASTER_PORT="70000", RANK="0", WORLD_SIZE="2")
    r = subprocess.run(
        [sys.executable, "-c", "import gradwire; gradwire.init()"], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "MASTER_PORT is 70000" in r.stderr and "OverflowError" not in r.stderr, r.stderr
