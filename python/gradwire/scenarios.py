"""Finding scenario files: a path on disk, or the name of a built-in scenario.

Built-in scenarios are the ``*.toml`` files shipped in the package's ``scenarios/``
directory; ``leafspine-ps-dctcp`` names ``scenarios/leafspine-ps-dctcp.toml``.
"""

from __future__ import annotations

import re
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


def _walk(d, prefix=""):
    for p in d.iterdir():
        if p.is_dir():
            yield from _walk(p, f"{prefix}{p.name}/")
        elif p.name.endswith(".toml"):
            yield prefix + p.name[: -len(".toml")]


def builtin_names() -> list[str]:
    """Names of the built-in scenarios, sorted; those in subdirectories are named
    ``subdir/name`` (e.g. ``repro/dlcp-fig14-resnet50``)."""
    d = _builtin_dir()
    if not d.is_dir():
        return []
    return sorted(_walk(d), key=lambda n: (n.count("/"), n))


def _builtin_text(name: str) -> str:
    return _builtin_dir().joinpath(*f"{name}.toml".split("/")).read_text(encoding="utf-8")


def builtin_scenarios() -> dict[str, str]:
    """Built-in scenario name -> its ``description`` (empty if the file has none)."""
    out = {}
    for name in builtin_names():
        text = _builtin_text(name)
        try:
            # The Rust loader reads the description (no TOML parser needed on Python 3.10).
            out[name] = load_scenario(text, [])[0].config().get("description", "")
        except ScenarioError as e:  # a broken built-in should not hide the others
            m = re.search(r'^description\s*=\s*"(.*)"\s*$', text, re.M)
            out[name] = (m.group(1) + " " if m else "") + f"(invalid: {e})"
    return out


def resolve_scenario(arg: str) -> ScenarioSource:
    """Resolve a scenario argument: an existing path, else a built-in name.

    Raises :class:`ScenarioError` (key ``""``) if neither exists or the file cannot be read.
    """
    path = Path(arg).expanduser()
    name = arg.removesuffix(".toml")
    if not path.exists() and name in builtin_names():
        return ScenarioSource(name=name, origin=f"builtin:{name}", text=_builtin_text(name))
    if path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise scenario_error(f"cannot read scenario file {arg}: {reason}") from None
        return ScenarioSource(name=path.stem, origin=str(path), text=text)
    known = ", ".join(builtin_names()) or "none"
    raise scenario_error(f"no scenario file or built-in scenario named `{arg}` (built-ins: {known})")


def scenario_text(arg: str) -> str:
    """The TOML text of a scenario path or built-in name."""
    return resolve_scenario(arg).text
