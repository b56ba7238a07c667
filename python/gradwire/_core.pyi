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
    def check(self) -> tuple[int, int] | None:
        """Raise ScenarioError for what building the simulation would refuse beyond
        validation (the fast mode's refusals, by key), without building its workload; a
        fast run's sample as (servers kept, of the job's), else None."""

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

def expand_scenario(
    text: str, overrides: list[str] = ...
) -> list[tuple[str | None, list[tuple[str, Any, str, str]], dict[str, Any]]]:
    """Apply overrides and expand ``[sweep]`` without typing: per point its name (None
    without a sweep), the (dotted key, value, label, TOML literal) of each axis, and the
    whole tree."""

class Simulation:
    def __init__(self, run: Run) -> None: ...
    def step(self, max_events: int = 200_000) -> bool:
        """Process up to ``max_events`` events without the GIL; True once the run is over.

        With ``threads`` > 1 the parts stop together at a window's end once about
        ``max_events`` have run in all, and wait on their threads for the next call; how a
        run is stepped does not change it. With ``fast.cover`` the samples run on their own
        threads, and a step waits until about ``max_events`` more have run in all."""
    def run(self) -> None: ...
    def progress(self) -> ProgressDict: ...
    def summary(self) -> dict[str, Any]: ...
    def conservation(self) -> ConservationDict: ...
    def write_outputs(self, dir: str) -> dict[str, Any]: ...
    def config(self) -> dict[str, Any]: ...

def emu_main(argv: list[str]) -> int:
    """The emulator's switch (``gradwire-emu run | check | sweep``) in this process; its exit
    code. ``gradwire emulate`` runs it as ``python -m gradwire.emu.switch``."""

def control_rto_min_us() -> int | None:
    """The minimum RTO (µs) the runtime's control connections get from this kernel, or None
    where it lacks TCP_RTO_MIN_US (they keep Linux's 200 ms)."""

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

class Scheduler:
    """ByteScheduler's partition-and-credit scheduler (gradwire-core's sched)."""

    def __init__(self, partition_bytes: int, credit_bytes: int, front_first: bool = True) -> None: ...
    def post(self, tensor: int, layer: int, bytes: int) -> None: ...
    def poll_start(self) -> tuple[int, int, int, int, int] | None: ...
    def complete(self, id: int) -> None: ...
    def reconfigure(self, partition_bytes: int, credit_bytes: int) -> None: ...
    @property
    def partition_bytes(self) -> int: ...
    @property
    def credit_bytes(self) -> int: ...
    @property
    def in_flight_bytes(self) -> int: ...
    @property
    def queued_bytes(self) -> int: ...
