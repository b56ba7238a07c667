"""The configurations a tuner chooses from: ⟨S_p, S_c⟩ as the paper steps them."""

from __future__ import annotations

from dataclasses import dataclass

MB = 1_000_000


@dataclass(frozen=True, order=True)
class Candidate:
    """A partition size and a credit of ``credit_multiple`` partitions (the paper's ⟨S_p, k×⟩)."""

    partition_bytes: int
    credit_multiple: int

    def __post_init__(self):
        if self.partition_bytes < 1:
            raise ValueError(f"partition size must be at least 1 byte, got {self.partition_bytes}")
        if self.credit_multiple < 1:
            raise ValueError(f"credit must be at least one partition, got {self.credit_multiple}×")

    @property
    def credit_bytes(self) -> int:
        return self.partition_bytes * self.credit_multiple

    def __str__(self) -> str:
        return f"⟨{self.partition_bytes / MB:g} MB, {self.credit_multiple}×⟩"


def grid(
    partition_step_bytes: int = 2 * MB,
    max_partition_bytes: int = 16 * MB,
    max_credit_multiple: int = 8,
) -> list[Candidate]:
    """Every candidate of the grid search: S_p in steps of ``partition_step_bytes`` (2 MB in
    the paper) up to ``max_partition_bytes``, credit 1× … ``max_credit_multiple``×."""
    if partition_step_bytes < 1 or max_partition_bytes < partition_step_bytes or max_credit_multiple < 1:
        raise ValueError("need 1 ≤ partition step ≤ max partition size and a credit multiple ≥ 1")
    sizes = range(partition_step_bytes, max_partition_bytes + 1, partition_step_bytes)
    return [Candidate(p, k) for p in sizes for k in range(1, max_credit_multiple + 1)]
