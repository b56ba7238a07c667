"""Run-time tuning of ByteScheduler's ⟨partition size, credit size⟩ (autobyte.md §II-E, §III).

Every tuner has one interface: :meth:`Tuner.propose` the next configuration to run,
:meth:`Tuner.observe` the training speed measured with it. :class:`GridSearch` is the ground
truth, :class:`BayesOpt` is ByteScheduler's one-shot Bayesian optimization, and
:class:`Trigger` is AutoByte's rule for when a predicted gain is worth a reconfiguration
and when a prediction is far enough off to adapt the predictor.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported when first named, so `gradwire.tune.space` (the DDP hook's) loads neither
# bayes_opt nor the simulated job.
_WHERE = {
    "Candidate": "space",
    "grid": "space",
    "Trigger": "trigger",
    "BayesOpt": "tuners",
    "GridSearch": "tuners",
    "Tuner": "tuners",
}

__all__ = ["BayesOpt", "Candidate", "GridSearch", "Trigger", "Tuner", "grid"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'gradwire.tune' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gradwire.tune.{_WHERE[name]}"), name)
