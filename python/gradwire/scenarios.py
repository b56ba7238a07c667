"""Finding scenario files: a path on disk, or the name of a built-in scenario.

Built-in scenarios are the ``*.toml`` files shipped in the package's ``scenarios/``
directory; ``leafspine-ps-dctcp`` names ``scenarios/leafspine-ps-dctcp.toml``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gradwire._core import ScenarioError, load_scenario

DEFAULT_SCENARIO = "leafspine-compare"


@dataclass(frozen=True)
class ScenarioSource:
    """Where a scenario came from and its TOML text."""

    name: str
    """The built-in name, or the file's stem."""
    origin: str
    """A path, or ``builtin:<name>``."""
    text: str


def scenario_error(message: str, key: str = "") -> ScenarioError:
    """A :class:`ScenarioError` shaped like the ones raised by the Rust loader."""
    text = f"`{key}`: {message}" if key else message
    err = ScenarioError(text)
    err.key = key
    err.message = message
    return err


def _builtin_dir():
    return resources.files("gradwire").joinpath("scenarios")


def builtin_names() -> list[str]:
    """Names of the built-in scenarios, sorted."""
    d = _builtin_dir()
    if not d.is_dir():
        return []
    return sorted(p.name[: -len(".toml")] for p in d.iterdir() if p.name.endswith(".toml"))


def builtin_scenarios() -> dict[str, str]:
    """Built-in scenario name -> its ``description`` (empty if the file has none)."""
    out = {}
    for name in builtin_names():
        text = _builtin_dir().joinpath(name + ".toml").read_text(encoding="utf-8")
        try:
            # The Rust loader reads the description (no TOML parser needed on Python 3.10).
            out[name] = json.loads(load_scenario(text, [])[0]["config"]).get("description", "")
        except ScenarioError as e:  # a broken built-in should not hide the others
            out[name] = f"(invalid: {e})"
    return out


def resolve_scenario(arg: str) -> ScenarioSource:
    """Resolve a scenario argument: an existing path, else a built-in name.

    Raises :class:`ScenarioError` (key ``""``) if neither exists or the file cannot be read.
    """
    path = Path(arg).expanduser()
    if path.exists() or arg.endswith(".toml") or "/" in arg or "\\" in arg:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise scenario_error(f"cannot read scenario file {arg}: {reason}") from None
        return ScenarioSource(name=path.stem, origin=str(path), text=text)
    name = arg.removesuffix(".toml")
    if name in builtin_names():
        text = _builtin_dir().joinpath(name + ".toml").read_text(encoding="utf-8")
        return ScenarioSource(name=name, origin=f"builtin:{name}", text=text)
    known = ", ".join(builtin_names()) or "none"
    raise scenario_error(f"no scenario file or built-in scenario named `{arg}` (built-ins: {known})")


def scenario_text(arg: str) -> str:
    """The TOML text of a scenario path or built-in name."""
    return resolve_scenario(arg).text
