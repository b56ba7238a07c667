"""The network-namespace fixture (tests/python/netns.py): hosts reach each other over UDP
and TCP, and nothing is left behind, whatever happens inside the `with`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from netns import NetnsCluster, list_netns, netns_available, netns_unavailable_reason, wait_for_line

pytestmark = pytest.mark.skipif(not netns_available(), reason=netns_unavailable_reason() or "")

PORT = 7007

# Echo server, bounded in time: answers each TCP connection and UDP datagram with
# "<proto>:<data> from <peer ip>".
SERVER = r"""
import socket, sys, threading, time
host, port = sys.argv[1], int(sys.argv[2])
end = time.monotonic() + 30
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((host, port))
t.listen()
t.settimeout(0.5)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((host, port))
u.settimeout(0.5)
def udp():
    while time.monotonic() < end:
        try:
            data, a = u.recvfrom(2048)
        except socket.timeout:
            continue
        u.sendto(b"udp:" + data + b" from " + a[0].encode(), a)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
while time.monotonic() < end:
    try:
        c, a = t.accept()
    except socket.timeout:
        continue
    with c:
        c.settimeout(5)
        data = c.recv(2048)
        c.sendall(b"tcp:" + data + b" from " + a[0].encode())
"""

# Client: one TCP exchange, one UDP exchange (a few tries: UDP may drop), prints both.
CLIENT = r"""
import socket, sys
host, port, msg = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
with socket.create_connection((host, port), timeout=5) as s:
    s.sendall(msg)
    print(s.recv(2048).decode(), flush=True)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(1)
for _ in range(5):
    u.sendto(msg, (host, port))
    try:
        print(u.recvfrom(2048)[0].decode(), flush=True)
        break
    except socket.timeout:
        pass
else:
    sys.exit("no UDP answer")
"""


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def test_four_hosts_reach_each_other_over_udp_and_tcp():
    links_before = root_links()
    with NetnsCluster(4) as c:
        assert len({c.addr(i) for i in range(4)}) == 4
        assert set(c.all_namespaces) <= set(list_netns())
        servers = []
        for i in range(4):
            p = c.exec(i, [sys.executable, "-c", SERVER, c.addr(i), str(PORT)], stdout=subprocess.PIPE, text=True)
            wait_for_line(p, "ready")
            servers.append(p)
        # Every host is a client of two others, every host a server of two others.
        for i in range(4):
            for j in ((i + 1) % 4, (i + 2) % 4):
                msg = f"hello-{i}-to-{j}"
                res = c.run(i, [sys.executable, "-c", CLIENT, c.addr(j), str(PORT), msg], timeout=20)
                assert res.returncode == 0, res.stderr
                assert res.stdout.splitlines() == [
                    f"tcp:{msg} from {c.addr(i)}",
                    f"udp:{msg} from {c.addr(i)}",
                ]
        # The servers are still running: closing the cluster must kill them.
        assert all(p.poll() is None for p in servers)
        names = c.all_namespaces
    assert all(p.poll() is not None for p in servers)
    assert not set(names) & set(list_netns())
    assert root_links() - links_before == set()


def test_hosts_have_only_their_subnet():
    """Each host has lo + eth0 with its address and one route, to the cluster's subnet:
    nothing in a cluster can send anywhere else."""
    with NetnsCluster(2) as c:
        for i in range(2):
            links = c.run(i, ["ip", "-o", "link", "show"]).stdout
            assert sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines()) == ["eth0", "lo"]
            assert f"{c.addr(i)}/24" in c.run(i, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
            routes = c.run(i, ["ip", "-4", "route", "show"]).stdout.splitlines()
            assert len(routes) == 1 and routes[0].startswith(c.subnet), routes


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_teardown_on_exceptions(exc):
    links_before = root_links()
    with pytest.raises(exc):
        with NetnsCluster(3) as c:
            names = c.all_namespaces
            sleeper = c.exec(1, ["sleep", "300"])
            assert set(names) <= set(list_netns())
            raise exc("boom")
    assert sleeper.poll() is not None
    assert not set(names) & set(list_netns())
    assert root_links() - links_before == set()


def test_teardown_when_setup_fails_half_way(monkeypatch):
    import netns

    calls = {"n": 0}
    real = netns._ip

    def flaky(*args, **kw):
        if args[:2] == ("link", "add"):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("injected failure")
        return real(*args, **kw)

    monkeypatch.setattr(netns, "_ip", flaky)
    c = NetnsCluster(3)
    with pytest.raises(RuntimeError, match="injected"):
        with c:
            pass
    assert not set(c.all_namespaces) & set(list_netns())


def test_parallel_clusters_get_distinct_names_and_subnets():
    with NetnsCluster(1) as a, NetnsCluster(1) as b:
        assert a.subnet != b.subnet
        assert not set(a.all_namespaces) & set(b.all_namespaces)
        assert all(str(__import__("os").getpid()) in ns for ns in a.all_namespaces)
