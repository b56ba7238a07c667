"""Type stubs for the Rust extension ``gradwire._core`` (crates/gradwire-py)."""

from typing import Any, TypedDict

__version__: str

class ScenarioError(ValueError):
    """A scenario is invalid. ``str(e)`` is "`key`: message" and names the bad value."""

    key: str
    """Dotted key at fault, e.g. ``topology.spines``; empty for file-level errors."""
    message: str

class Run:
    """One validated run of a scenario (a point of its sweep); the typed scenario stays in Rust."""

    @property
    def name(self) -> str:
        """Directory-safe run name: the scenario name, or ``key=value,...`` of the sweep point."""
    @property
    def params(self) -> dict[str, str]:
        """The sweep point, dotted key -> value as a string."""
    def config(self) -> dict[str, Any]:
        """The typed scenario, every default filled in, as a dict (a copy to read)."""

class ProgressDict(TypedDict):
    now_ns: int
    stop_ns: int
    flows_done: int
    flows_total: int
    events: int
    finished: bool

class ConservationDict(TypedDict):
    sent: int
    delivered: int
    dropped: int
    in_flight: int
    holds: bool

def load_scenario(text: str, overrides: list[str] = ...) -> list[Run]:
    """Parse TOML, apply ``key=value`` overrides, expand ``[sweep]``, validate every run."""

class Simulation:
    def __init__(self, run: Run) -> None: ...
    def step(self, max_events: int = 200_000) -> bool:
        """Process up to ``max_events`` events without the GIL; True once the run is over."""
    def run(self) -> None: ...
    def progress(self) -> ProgressDict: ...
    def summary(self) -> dict[str, Any]: ...
    def conservation(self) -> ConservationDict: ...
    def write_outputs(self, dir: str) -> dict[str, Any]: ...
    def config(self) -> dict[str, Any]: ...

def algorithms() -> list[str]:
    """The allreduce algorithms the socket runtime knows (``gradwire.runtime.ALGORITHMS``)."""

def transports() -> list[str]:
    """The transports the socket runtime runs (``gradwire.runtime.TRANSPORTS``)."""

class BytesJob:
    def __init__(self, config_json: str) -> None: ...
    def set_sched(self, partition_bytes: int | None, credit_bytes: int | None = None, fifo: bool = False) -> None: ...
    def run(self, iterations: int) -> list[dict[str, Any]]: ...
    @property
    def completed(self) -> int: ...
    def config_json(self) -> str: ...
