"""AutoByte's meta-network (autobyte.md §III-A): predicts the training speed a job would have
under each candidate ⟨S_p, S_c⟩ from what the job measures at run time.

Inputs (Table II), per observation:

- ``backward_ms``: the layer-wise backward computation time, layers × workers. Each layer is
  embedded to a fixed size from its per-worker mean and max (so any number of workers
  fits), and a two-layer LSTM reads the layers in backward order (so any number of layers
  fits).
- ``upload_gbps`` / ``download_gbps``: each worker's measured bandwidth; the network monitor
  reads their mean, min and max (any number of workers).
- static features: workers, layers, and learned embeddings of the model and of the
  architecture (``"ps"`` or ``"ring"``).
- the candidate: log2 S_p and the credit multiple k.

Two dense layers map the concatenation to a speed (samples/s); the loss is L2. The runtime
features are encoded once per observation and shared by every candidate, so scoring the
whole grid costs one LSTM pass plus one small batched MLP.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from gradwire.tune.space import Candidate

#: Model and architecture vocabularies; an unknown name maps to index 0 ("other").
MODELS = (
    "other",
    "resnet18",
    "resnet50",
    "inception_v3",
    "vgg16",
    "alexnet",
    "transformer",
)
ARCHS = ("other", "ps", "ring")


@dataclass
class Observation:
    """What a job measured over one group of iterations (10 in the paper)."""

    backward_ms: list[list[float]]
    """Per layer (in backward order), per worker: backward time in ms."""
    upload_gbps: list[float]
    download_gbps: list[float]
    model: str
    arch: str
    workers: int = field(default=0)

    def __post_init__(self):
        if not self.backward_ms or not self.backward_ms[0]:
            raise ValueError("backward_ms needs at least one layer and one worker")
        if not self.upload_gbps or not self.download_gbps:
            raise ValueError("bandwidths need at least one worker")
        if self.workers <= 0:
            self.workers = len(self.backward_ms[0])


def _index(vocab: tuple[str, ...], name: str) -> int:
    return vocab.index(name) if name in vocab else 0


class MetaNet(nn.Module):
    """f: (T, B, static, ⟨S_p, S_c⟩) → V, as in Fig. 4(a)."""

    def __init__(self, embed: int = 16, hidden: int = 32, dense: int = 64):
        super().__init__()
        self.layer_embed = nn.Linear(2, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=2, batch_first=True)
        self.model_embed = nn.Embedding(len(MODELS), 4)
        self.arch_embed = nn.Embedding(len(ARCHS), 2)
        runtime = hidden + 6 + 2 + 4 + 2  # LSTM, bandwidth stats, workers/layers, embeddings
        self.head = nn.Sequential(nn.Linear(runtime + 2, dense), nn.ReLU(), nn.Linear(dense, 1))

    def encode(self, obs: Observation) -> torch.Tensor:
        """The runtime features of one observation: a vector shared by every candidate."""
        t = torch.tensor(obs.backward_ms, dtype=torch.float32)  # layers × workers
        per_layer = torch.stack([t.mean(dim=1), t.amax(dim=1)], dim=1)  # layers × 2
        x = torch.relu(self.layer_embed(torch.log1p(per_layer))).unsqueeze(0)
        _, (h, _) = self.lstm(x)
        up = torch.tensor(obs.upload_gbps, dtype=torch.float32)
        down = torch.tensor(obs.download_gbps, dtype=torch.float32)
        bw = torch.log1p(torch.stack([up.mean(), up.amin(), up.amax(), down.mean(), down.amin(), down.amax()]))
        static = torch.log1p(torch.tensor([float(obs.workers), float(len(obs.backward_ms))]))
        m = self.model_embed(torch.tensor(_index(MODELS, obs.model)))
        a = self.arch_embed(torch.tensor(_index(ARCHS, obs.arch)))
        return torch.cat([h[-1, 0], bw, static, m, a])

    def forward(self, runtime: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """``runtime``: (F,) or (N, F); ``candidates``: (N, 2) → predicted speeds (N,)."""
        if runtime.dim() == 1:
            runtime = runtime.expand(candidates.shape[0], -1)
        return self.head(torch.cat([runtime, candidates], dim=1)).squeeze(1)


def candidate_features(candidates: list[Candidate]) -> torch.Tensor:
    return torch.tensor(
        [[math.log2(c.partition_bytes) - 20.0, float(c.credit_multiple)] for c in candidates],
        dtype=torch.float32,
    )


@contextlib.contextmanager
def _one_thread():
    """The network is tiny: torch's intra-op threads only add hand-offs, and beside a
    training job on busy cores they made fitting 8× slower. Restore the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class AutoByte:
    """The optimizer: the meta-network, its speed scale, and fitting on samples.

    Speeds are learned in units of ``scale`` (the mean speed of the training data), so the
    network's output stays near 1 whatever the model's samples/s."""

    def __init__(self, net: MetaNet | None = None, scale: float = 1.0, seed: int = 0):
        torch.manual_seed(seed)
        self.net = net or MetaNet()
        self.scale = scale

    @torch.no_grad()
    def predict(self, obs: Observation, candidates: list[Candidate]) -> dict[Candidate, float]:
        """Predicted samples/s of every candidate, from one encoding of ``obs``."""
        self.net.eval()
        with _one_thread():
            v = self.net(self.net.encode(obs), candidate_features(candidates)) * self.scale
        return dict(zip(candidates, v.tolist()))

    def fit(
        self,
        samples: list[tuple[Observation, Candidate, float]],
        epochs: int = 30,
        lr: float = 1e-2,
        batch: int = 64,
        seed: int = 0,
    ) -> list[float]:
        """Train (offline) or fine-tune (online adapting) on (observation, candidate, measured
        samples/s) triples; returns the mean L2 loss of each epoch."""
        if not samples:
            raise ValueError("no samples to fit")
        if self.scale == 1.0:
            self.scale = sum(s for _, _, s in samples) / len(samples) or 1.0
        with _one_thread():
            return self._fit(samples, epochs, lr, batch, seed)

    def _fit(self, samples, epochs, lr, batch, seed) -> list[float]:
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        losses = []
        self.net.train()
        # batches are whole observations (every candidate measured under one condition), so
        # that a batch encodes a few observations instead of one per sample: the LSTM pass
        # is the cost, and offline data has ~64 candidates per observation
        groups: dict[int, list[int]] = {}
        for j, (o, _, _) in enumerate(samples):
            groups.setdefault(id(o), []).append(j)
        keys = list(groups)
        for _ in range(epochs):
            order = [j for g in torch.randperm(len(keys), generator=gen).tolist() for j in groups[keys[g]]]
            total = 0.0
            for i in range(0, len(order), batch):
                chunk = [samples[j] for j in order[i : i + batch]]
                runtime = self._encode_all([o for o, _, _ in chunk])
                cand = candidate_features([c for _, c, _ in chunk])
                target = torch.tensor([s / self.scale for _, _, s in chunk], dtype=torch.float32)
                loss = torch.mean((self.net(runtime, cand) - target) ** 2)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(chunk)
            losses.append(total / len(samples))
        self.net.eval()
        return losses

    def _encode_all(self, observations: list[Observation]) -> torch.Tensor:
        """Encode each distinct observation once (every candidate of a measurement shares it)."""
        slot: dict[int, int] = {}
        distinct = []
        for o in observations:
            if id(o) not in slot:
                slot[id(o)] = len(distinct)
                distinct.append(o)
        encoded = torch.stack([self.net.encode(o) for o in distinct])
        return encoded[torch.tensor([slot[id(o)] for o in observations])]

    def save(self, path: Path) -> None:
        torch.save({"state": self.net.state_dict(), "scale": self.scale}, path)

    @classmethod
    def load(cls, path: Path) -> AutoByte:
        blob = torch.load(path, weights_only=True)
        ab = cls(scale=float(blob["scale"]))
        ab.net.load_state_dict(blob["state"])
        ab.net.eval()
        return ab
