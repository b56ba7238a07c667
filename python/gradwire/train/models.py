"""The embedded models and datasets of `gradwire train` and `gradwire tolerance`: nothing
is downloaded. ``digits``: scikit-learn's bundled 8x8 handwritten digits (1797 images)
with a small CNN. ``resnet18``: ResNet18 (CIFAR layout) on generated 32x32 images of 10
classes (a fixed random pattern per class plus noise), for speed runs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Dataset:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def digits(seed: int = 0) -> Dataset:
    """scikit-learn's digits, scaled to [0, 1], 1/4 held out for testing (fixed split)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    n = len(y) * 3 // 4
    return Dataset(x[:n], y[:n], x[n:], y[n:])


def synthetic32(n_train: int = 1024, n_test: int = 256, seed: int = 0, noise: float = 1.0) -> Dataset:
    """10 classes of 3x32x32 images: a fixed random pattern per class plus Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(10, 3, 32, 32, generator=g)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 10, (n,), generator=g)
        return patterns[y] * 0.5 + noise * torch.randn(n, 3, 32, 32, generator=g), y

    (xt, yt), (xv, yv) = draw(n_train), draw(n_test)
    return Dataset(xt, yt, xv, yv)


class DigitsCNN(nn.Sequential):
    """Two 3x3 convolutions and two linear layers: 29 k parameters."""

    def __init__(self) -> None:
        super().__init__(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 4 * 4, 48), nn.ReLU(), nn.Linear(48, 10),
        )  # fmt: skip


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.skip(x))


class ResNet18(nn.Module):
    """ResNet18 for 32x32 inputs (3x3 stem, no max-pool): 11.2 M parameters."""

    def __init__(self, classes: int = 10, width: int = 64):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        layers, cin = [], w
        for cout, stride in [(w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2)]:
            layers += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


MODELS = {"cnn": (DigitsCNN, digits), "resnet18": (ResNet18, synthetic32)}


def build(name: str, seed: int = 0) -> tuple[nn.Module, Dataset]:
    """The model (weights from `seed`) and its dataset."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
    make_model, make_data = MODELS[name]
    torch.manual_seed(seed)
    return make_model(), make_data()
