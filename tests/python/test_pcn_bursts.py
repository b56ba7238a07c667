"""pcn_bursts: per-burst rows of a DDLgen run from its flows.csv and queues.csv."""

from __future__ import annotations

import pytest

from gradwire import pcn_bursts

CONFIG = {"workload": {"receiver": 8, "sender_list": [0, 1]}}
COLUMNS = "flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,retransmits,timeouts,iteration,pull,layer"


def write_run(tmp_path, flows: list[str], queue: list[tuple[int, int]]):
    (tmp_path / "flows.csv").write_text("\n".join([COLUMNS, *flows]) + "\n")
    rows = ["time_ns,port,bytes,packets"] + [f"{t},leaf0->spine0,{p * 1500},{p}" for t, p in queue]
    (tmp_path / "queues.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_a_burst_is_both_workers_pushes_and_the_queue_around_it(tmp_path):
    run = write_run(
        tmp_path,
        [
            "0,0,8,1000,100,400,300,0,0,0,0,0",
            "1,1,8,1000,120,500,380,0,0,0,0,0",
            "2,0,8,1000,1000,1300,300,0,0,1,0,0",
            "3,1,8,1000,1000,1200,200,0,0,1,0,0",
            # a background flow into the server: never finishes, not a burst
            "4,3,8,99999999,0,,,0,0,0,0,0",
        ],
        [(0, 7), (90, 5), (200, 30), (450, 12), (600, 0), (950, 3), (1100, 9), (1400, 50)],
    )
    rows = pcn_bursts.bursts(run, CONFIG)
    assert [r["burst"] for r in rows] == [0, 1]
    first, second = rows
    # queue at the first push's start (the last sample at or before it), its peak until the last finish
    assert (first["start_queue_pkts"], first["max_queue_pkts"]) == (5, 30)
    assert (second["start_queue_pkts"], second["max_queue_pkts"]) == (3, 9)
    assert first["bct_ms"] == pytest.approx(400 / 1e6) and second["bct_ms"] == pytest.approx(300 / 1e6)
    assert first["bytes"] == second["bytes"] == 2000


def test_bursts_stop_at_the_first_unfinished_one(tmp_path):
    run = write_run(
        tmp_path,
        ["0,0,8,1000,100,400,300,0,0,0,0,0", "1,1,8,1000,900,,,0,0,1,0,0", "2,0,8,1000,900,1000,100,0,0,1,0,0"],
        [(0, 1)],
    )
    assert [r["burst"] for r in pcn_bursts.bursts(run, CONFIG)] == [0]
