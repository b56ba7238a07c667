"""gradwire._core: load_scenario, ScenarioError, Simulation."""

from __future__ import annotations

import json

import pytest
from conftest import SMALL

import gradwire
from gradwire import ScenarioError, Simulation, load_scenario
from gradwire.scenarios import builtin_names, scenario_text


def test_version():
    assert gradwire.__version__ == gradwire._core.__version__
    assert gradwire.__version__.count(".") == 2


def test_load_single_run(incast_text):
    runs = load_scenario(incast_text, [])
    assert len(runs) == 1
    run = runs[0]
    assert run.name == "incast-small"
    assert run.params == {}
    cfg = run.config()
    assert cfg["topology"]["leaves"] == 2
    assert cfg["workload"]["kind"] == "incast"
    # Defaults are filled in by the typed loader.
    assert cfg["transport"]["mss_bytes"] == 1460
    assert cfg["routing"]["mode"] == "ecmp"


def test_overrides_apply(incast_text):
    runs = load_scenario(incast_text, ["seed=42", "transport.kind=newreno", "topology.spines=1"])
    cfg = runs[0].config()
    assert cfg["seed"] == 42
    assert cfg["transport"]["kind"] == "newreno"
    assert cfg["topology"]["spines"] == 1


def test_sweep_expands(incast_text):
    text = incast_text + '\n[sweep]\n"transport.kind" = ["newreno", "dctcp"]\n"workload.senders" = [2, 5]\n'
    runs = load_scenario(text, ["seed=9"])
    assert [r.name for r in runs] == [
        "kind=newreno,senders=2",
        "kind=newreno,senders=5",
        "kind=dctcp,senders=2",
        "kind=dctcp,senders=5",
    ]
    assert runs[1].params == {"transport.kind": "newreno", "workload.senders": "5"}
    cfgs = [r.config() for r in runs]
    assert all(c["seed"] == 9 for c in cfgs)
    assert [c["workload"]["senders"] for c in cfgs] == [2, 5, 2, 5]


def _err(text, overrides) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(text, overrides)
    return info.value


@pytest.mark.parametrize(
    "override, key, shown",
    [
        ("topology.spinez=3", "topology.spinez", "spinez"),  # unknown key
        ("bogus=1", "bogus", "bogus"),  # unknown top-level key
        ('topology.spines="four"', "topology.spines", "four"),  # wrong type
        ("transport.kind=cubic", "transport.kind", "cubic"),  # unknown variant
        ("topology.host_link_gbps=-100", "topology.host_link_gbps", "-100"),  # negative rate
        ("topology.uplink_gbps=-1.5", "topology.uplink_gbps", "-1.5"),  # negative rate
        ("workload.receiver=8", "workload.receiver", "8"),  # host out of range (8 hosts)
        ("workload.senders=99", "workload.senders", "99"),  # too many senders
        ("switch.queues=9", "switch.queues", "9"),
    ],
)
def test_scenario_error_names_key_and_value(incast_text, override, key, shown):
    e = _err(incast_text, [override])
    assert isinstance(e, ValueError)
    assert e.key == key
    assert key in str(e) and shown in str(e)
    assert e.args == (str(e),)
    assert "\n" not in str(e)


def test_scenario_error_in_file(incast_text):
    e = _err(incast_text.replace("spines = 2", "spines = -2"), [])
    assert e.key == "topology.spines" and "-2" in str(e)
    e = _err(incast_text.replace("[workload]", "[workload]\nsender_list = [1, 2]"), [])
    assert e.key == "workload.senders"


def test_not_toml_and_bad_override():
    e = _err("x = ", [])
    assert e.key == "" and "TOML" in str(e)
    e = _err("[workload]\nkind='incast'\nsenders=1\nflow_bytes=1\n", ["noequals"])
    assert "noequals" in str(e)


def test_simulation_runs_and_reports(incast_text, tmp_path):
    sim = Simulation(load_scenario(incast_text, [])[0])
    p = sim.progress()
    assert p == {
        "now_ns": 0,
        "stop_ns": 500_000_000,
        "flows_done": 0,
        "flows_total": 6,
        "events": 0,
        "finished": False,
    }
    steps = 0
    while not sim.step(500):
        steps += 1
        q = sim.progress()
        assert q["events"] >= p["events"] and q["now_ns"] >= p["now_ns"]
        p = q
    assert steps > 1
    p = sim.progress()
    assert p["finished"] and p["flows_done"] == 6
    assert sim.step(10) is True  # stepping a finished run is a no-op

    c = sim.conservation()
    assert c["holds"] and c["sent"] == c["delivered"] + c["dropped"] + c["in_flight"]
    s = sim.summary()
    assert s["flows"] == s["flows_finished"] == 6
    assert s["packets"]["conserved"] is True
    assert s["fct_p50_ns"] <= s["fct_p99_ns"] <= s["fct_max_ns"]
    assert s["transport"] == "dctcp"

    written = sim.write_outputs(str(tmp_path / "run"))
    assert written["flows"] == 6
    assert {f.name for f in (tmp_path / "run").iterdir()} == {"flows.csv", "summary.json", "queues.csv"}
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["flows_finished"] == 6
    assert sim.config()["name"] == "incast-small"


