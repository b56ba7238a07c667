"""Run-time tuning of ByteScheduler's ⟨partition size, credit size⟩ (autobyte.md §II-E, §III).

Every tuner has one interface: :meth:`Tuner.propose` the next configuration to run,
:meth:`Tuner.observe` the training speed measured with it. :class:`GridSearch` is the ground
truth, :class:`BayesOpt` is ByteScheduler's one-shot Bayesian optimization, and
:class:`Trigger` is AutoByte's rule for when a predicted gain is worth a reconfiguration
and when a prediction is far enough off to adapt the predictor.
"""

from gradwire.tune.space import Candidate, grid
from gradwire.tune.trigger import Trigger
from gradwire.tune.tuners import BayesOpt, GridSearch, Tuner

__all__ = ["BayesOpt", "Candidate", "GridSearch", "Trigger", "Tuner", "grid"]
