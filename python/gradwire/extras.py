"""Which optional extra a command needs, checked before anything imports it.

``pip install gradwire`` runs the simulator, the reproductions that run it, ``plot``,
``launch`` and the runtime; PyTorch's side (the backend, ``train``, ``tolerance``,
AutoByte's meta-network) needs ``gradwire[torch]``, and ``--cluster ray`` needs
``gradwire[cluster]``. A command that needs a missing extra
raises :class:`MissingExtra`, which the CLI prints as one line (exit 2, no traceback).
"""

from __future__ import annotations

import importlib.util

#: Each extra and the modules it installs (pyproject.toml's [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "sklearn"),
    "cluster": ("ray",),
}


class MissingExtra(RuntimeError):
    """A command needs an extra that is not installed; ``str()`` is the one line to print."""

    def __init__(self, what: str, extra: str, missing: list[str]):
        self.what = what
        self.extra = extra
        self.missing = missing
        super().__init__(f'{what} needs {" and ".join(missing)}: pip install "gradwire[{extra}]"')


def missing_modules(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of ``extra`` (or just ``modules``) that cannot be imported here."""
    names = modules if modules is not None else EXTRAS[extra]
    out = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append({"sklearn": "scikit-learn"}.get(name, name))
    return out


def require(what: str, extra: str = "torch", modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtra` naming ``what`` (e.g. "gradwire train") if ``extra``'s
    modules (or just ``modules``) are not installed."""
    missing = missing_modules(extra, modules)
    if missing:
        raise MissingExtra(what, extra, missing)
