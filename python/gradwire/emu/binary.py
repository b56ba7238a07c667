"""Find (or build once) the ``gradwire-emu`` switch binary.

Order: ``$GRADWIRE_EMU_BIN``; ``target/release/gradwire-emu`` of the source tree this
package was installed from (editable install); ``gradwire-emu`` on ``PATH``; else, in a
source tree with ``cargo``, build it (``cargo build --release -p gradwire-emu``, a minute or
two, said on stderr) and use that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# the crates the switch is built from (a change elsewhere does not need a rebuild)
DEPENDS_ON = ("gradwire-emu", "gradwire-sim", "gradwire-core")


class EmulatorUnavailable(RuntimeError):
    """The emulator cannot run here (no binary, not root, no /dev/net/tun, no `ip`)."""


def unavailable_reason() -> str | None:
    """Why the emulator cannot run on this machine, or None if it can."""
    if sys.platform != "linux":
        return "the emulator needs Linux (network namespaces and TUN devices)"
    if os.geteuid() != 0:
        return "the emulator needs root (network namespaces, TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun (TUN driver missing)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    return None


def find_binary(build: bool = True) -> Path:
    env = os.environ.get("GRADWIRE_EMU_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise EmulatorUnavailable(f"GRADWIRE_EMU_BIN={env} is not an executable")
        return Path(env)
    built = REPO / "target" / "release" / "gradwire-emu"
    cargo_toml = REPO / "crates" / "gradwire-emu" / "Cargo.toml"
    if built.exists() and cargo_toml.exists() and build:
        # rebuild if a source file is newer than the binary (cargo decides what to do)
        sources = [p for c in DEPENDS_ON for p in (REPO / "crates" / c).rglob("*.rs")]
        newest = max((p.stat().st_mtime for p in sources), default=0.0)
        if newest <= built.stat().st_mtime:
            return built
    elif built.exists():
        return built
    on_path = shutil.which("gradwire-emu")
    if on_path and not cargo_toml.exists():
        return Path(on_path)
    if not (build and cargo_toml.exists() and shutil.which("cargo")):
        raise EmulatorUnavailable(
            "no gradwire-emu binary: build it with `cargo build --release -p gradwire-emu` in the source "
            "tree, or set GRADWIRE_EMU_BIN"
        )
    print(
        "gradwire emulate: building the switch (cargo build --release -p gradwire-emu) ...",
        file=sys.stderr,
    )
    res = subprocess.run(["cargo", "build", "--release", "-p", "gradwire-emu"], cwd=REPO, check=False)
    if res.returncode != 0 or not built.exists():
        raise EmulatorUnavailable("cargo build --release -p gradwire-emu failed")
    return built
