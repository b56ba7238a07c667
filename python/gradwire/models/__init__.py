"""Per-layer DNN traffic profiles shipped with gradwire (no torch needed).

Each profile is a JSON file in ``crates/gradwire-sim/models/``, generated from the real
model definitions by ``tools/dnn_profiles/generate.py`` (see its README for the
assumptions), embedded in the simulator and read here through the extension, so the two
languages read one copy.  A profile lists the model's layers in forward order (index 0 is
the input-side layer) with their parameter count, fp32 gradient size in bytes,
forward FLOPs at the profile's batch size, modelled backward time and
``ready_offset_s``: the time after backward starts at which that layer's
gradient is ready (backward runs from the last layer to the first).

>>> from gradwire.models import list_profiles, load_profile
>>> "resnet50" in list_profiles()
True
>>> load_profile("resnet50")["total_params"]
25557032
"""

from __future__ import annotations

import json

from gradwire._core import model_profiles

__all__ = ["list_profiles", "load_profile"]


def list_profiles() -> list[str]:
    """Names of the shipped profiles, sorted (e.g. ``["alexnet", ..., "vgg16"]``)."""
    return sorted(model_profiles())


def load_profile(name: str) -> dict:
    """Load the profile called ``name`` (case-insensitive, ``.json`` optional).

    Raises ``KeyError`` naming the available profiles if there is none such.
    """
    key = name.strip().lower()
    if key.endswith(".json"):
        key = key[: -len(".json")]
    available = list_profiles()
    if key not in available:
        raise KeyError(f"no DNN profile {name!r}; available: {', '.join(available)}")
    return json.loads(model_profiles()[key])
