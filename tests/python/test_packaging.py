"""What a user gets from the package.

- The source distribution ships what the package reads at run time: the built-in scenarios
  (simulator and emulator), the DNN profiles, and the Rust crates the extension builds from.
- The wheel, installed into a fresh virtual environment that cannot see torch (no system
  site packages; its dependencies from PyPI), runs every command that does not need torch
  from outside the source tree (the README's simulator command, `plot`, `reproduce --list`,
  every reproduction with `--quick`, `launch` and the runtime), and every command that does
  need it says in one line which extra to install (exit 2, no traceback), as does
  `--cluster ray` without ray.
- The wheel carries the emulator's switch: `gradwire emulate` finds it there (and runs a
  job through it where root and /dev/net/tun are available).
- Commands that do not need torch do not import it where it is installed either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from gradwire import reproduce as rp
from gradwire.emu import unavailable_reason

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "gradwire"
HAVE_SOURCE = (ROOT / "pyproject.toml").is_file()
TORCH_EXTRA = 'pip install "gradwire[torch]"'

#: On top of --quick, for the three reproductions of DNN jobs (as test_reproduce.py does):
#: the smallest model and jumbo frames, a few seconds instead of a minute each.
TINY = {
    name: ["--set", "workload.model=resnet18", "--set", "transport.mss_bytes=8960"]
    for name in ("dlcp-fig14", "dlcp-fig16", "ltp-bst")
}


def _maturin() -> str | None:
    """The test environment's maturin (the `test` extra installs it), else one on PATH."""
    here = Path(sys.executable).parent / "maturin"
    return str(here) if here.exists() else shutil.which("maturin")


needs_maturin = pytest.mark.skipif(_maturin() is None or not HAVE_SOURCE, reason="needs maturin and the source tree")


