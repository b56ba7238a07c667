"""Forwarding throughput of the emulator through one port (``python -m gradwire.emu.bench``).

One kernel-TCP (cubic) flow from host 0 to host 1 on 100 Gbit/s links, so the shaper never
limits it and the switch (and the two kernels) are the bottleneck; run with and without
TCP segmentation offload on the TUN devices, side by side. Prints goodput, packets per
second through the port, the switch's CPU time per packet and system calls per packet.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .job import _env, _worker
from .network import EmulatedNetwork

SCENARIO = """
name = "forward-bench"
[topology]
hosts_per_leaf = 2
host_link_gbps = 100.0
uplink_gbps = 100.0
link_delay_ns = 1000
[switch]
buffer_bytes = 4000000
[host]
nic_queue_bytes = 4000000
"""


def one(path: Path, workdir: Path, nbytes: int, offload: bool) -> dict:
    with EmulatedNetwork(path, workdir, overrides=[f"emulate.offload={'true' if offload else 'false'}"]) as net:
        sink = net.popen(
            1,
            _worker("tcp-sink", 5001, 1),
            env=_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        sink.stdout.readline()
        before = net.stats()
        r = net.run(
            0,
            _worker("tcp-send", net.addr(1), 5001, nbytes, "cubic"),
            env=_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        after = net.stats()
    flow = json.loads(r.stdout.splitlines()[-1])
    port = next(p for p in after["ports"] if p["name"] == "leaf0->host1")
    port0 = next(p for p in before["ports"] if p["name"] == "leaf0->host1")
    pkts = port["dequeued"] - port0["dequeued"]
    cpu = after["cpu_seconds"] - before["cpu_seconds"]
    tun, tun0 = after["tun"], before["tun"]
    calls = (tun["read_calls"] - tun0["read_calls"]) + (tun["write_calls"] - tun0["write_calls"])
    moved = (tun["reads"] - tun0["reads"]) + (tun["writes"] - tun0["writes"])
    return {
        "offload": offload,
        "goodput_gbps": flow["gbps"],
        "port_pps": pkts / flow["fct_s"],
        "port_gbps_1500B": pkts * 1500 * 8 / flow["fct_s"] / 1e9,
        "switch_cpu_us_per_packet": cpu / max(pkts, 1) * 1e6,
        "switch_cpu_share": cpu / flow["fct_s"],
        "syscalls_per_packet": calls / max(moved, 1),
        "retransmits": flow["retransmits"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.toml"
        path.write_text(SCENARIO)
        for r in range(args.rounds):
            for offload in (True, False):
                res = one(path, Path(d) / f"{r}-{offload}", args.bytes, offload)
                print(
                    json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in res.items()}),
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1:])
