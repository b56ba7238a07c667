"""Writing a finished matplotlib figure, the same way for every figure the front end draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save(fig: Any, path: Path) -> Path:
    """Lay `fig` out, write it to `path` as a 120-dpi image and free it; returns `path`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
