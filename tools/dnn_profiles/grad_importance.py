#!/usr/bin/env python3
"""Per-layer share of DLCP-important packets, from real PyTorch gradients.

DLCP (dlcp.md §3.2.2) tags a packet important when the mean ``|g|`` of the gradients it
carries is at least the median ``|g|`` of its tensor, the median estimated from a 0.1 %
sample. The simulator has no gradient values, so this script trains the real torchvision
model for a few SGD steps on CPU, applies that rule to every layer's gradient at several
steps, and writes the share of important packets per layer next to the layer profile
(``crates/gradwire-sim/models/importance/<model>.json``). The simulator reads it with
``transport.importance = "median_profile"``.

The rule is the core's (``gradwire_core::tensor::importance_mask``): the median is the
lower median of an evenly spaced sample of ``ceil(n * 0.001)`` elements (at least one),
and a segment of ``elems_per_segment`` consecutive elements is important iff its mean
``|g|`` is at least that. A layer's gradient is its parameters' gradients flattened and
concatenated in registration order, one tensor per layer as the simulator sends it.

The data is synthetic (nothing is downloaded): ``classes`` random smooth images, each
sample one of them plus Gaussian noise, labels the class, so the loss falls and the
gradients are those of real learning rather than of a random target. The images are
smaller than ImageNet's for the ResNets (Inception needs its 299 x 299) to keep the run
to minutes on one CPU thread; the layer
structure (and so the parameter tensors the rule looks at) does not depend on it.

Usage (from the repository root; needs torch and torchvision)::

    python tools/dnn_profiles/grad_importance.py                 # resnet18, resnet50, inception_v3
    python tools/dnn_profiles/grad_importance.py resnet50 --steps 20 --out-dir /tmp/p
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO_ROOT / "crates" / "gradwire-sim" / "models"
DEFAULT_OUT_DIR = MODELS_DIR / "importance"
sys.path.insert(0, str(Path(__file__).resolve().parent))

SCHEMA_VERSION = 1
MEDIAN_SAMPLE_FRACTION = 0.001  # gradwire_core::tensor::MEDIAN_SAMPLE_FRACTION
# The simulator's DLCP segment: MSS 1460 bytes of f32 elements (repro/dlcp-fig14-*.toml).
ELEMS_PER_SEGMENT = 1460 // 4
# Image side and batch per model: Inception's AuxLogits needs its full 299 x 299 input.
IMAGE_SIZE = {"resnet18": 112, "resnet50": 112, "inception_v3": 299}
BATCH_SIZE = {"resnet18": 8, "resnet50": 8, "inception_v3": 4}


def sample_median_abs(flat, fraction: float = MEDIAN_SAMPLE_FRACTION) -> float:
    """Lower median |g| of an evenly spaced sample of ceil(n * fraction) elements."""
    n = flat.numel()
    if n == 0:
        return 0.0
    k = min(max(math.ceil(n * fraction), 1), n)
    idx = [i * n // k for i in range(k)]
    s = sorted(abs(float(flat[i])) for i in idx)
    return s[(k - 1) // 2]


def important_share(flat, elems_per_segment: int = ELEMS_PER_SEGMENT) -> float:
    """Share of segments whose mean |g| is at least the tensor's sampled median |g|."""
    import torch

    n = flat.numel()
    if n == 0:
        return 0.0
    threshold = sample_median_abs(flat)
    a = flat.abs().double()
    full = n // elems_per_segment * elems_per_segment
    means = a[:full].view(-1, elems_per_segment).mean(dim=1)
    if full < n:
        means = torch.cat([means, a[full:].mean().view(1)])
    return float((means >= threshold).double().mean())