def test_run_releases_and_finishes(incast_text):
    sim = Simulation(load_scenario(incast_text, ["transport.kind=newreno"])[0])
    sim.run()
    assert sim.progress()["finished"]
    assert sim.summary()["transport"] == "newreno"


def test_simulation_rejects_what_only_the_topology_shows(incast_text):
    # A sampled port that does not exist: only the built topology can tell.
    run = load_scenario(incast_text, ['output.queue_ports=["leaf7->host0"]'])[0]
    with pytest.raises(ScenarioError) as info:
        Simulation(run)
    assert info.value.key == "output.queue_ports.0" and "leaf7->host0" in str(info.value)


def test_builtin_scenarios_are_shipped_and_valid():
    names = builtin_names()
    assert {"leafspine-compare", "incast-dctcp"} <= set(names)
    assert all(gradwire.resolve_scenario(n).origin == f"builtin:{n}" for n in names)
    # Top-level built-ins must be valid with this build (subdirectories such as repro/
    # may name transports that are still being written).
    for name in [n for n in names if "/" not in n]:
        runs = load_scenario(scenario_text(name), [])
        assert runs, name
        # and every run builds at the small size
        for r in load_scenario(
            scenario_text(name),
            SMALL + ["workload.workers=8", "workload.servers=2", "workload.senders=4"]
            if "ps" in runs[0].config()["workload"]["kind"]
            else SMALL + ["workload.senders=4"],
        ):
            Simulation(r)


def test_large_builtins_are_accepted_as_they_are():
    """The large/ built-ins are too big to build in a test; their fast samples are checked
    as a run checks them (one that leaves what was validated says so with
    fast.unvalidated)."""
    names = [n for n in builtin_names() if n.startswith("large/")]
    assert "large/ft1024-fast" in names
    for name in names:
        for r in load_scenario(scenario_text(name), []):
            sample = r.check()
            if 'fidelity = "fast"' in scenario_text(name):
                kept, of = sample
                assert 0 < kept < of, name


def test_step_releases_the_gil(incast_text):
    """Another Python thread keeps running while the simulation steps in Rust."""
    import threading
    import time

    sim = Simulation(load_scenario(incast_text, ["workload.flow_bytes=20000000", "output.queue_ports=[]"])[0])
    count = 0
    stop = threading.Event()

    def spin():
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.01)
        before = count
        t0 = time.perf_counter()
        sim.run()
        elapsed = time.perf_counter() - t0
        during = count - before
    finally:
        stop.set()
        t.join()
    assert sim.progress()["finished"]
    if elapsed > 0.02:  # long enough for the spinning thread to be scheduled
        assert during > 1000, (during, elapsed)


def test_a_run_pickles_as_its_typed_scenario(incast_text):
    """Runs cross to worker processes (gradwire reproduce): pickling keeps name, params and
    the typed scenario, and a tampered scenario is validated again on the way back."""
    import pickle

    run = load_scenario(incast_text + '\n[sweep]\n"workload.senders" = [2, 3]\n', [])[1]
    back = pickle.loads(pickle.dumps(run))
    assert (back.name, back.params, back.config()) == (run.name, run.params, run.config())
    Simulation(back).run()

    from gradwire._core import Run

    bad = run.config()
    bad["topology"]["host_link_gbps"] = -1.0
    with pytest.raises(ScenarioError) as info:
        Run._from_json(run.name, [], json.dumps(bad))
    assert info.value.key == "topology.host_link_gbps"
    bad["topology"]["spines"] = "x"
    with pytest.raises(ScenarioError) as info:
        Run._from_json(run.name, [], json.dumps(bad))
    assert info.value.key == "topology.spines"


def test_algorithm_and_transport_names_come_from_rust():
    from gradwire import runtime

    assert runtime.ALGORITHMS == tuple(gradwire._core.algorithms())
    assert {"ring", "tree", "rat", "ps"} <= set(runtime.ALGORITHMS)
    assert runtime.TRANSPORTS == tuple(gradwire._core.transports())
    assert {"dlcp", "ltp"} <= set(runtime.TRANSPORTS)
