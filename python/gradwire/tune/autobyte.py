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
- the candidate: log2 S_p and the credit multiple k, and (:class:`NetConfig`) learned
  embeddings of its place on the paper's grid.

Two dense layers map the concatenation to a speed (samples/s, or its log); the loss is L2.
The runtime features are encoded once per observation and shared by every candidate, so
scoring the whole grid costs one LSTM pass plus one small batched MLP.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from gradwire.tune.observation import Observation  # noqa: F401 - re-exported (autobyte.Observation)
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


def _index(vocab: tuple[str, ...], name: str) -> int:
    return vocab.index(name) if name in vocab else 0


#: The grid's partition sizes and credit multiples (autobyte.md §IV-C: S_p in 2 MB steps,
#: 1× steps of credit), each with a learned embedding; any other value maps to slot 0.
PARTITION_SLOTS = tuple(2_000_000 * i for i in range(1, 9))
CREDIT_SLOTS = tuple(range(1, 9))


@dataclass(frozen=True)
class NetConfig:
    """The choices §III-A leaves open, saved with the weights (docs/scheduling.md ablates them).

    - ``slot_embed``: besides (log2 S_p, k), a learned embedding of the candidate's grid slot
      (its S_p and its k each), so the head can fit a speed that is not smooth over the
      grid (PS striping makes the 4 MB row 20–30 % slower than its neighbours); 0 = off.
    - ``cell_embed``: a learned embedding of the candidate's grid cell (its S_p and k
      together: a one-hot of the 64 cells), for shapes that do not factor into a row and a
      column effect; 0 = off.
    - ``log_target``: learn log(speed) instead of speed/scale, so that the L2 loss weighs a
      10 % error alike on a 15 samples/s and on a 3000 samples/s job (ranking only needs
      ratios within one condition).
    - ``level_weight``: the L2 loss split into the error's mean over one observation's
      candidates (the condition's level) and the rest (the shape over candidates, which is
      all a ranking needs), the level weighted by this; 1.0 is the plain L2 loss.
    """

    embed: int = 16
    hidden: int = 32
    dense: int = 64
    slot_embed: int = 0
    cell_embed: int = 0
    log_target: bool = False
    level_weight: float = 1.0


