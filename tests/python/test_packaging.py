"""The source distribution ships what the package reads at run time: the built-in scenarios
(simulator and emulator), the DNN profiles, and the Rust crates the extension builds from."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "gradwire"

pytestmark = pytest.mark.skipif(
    shutil.which("maturin") is None or not (ROOT / "pyproject.toml").is_file(),
    reason="needs maturin and the source tree",
)


def test_sdist_ships_data_files_and_crates(tmp_path):
    p = subprocess.run(
        [shutil.which("maturin"), "sdist", "--out", str(tmp_path)],
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
