"""AutoByte's optimization trigger (autobyte.md §III): reconfigure only for a predicted gain
of at least ``gain`` (5 %), and adapt the predictor online when a prediction misses the
measured speed by more than ``error`` (10 %)."""

from __future__ import annotations

from dataclasses import dataclass

from gradwire.tune.space import Candidate


@dataclass
class Trigger:
    gain: float = 0.05
    error: float = 0.10

    def choose(self, current: Candidate, predicted: dict[Candidate, float]) -> Candidate | None:
        """The candidate to switch to, or None to stay. Both sides of the comparison are
        predictions, so a predictor's bias cancels out; the current configuration must be
        among the predicted ones."""
        if current not in predicted:
            raise ValueError(f"the current configuration {current} has no prediction")
        best = max(predicted, key=lambda c: (predicted[c], c == current))
        base = predicted[current]
        if best == current or base <= 0:
            return None
        return best if predicted[best] >= (1.0 + self.gain) * base else None

    def needs_adaptation(self, predicted: float, measured: float) -> bool:
        """True when the predictor was off by more than ``error`` of the measured speed."""
        if measured <= 0:
            return predicted > 0
        return abs(predicted - measured) > self.error * measured