class MetaNet(nn.Module):
    """f: (T, B, static, ⟨S_p, S_c⟩) → V, as in Fig. 4(a)."""

    def __init__(self, config: NetConfig | None = None):
        super().__init__()
        self.config = cfg = config or NetConfig()
        self.layer_embed = nn.Linear(2, cfg.embed)
        self.lstm = nn.LSTM(cfg.embed, cfg.hidden, num_layers=2, batch_first=True)
        self.model_embed = nn.Embedding(len(MODELS), 4)
        self.arch_embed = nn.Embedding(len(ARCHS), 2)
        runtime = cfg.hidden + 6 + 2 + 4 + 2  # LSTM, bandwidth stats, workers/layers, embeddings
        if cfg.slot_embed:
            self.partition_embed = nn.Embedding(len(PARTITION_SLOTS) + 1, cfg.slot_embed)
            self.credit_embed = nn.Embedding(len(CREDIT_SLOTS) + 1, cfg.slot_embed)
        if cfg.cell_embed:
            self.cell_embed = nn.Embedding(len(PARTITION_SLOTS) * len(CREDIT_SLOTS) + 1, cfg.cell_embed)
        cand = 2 + 2 * cfg.slot_embed + cfg.cell_embed
        self.head = nn.Sequential(nn.Linear(runtime + cand, cfg.dense), nn.ReLU(), nn.Linear(cfg.dense, 1))

    def encode(self, obs: Observation) -> torch.Tensor:
        """The runtime features of one observation: a vector shared by every candidate."""
        return self.encode_batch([obs])[0]

    def encode_batch(self, observations: list[Observation]) -> torch.Tensor:
        """(N, F): one LSTM pass over the observations' layer sequences, padded and packed."""
        parts = [_inputs(o) for o in observations]
        seqs = [p[0] for p in parts]
        lengths = torch.tensor([len(q) for q in seqs])
        x = torch.relu(self.layer_embed(nn.utils.rnn.pad_sequence(seqs, batch_first=True)))
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        rest = torch.stack([p[1] for p in parts])
        m = self.model_embed(torch.tensor([p[2] for p in parts]))
        a = self.arch_embed(torch.tensor([p[3] for p in parts]))
        return torch.cat([h[-1], rest, m, a], dim=1)

    def forward(self, runtime: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """``runtime``: (F,) or (N, F); ``candidates``: (N, 4) from :func:`candidate_features`
        → the network's output per candidate (N,): speed/scale, or log(speed/scale)."""
        if runtime.dim() == 1:
            runtime = runtime.expand(candidates.shape[0], -1)
        feats = [runtime, candidates[:, :2]]
        if self.config.slot_embed:
            feats += [self.partition_embed(candidates[:, 2].long()), self.credit_embed(candidates[:, 3].long())]
        if self.config.cell_embed:
            p, k = candidates[:, 2].long(), candidates[:, 3].long()
            on_grid = (p > 0) & (k > 0)
            feats.append(self.cell_embed(torch.where(on_grid, (p - 1) * len(CREDIT_SLOTS) + k, 0)))
        return self.head(torch.cat(feats, dim=1)).squeeze(1)


def _inputs(obs: Observation) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """An observation's inputs: per layer (log of the workers' mean and max backward time),
    the bandwidth and static features, and the model's and architecture's vocabulary index.
    Cached on the observation: fitting reads each one once per epoch."""
    cached = getattr(obs, "_inputs", None)
    if cached is not None:
        return cached
    t = torch.tensor(obs.backward_ms, dtype=torch.float32)  # layers × workers
    per_layer = torch.log1p(torch.stack([t.mean(dim=1), t.amax(dim=1)], dim=1))
    up = torch.tensor(obs.upload_gbps, dtype=torch.float32)
    down = torch.tensor(obs.download_gbps, dtype=torch.float32)
    bw = torch.log1p(torch.stack([up.mean(), up.amin(), up.amax(), down.mean(), down.amin(), down.amax()]))
    static = torch.log1p(torch.tensor([float(obs.workers), float(len(obs.backward_ms))]))
    out = (per_layer, torch.cat([bw, static]), _index(MODELS, obs.model), _index(ARCHS, obs.arch))
    object.__setattr__(obs, "_inputs", out)
    return out


def candidate_features(candidates: list[Candidate]) -> torch.Tensor:
    """(N, 4): log2 S_p (MB-ish), k, and the grid slots of S_p and k (0 if off the grid)."""
    return torch.tensor(
        [
            [
                math.log2(c.partition_bytes) - 20.0,
                float(c.credit_multiple),
                float(_slot(PARTITION_SLOTS, c.partition_bytes)),
                float(_slot(CREDIT_SLOTS, c.credit_multiple)),
            ]
            for c in candidates
        ],
        dtype=torch.float32,
    )


def _slot(slots: tuple[int, ...], value: int) -> int:
    return slots.index(value) + 1 if value in slots else 0


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
    """The optimizer: the meta-network (or ``members`` of them, trained from different seeds
    and averaged), its speed scale, and fitting on samples.

    Speeds are learned relative to ``scale`` (the training data's mean speed, or its
    geometric mean with a log target), so the network's output stays near 1 (or 0) whatever
    the model's samples/s."""

    def __init__(
        self,
        net: MetaNet | None = None,
        scale: float = 1.0,
        seed: int = 0,
        config: NetConfig | None = None,
        members: int = 1,
    ):
        torch.manual_seed(seed)
        self.nets = [net] if net is not None else [MetaNet(config) for _ in range(members)]
        self.scale = scale

    @property
    def net(self) -> MetaNet:
        return self.nets[0]

    @property
    def config(self) -> NetConfig:
        return self.net.config

    def _to_speed(self, y: torch.Tensor) -> torch.Tensor:
        return (torch.exp(y) if self.config.log_target else y) * self.scale

    def _target(self, speeds: list[float]) -> torch.Tensor:
        v = torch.tensor(speeds, dtype=torch.float32) / self.scale
        return torch.log(v.clamp_min(1e-6)) if self.config.log_target else v

    @torch.no_grad()
    def predict(self, obs: Observation, candidates: list[Candidate]) -> dict[Candidate, float]:
        """Predicted samples/s of every candidate, from one encoding of ``obs`` per member
        (the members' outputs are averaged: a geometric mean of speeds with a log target)."""
        feats = candidate_features(candidates)
        with _one_thread():
            y = torch.stack([net.eval()(net.encode(obs), feats) for net in self.nets]).mean(dim=0)
            v = self._to_speed(y)
        return dict(zip(candidates, v.tolist()))

    def fit(
        self,
        samples: list[tuple[Observation, Candidate, float]],
        epochs: int = 30,
        lr: float = 1e-2,
        batch: int = 64,
        seed: int = 0,
        on_epoch: Callable[[int, AutoByte], bool] | None = None,
        head_only: bool = False,
    ) -> list[float]:
        """Train (offline) or fine-tune (online adapting) on (observation, candidate, measured
        samples/s) triples; returns the members' mean L2 loss of each epoch (in the target's
        units). ``on_epoch(epoch, self)`` runs after each epoch; returning True stops early.
        ``head_only`` trains the two dense layers and keeps the encoders (LSTM, embeddings)."""
        if not samples:
            raise ValueError("no samples to fit")
        if self.scale == 1.0:
            speeds = [max(s, 1e-6) for _, _, s in samples]
            if self.config.log_target:
                self.scale = math.exp(sum(math.log(s) for s in speeds) / len(speeds))
            else:
                self.scale = sum(speeds) / len(speeds)
        # enable_grad: online adapting may run where autograd has turned it off (inside a
        # DDP comm hook, which runs during the job's backward pass)
        with _one_thread(), torch.enable_grad():
            return self._fit(samples, epochs, lr, batch, seed, on_epoch, head_only)

    def _fit(self, samples, epochs, lr, batch, seed, on_epoch, head_only) -> list[float]:
        # batches are whole observations (every candidate measured under one condition), so
        # that a batch encodes a few observations instead of one per sample: the LSTM pass
        # is the cost, and offline data has ~64 candidates per observation
        groups: dict[int, list[int]] = {}
        for j, (o, _, _) in enumerate(samples):
            groups.setdefault(id(o), []).append(j)
        keys = list(groups)
        cand_all = candidate_features([c for _, c, _ in samples])
        target_all = self._target([s for _, _, s in samples])
        gens, opts, decays = [], [], []
        for m, net in enumerate(self.nets):
            gens.append(torch.Generator().manual_seed(seed + m))
            opts.append(torch.optim.Adam(net.head.parameters() if head_only else net.parameters(), lr=lr))
            # the rate decays to 0 over the epochs (cosine): with a constant one the ranking
            # of the last epoch swung by ±5 points of top-1 from one epoch to the next
            decays.append(torch.optim.lr_scheduler.CosineAnnealingLR(opts[-1], T_max=max(1, epochs)))
        losses = []
        for epoch in range(epochs):
            total = 0.0
            for net, gen, opt, decay in zip(self.nets, gens, opts, decays):
                net.train()
                order = [j for g in torch.randperm(len(keys), generator=gen).tolist() for j in groups[keys[g]]]
                for i in range(0, len(order), batch):
                    idx = order[i : i + batch]
                    runtime = _encode_all(net, [samples[j][0] for j in idx])
                    pick = torch.tensor(idx)
                    err = net(runtime, cand_all[pick]) - target_all[pick]
                    loss = self._loss(err, [samples[j][0] for j in idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += loss.item() * len(idx)
                decay.step()
                net.eval()
            losses.append(total / len(samples) / len(self.nets))
            if on_epoch is not None and on_epoch(epoch, self):
                break
        return losses

    def _loss(self, err: torch.Tensor, observations: list[Observation]) -> torch.Tensor:
        """L2, with the per-observation mean error (the level) weighted by ``level_weight``:
        mean(e²) = mean((e − ē)²) + mean(ē²), so a weight of 1 is the plain L2 loss."""
        w = self.config.level_weight
        if w == 1.0:
            return torch.mean(err**2)
        slot: dict[int, int] = {}
        group = torch.tensor([slot.setdefault(id(o), len(slot)) for o in observations])
        counts = torch.bincount(group).to(err.dtype)
        level = torch.zeros(len(slot)).index_add(0, group, err) / counts
        return torch.mean((err - level[group]) ** 2) + w * torch.mean(level[group] ** 2)

    def save(self, path: Path) -> None:
        states = [net.state_dict() for net in self.nets]
        torch.save({"states": states, "scale": self.scale, "config": asdict(self.config)}, path)

    @classmethod
    def load(cls, path: Path) -> AutoByte:
        blob = torch.load(path, weights_only=True)
        states = blob["states"] if "states" in blob else [blob["state"]]
        ab = cls(scale=float(blob["scale"]), config=NetConfig(**blob.get("config", {})), members=len(states))
        for net, state in zip(ab.nets, states):
            net.load_state_dict(state)
            net.eval()
        return ab


def _encode_all(net: MetaNet, observations: list[Observation]) -> torch.Tensor:
    """Encode each distinct observation once (every candidate of a measurement shares it)."""
    slot: dict[int, int] = {}
    distinct = []
    for o in observations:
        if id(o) not in slot:
            slot[id(o)] = len(distinct)
            distinct.append(o)
    encoded = net.encode_batch(distinct)
    return encoded[torch.tensor([slot[id(o)] for o in observations])]
