"""The command that starts the emulator's switch.

The switch is compiled into the extension (``gradwire._core.emu_main``) and runs as a child
process, ``python -m gradwire.emu.switch``, with this interpreter: any install of the
package, a wheel or an editable one, has it, from any directory. ``$GRADWIRE_EMU_BIN``
names a standalone ``gradwire-emu`` binary to run instead (``cargo build --release -p
gradwire-emu``; the same code, for profiling or a build of its own).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


class EmulatorUnavailable(RuntimeError):
    """The emulator cannot run here (no switch, not root, no /dev/net/tun, no `ip`)."""


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


def switch_command() -> list[str]:
    """The argv prefix that runs the switch (``run | check | sweep`` and their options follow)."""
    env = os.environ.get("GRADWIRE_EMU_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise EmulatorUnavailable(f"GRADWIRE_EMU_BIN={env} is not an executable")
        return [str(Path(env))]
    from gradwire import _core

    if not hasattr(_core, "emu_main"):  # an editable install's extension built before the switch moved in
        raise EmulatorUnavailable(
            f"{_core.__file__} has no emulator switch (emu_main): rebuild it (pip install -e . in the source tree)"
        )
    return [sys.executable, "-m", "gradwire.emu.switch"]
