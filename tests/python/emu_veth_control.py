"""Control for docs/emulation.md: the emulator's 4-rank allreduce job on a plain veth bridge
(tests/python/netns.py), without the emulator's switch, shaper or loss.

    python tests/python/emu_veth_control.py BACKEND LINE_RATE_GBPS     # as root

BACKEND is gloo or a gradwire transport; prints the 3 iterations' times (slowest rank) and
the runtime's lost bytes and retransmissions.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from netns import NetnsCluster

PYTHON_DIR = str(Path(__file__).resolve().parents[2] / "python")


def main(backend: str, rate: str) -> None:
    with NetnsCluster(4) as c:
        env = dict(
            os.environ,
            PYTHONPATH=PYTHON_DIR,
            MASTER_ADDR=c.addr(0),
            MASTER_PORT="29511",
            WORLD_SIZE="4",
            GRADWIRE_TOKEN=secrets.token_hex(8),
            GLOO_SOCKET_IFNAME="eth0",
            GRADWIRE_EMU_LINE_GBPS=rate,
            OMP_NUM_THREADS="1",
        )
        argv = [
            sys.executable,
            "-m",
            "gradwire.emu.worker",
            "allreduce",
            backend,
            "25000000",
            "3",
            "0.01",
        ]
        procs = [c.exec(r, argv, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True) for r in range(4)]
        outs = [json.loads(p.communicate(timeout=300)[0].splitlines()[-1]) for p in procs]
    times = [round(max(o["times_s"][i] for o in outs), 3) for i in range(3)]
    lost = sum(o["lost_bytes"] for o in outs)
    retx = sum(o["retransmits"] for o in outs)
    print(f"{backend} told {rate} Gbit/s: {times} s, lost {lost} B, retransmits {retx}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
