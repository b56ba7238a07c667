"""gradwire: a communication stack for data-parallel DNN training.

The socket runtime (``gradwire.init``, ``allreduce``, ``broadcast``, ``ps.push/pull``; see
``gradwire.runtime``) runs collectives between real processes. The simulator is the other
half of the Rust core (``gradwire._core``):

>>> import gradwire
>>> runs = gradwire.load_scenario(gradwire.scenario_text("incast-dctcp"),
...                               ["topology.leaves=2", "workload.senders=4"])
>>> sim = gradwire.Simulation(runs[0])
>>> while not sim.step(200_000): pass
>>> sim.summary()["flows_finished"]
4
"""

from gradwire._core import Run, ScenarioError, Simulation, load_scenario
from gradwire._core import __version__ as _core_version

__version__ = _core_version

from gradwire import ddp, ps  # noqa: E402
from gradwire.runtime import (  # noqa: E402
    Bubble,
    CallMismatch,
    CommError,
    Communicator,
    PeerLost,
    PeerTimeout,
    Refused,
    Report,
    Work,
    allreduce,
    allreduce_async,
    broadcast,
    broadcast_async,
    destroy,
    init,
    is_initialized,
)
from gradwire.scenarios import builtin_scenarios, resolve_scenario, scenario_text  # noqa: E402

__all__ = [
    "Bubble",
    "CallMismatch",
    "CommError",
    "Communicator",
    "PeerLost",
    "PeerTimeout",
    "Refused",
    "Report",
    "Run",
    "ScenarioError",
    "Work",
    "allreduce",
    "allreduce_async",
    "broadcast",
    "broadcast_async",
    "destroy",
    "init",
    "is_initialized",
    "ddp",
    "ps",
    "Simulation",
    "__version__",
    "builtin_scenarios",
    "load_scenario",
    "resolve_scenario",
    "scenario_text",
]