@needs_maturin
def test_sdist_ships_data_files_and_crates(tmp_path):
    p = subprocess.run(
        [_maturin(), "sdist", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    (sdist,) = tmp_path.glob("gradwire-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    wanted = [
        f.relative_to(ROOT).as_posix() for f in PACKAGE.rglob("*") if f.suffix in (".toml", ".json") and f.is_file()
    ]
    assert wanted, "no data files found in the package"
    missing = sorted(set(wanted) - names)
    assert not missing, f"not in the sdist: {missing}"
    for crate in ("gradwire-core", "gradwire-sim", "gradwire-net", "gradwire-py"):
        assert f"crates/{crate}/Cargo.toml" in names


# ---------------------------------------------------------------------------------------
# The wheel in a fresh virtual environment without torch


class Venv:
    def __init__(self, path: Path, cwd: Path):
        self.path = path
        self.cwd = cwd  # outside the source tree
        self.python = str(path / "bin" / "python")
        self.gradwire = str(path / "bin" / "gradwire")
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GRADWIRE_EMU_BIN")}
        self.env.update(MPLBACKEND="Agg", COLUMNS="200", PATH=f"{path / 'bin'}:{os.environ.get('PATH', '')}")

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        p = self.run(self.gradwire, *args, timeout=timeout)
        assert "Traceback" not in p.stdout + p.stderr, f"gradwire {' '.join(args)}:\n{p.stdout}\n{p.stderr}"
        return p


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Venv:
    """Builds the wheel (release profile, in cargo's own target directory, so it reuses what
    the editable install of the test environment compiled) and installs it with its
    dependencies from PyPI into a virtual environment without system site packages."""
    if _maturin() is None or not HAVE_SOURCE:
        pytest.skip("needs maturin and the source tree")
    base = tmp_path_factory.mktemp("wheel")
    t0 = time.monotonic()
    for _attempt in range(3):
        p = subprocess.run(
            [_maturin(), "build", "--release", "--interpreter", sys.executable, "--out", str(base / "dist")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        # another maturin build in the same target directory (an editable install running
        # beside the tests) can replace target/maturin/lib_core.so under this one: build again
        if p.returncode == 0 or "target/maturin/lib_core.so" not in p.stderr:
            break
    assert p.returncode == 0, p.stderr[-4000:]
    (wheel,) = (base / "dist").glob("gradwire-*.whl")
    built = time.monotonic() - t0
    venv = base / "venv"
    # a venv made from a venv's python has the base interpreter, and without
    # --system-site-packages sees neither the system's packages nor the test environment's
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    p = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    print(f"wheel built in {built:.1f} s, installed in {time.monotonic() - t0 - built:.1f} s")
    work = base / "work"
    work.mkdir()
    return Venv(venv, work)


def test_fresh_venv_cannot_see_torch_or_the_source_tree(wheel_venv):
    p = wheel_venv.run(wheel_venv.python, "-c", "import torch")
    assert p.returncode != 0 and "No module named 'torch'" in p.stderr
    p = wheel_venv.run(wheel_venv.python, "-c", "import gradwire; print(gradwire.__file__)")
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()).is_relative_to(wheel_venv.path), p.stdout


def test_readme_simulator_command_and_plot(wheel_venv):
    p = wheel_venv.cli("sim")
    assert p.returncode == 0, p.stdout + p.stderr
    out = wheel_venv.cwd / "results" / "leafspine-compare"
    assert (out / "summary.csv").is_file()
    p = wheel_venv.cli("plot", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "fct_cdf.png").is_file()


def test_reproduce_list(wheel_venv):
    p = wheel_venv.cli("reproduce", "--list")
    assert p.returncode == 0, p.stdout + p.stderr
    for name in rp.REPRODUCTIONS:
        assert name in p.stdout


@pytest.mark.parametrize("name", [n for n, r in rp.REPRODUCTIONS.items() if isinstance(r, rp.Reproduction)])
def test_reproduce_quick_without_torch(wheel_venv, name):
    out = wheel_venv.cwd / "repro" / name
    p = wheel_venv.cli("reproduce", name, "--quick", "--out", str(out), *TINY.get(name, []))
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "table.csv").is_file()


def _one_line_extra(p: subprocess.CompletedProcess, what: str) -> None:
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == [f"error: {what} needs torch: {TORCH_EXTRA}"], p.stderr


@pytest.mark.parametrize("name", [n for n, r in rp.REPRODUCTIONS.items() if isinstance(r, rp.TuningFigure)])
def test_autobyte_reproductions_name_the_torch_extra(wheel_venv, name):
    p = wheel_venv.cli("reproduce", name, "--quick", "--out", str(wheel_venv.cwd / name))
    _one_line_extra(p, f"gradwire reproduce {name}")
    assert p.stdout == ""
    assert not (wheel_venv.cwd / name).exists()


@pytest.mark.parametrize(
    "args",
    [["train"], ["tolerance"], ["autobyte", "train"], ["emulate", "allreduce-loss"]],
    ids=lambda a: " ".join(a),
)
def test_torch_commands_name_the_extra(wheel_venv, args):
    _one_line_extra(wheel_venv.cli(*args), "gradwire " + " ".join(args))


@pytest.mark.parametrize("args", [["sim"], ["reproduce", "pcn-fig9", "--quick"]], ids=lambda a: a[0])
def test_cluster_ray_names_the_cluster_extra(wheel_venv, args):
    p = wheel_venv.cli(*args, "--cluster", "ray", "--out", str(wheel_venv.cwd / "no-ray"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == ['error: --cluster ray needs ray: pip install "gradwire[cluster]"']


def test_launch_runs_the_runtime_without_torch(wheel_venv):
    p = wheel_venv.cli(
        "launch", "-n", "2", "--timeout", "120", "--", wheel_venv.python, "-m", "gradwire.demo", "--mb", "1"
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("True") >= 4, p.stdout  # every algorithm exact on rank 0


# The emulator's switch comes with the wheel (in the extension: gradwire._core.emu_main)

EMU_SCENARIO = """
name = "tiny"
seed = 1

[topology]
hosts_per_leaf = 2
host_link_gbps = 1.0
link_delay_ns = 25000

[job]
kind = "flows"
flows = [{ src = 0, dst = 1, bytes = 1000000, cc = "cubic" }]
"""


def test_emulate_finds_its_switch_in_the_wheel(wheel_venv):
    (wheel_venv.cwd / "tiny.toml").write_text(EMU_SCENARIO)
    p = wheel_venv.run(wheel_venv.python, "-c", "from gradwire.emu import switch_command; print(switch_command())")
    assert p.returncode == 0, p.stderr
    assert wheel_venv.python in p.stdout and "gradwire.emu.switch" in p.stdout
    # the switch's own check: builds the fabric, no devices (no root needed)
    p = wheel_venv.run(wheel_venv.python, "-m", "gradwire.emu.switch", "check", "tiny.toml")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("tiny: 2 hosts, ports: host0->leaf0")
    # a built-in scenario, shipped in the wheel
    p = wheel_venv.run(wheel_venv.python, "-c", "from gradwire.emu.command import resolve; print(resolve('tcp-cc'))")
    assert p.returncode == 0 and Path(p.stdout.strip()).is_relative_to(wheel_venv.path), p.stdout + p.stderr
    p = wheel_venv.run(wheel_venv.python, "-m", "gradwire.emu.switch", "check", p.stdout.strip())
    assert p.returncode == 0, p.stderr


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"runs the emulator: {unavailable_reason()}")
def test_emulate_runs_from_the_wheel(wheel_venv):
    """A 1 MB kernel-TCP flow between two namespaces through the wheel's switch."""
    (wheel_venv.cwd / "tiny.toml").write_text(EMU_SCENARIO)
    p = wheel_venv.cli("emulate", "tiny.toml", "--no-plot", "--out", "emu", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    switch = json.loads((wheel_venv.cwd / "emu" / "switch.json").read_text())["tiny"]
    assert switch["rows"][0]["bytes"] == 1_000_000 and not switch["rows"][0].get("error")
    assert switch["packets"]["conserved"] and switch["packets"]["delivered"] > 600  # 1 MB in 1500-byte frames


# ---------------------------------------------------------------------------------------
# Where torch is installed: the commands that do not need it do not import it


def test_commands_without_torch_do_not_import_it(tmp_path):
    code = """
import sys
from typer.testing import CliRunner
from gradwire.cli import app
r = CliRunner()
for args in (["reproduce", "--list"], ["scenarios"], ["sim", "--help"], ["emulate", "tcp-cc", "--help"]):
    res = r.invoke(app, args)
    assert res.exit_code == 0, (args, res.output)
import gradwire.tune.figures, gradwire.tune.online, gradwire.tune.simjob, gradwire.emu.command
assert "torch" not in sys.modules
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
