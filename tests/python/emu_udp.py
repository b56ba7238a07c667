"""UDP sender and receiver for the emulator tests, run inside emulated hosts.

    python emu_udp.py recv PORT COUNT TIMEOUT   -> JSON [[seq, tos], ...] in arrival order
    python emu_udp.py send ADDR PORT SIZE [@EPOCH] TOS:COUNT [TOS:COUNT ...]

`@EPOCH` makes the sender wait until that wall-clock time (namespaces share the clock), so
senders in different hosts start together however long their processes took to start.

The receiver reads each datagram's TOS byte (IP_RECVTOS), so DSCP and ECN (CE marks set
by the switch) are checked through real sockets.
"""

from __future__ import annotations

import json
import socket
import sys
import time


def recv(port: int, count: int, timeout: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind(("0.0.0.0", port))
    print("ready", flush=True)
    got = []
    s.settimeout(timeout)
    try:
        while len(got) < count:
            data, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(1))
            tos = next(
                (c[2][0] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == socket.IP_TOS),
                -1,
            )
            got.append([int.from_bytes(data[:4], "big"), tos])
    except TimeoutError:
        pass
    print(json.dumps(got), flush=True)


def send(addr: str, port: int, size: int, groups: list[str]) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    if groups and groups[0].startswith("@"):
        time.sleep(max(0.0, float(groups[0][1:]) - time.time()))
        groups = groups[1:]
    seq = 0
    for g in groups:
        tos, count = (int(x, 0) for x in g.split(":"))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        for _ in range(count):
            s.sendto(seq.to_bytes(4, "big") + bytes(size - 4), (addr, port))
            seq += 1
    time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
