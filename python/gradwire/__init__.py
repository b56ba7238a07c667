"""gradwire: a communication stack for data-parallel DNN training.

The Python package is the front end of the Rust simulator (``gradwire._core``):

>>> import gradwire
>>> runs = gradwire.load_scenario(gradwire.scenario_text("incast-dctcp"),
...                               ["topology.leaves=2", "workload.senders=4"])
>>> sim = gradwire.Simulation(runs[0]["config"])
>>> while not sim.step(200_000): pass
>>> sim.summary()["flows_finished"]
4
"""

from gradwire._core import ScenarioError, Simulation, load_scenario
from gradwire._core import __version__ as _core_version

__version__ = _core_version

from gradwire.scenarios import builtin_scenarios, resolve_scenario, scenario_text  # noqa: E402

__all__ = [
    "ScenarioError",
    "Simulation",
    "__version__",
    "builtin_scenarios",
    "load_scenario",
    "resolve_scenario",
    "scenario_text",
]