def synthetic_batches(torch, classes: int, size: int, batch: int, steps: int, seed: int):
    """(images, labels) per step: a class's smooth random template plus noise."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(classes, 3, 8, 8, generator=g)
    templates = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    for _ in range(steps):
        y = torch.randint(0, classes, (batch,), generator=g)
        x = templates[y] + 0.5 * torch.randn(batch, 3, size, size, generator=g)
        yield x, y


def layer_params(model, profile: dict) -> list[list]:
    """Parameters of each profile layer (its module and the modules it includes)."""
    modules = dict(model.named_modules())
    out = []
    for layer in profile["layers"]:
        names = [layer["name"] if layer["name"] != "<root>" else ""] + layer.get("includes", [])
        params = [p for n in names for p in modules[n].parameters(recurse=False)]
        if sum(p.numel() for p in params) * 4 != layer["bytes"]:
            raise RuntimeError(f"{profile['model']}: layer {layer['name']} does not match its profile")
        out.append(params)
    return out


def measure(name: str, steps: int, record_every: int, batch: int, lr: float, seed: int) -> dict:
    import torch
    import torchvision
    from generate import build_model, provenance

    torch.manual_seed(seed)
    model, _, _, source = build_model(name)
    if name == "inception_v3":  # build_model skips the init for speed; training needs it
        model = torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=True)
    profile = json.loads((MODELS_DIR / f"{name}.json").read_text())
    per_layer = layer_params(model, profile)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    classes, size = 10, IMAGE_SIZE[name]
    model.train()
    shares: list[list[float]] = [[] for _ in per_layer]
    recorded, losses = [], []
    for step, (x, y) in enumerate(synthetic_batches(torch, classes, size, batch, steps, seed), start=1):
        opt.zero_grad()
        out = model(x)
        if isinstance(out, tuple):  # inception's (logits, aux_logits) in training
            loss = torch.nn.functional.cross_entropy(out[0], y) + 0.4 * torch.nn.functional.cross_entropy(out[1], y)
        else:
            loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        losses.append(round(loss.item(), 4))
        if step % record_every == 0:
            recorded.append(step)
            with torch.no_grad():
                for i, params in enumerate(per_layer):
                    flat = torch.cat([p.grad.reshape(-1) for p in params])
                    shares[i].append(important_share(flat))
        opt.step()
        print(f"{name}: step {step}/{steps} loss {losses[-1]}", file=sys.stderr, flush=True)
    layers = [
        {
            "index": layer["index"],
            "name": layer["name"],
            "bytes": layer["bytes"],
            "important_share": round(sum(s) / len(s), 6),
            "per_step": [round(v, 6) for v in s],
        }
        for layer, s in zip(profile["layers"], shares)
    ]
    total = sum(lay["bytes"] for lay in layers)
    return {
        **provenance(SCHEMA_VERSION, name, source, "tools/dnn_profiles/grad_importance.py"),
        "rule": "dlcp.md §3.2.2: a packet is important iff the mean |g| of its elements >= the "
        "tensor's median |g| (lower median of an evenly spaced 0.1 % sample, at least one element)",
        "elems_per_segment": ELEMS_PER_SEGMENT,
        "median_sample_fraction": MEDIAN_SAMPLE_FRACTION,
        "tensor": "one per layer: its parameters' gradients flattened and concatenated",
        "training": {
            "data": f"synthetic: {classes} classes, each a smooth random {size}x{size} RGB template "
            "(8x8 noise, bilinear) plus N(0, 0.5^2) pixel noise",
            "batch_size": batch,
            "steps": steps,
            "optimizer": f"SGD lr {lr} momentum 0.9",
            "seed": seed,
            "recorded_steps": recorded,
            "loss": losses,
        },
        "important_share_by_bytes": round(sum(lay["important_share"] * lay["bytes"] for lay in layers) / total, 6),
        "layers": layers,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(IMAGE_SIZE))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--record-every", type=int, default=5)
    ap.add_argument("--batch-size", type=int, help="samples per step (default: 8, Inception 4)")
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    for name in args.models:
        if name not in IMAGE_SIZE:
            ap.error(f"unknown model {name!r}; known: {', '.join(IMAGE_SIZE)}")
        t0 = time.time()
        batch = args.batch_size or BATCH_SIZE[name]
        result = measure(name, args.steps, args.record_every, batch, args.lr, args.seed)
        path = args.out_dir / f"{name}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(
            f"{name}: {path} in {time.time() - t0:.0f} s; important share by bytes "
            f"{result['important_share_by_bytes']:.3f}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
