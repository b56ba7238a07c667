"""The emulator's switch as a child process: ``python -m gradwire.emu.switch run | check |
sweep ...`` runs ``gradwire._core.emu_main`` (the ``gradwire-emu`` command line, compiled
into the extension), so the switch comes with every install of the package."""

from __future__ import annotations

import sys


def main() -> int:
    from gradwire._core import emu_main

    return emu_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
