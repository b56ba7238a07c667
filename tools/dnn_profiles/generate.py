#!/usr/bin/env python3
"""Generate per-layer DNN traffic profiles for the gradwire simulator.

The profiles are computed from the real model definitions (torchvision for the
CNNs, ``torch.nn`` modules for a BERT-base-like Transformer encoder), built with
random initialisation (``weights=None``: nothing is downloaded).  For every
*layer* -- a module that owns parameters directly -- the profile records its
parameter count, its fp32 gradient size, its forward FLOPs (counted with
``torch.utils.flop_counter.FlopCounterMode``) and a modelled backward time.

Usage (from the repository root)::

    python tools/dnn_profiles/generate.py                 # all models
    python tools/dnn_profiles/generate.py resnet18 vgg16  # some models
    python tools/dnn_profiles/generate.py --out-dir /tmp/profiles --check

See tools/dnn_profiles/README.md for the assumptions.  The shipped output lives
in crates/gradwire-sim/models/*.json and is read with ``gradwire.models.load_profile``
(which does not need torch).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT_DIR = REPO_ROOT / "crates" / "gradwire-sim" / "models"

SCHEMA_VERSION = 1
BATCH_SIZE = 32
# Forward FLOPs are counted for one sample and multiplied by the batch size: every
# op FlopCounterMode counts (conv, matmul, attention) is linear in the batch.
COUNT_BATCH = 1
DEVICE = "NVIDIA V100 (fp32, no tensor cores)"
DEVICE_FLOPS = 15.7e12
EFFICIENCY = 0.6
GRAD_BYTES_PER_PARAM = 4  # fp32 gradients
TRANSFORMER_SEQ_LEN = 128

MODELS = ("resnet18", "resnet50", "inception_v3", "vgg16", "alexnet", "transformer")

# Reference parameter counts (torchvision's own model docs; BERT-base from the
# BERT paper's ~110M, exactly 109,482,240 for the encoder + pooler).
KNOWN_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "inception_v3": 27_161_264,  # with the auxiliary classifier (AuxLogits)
    "vgg16": 138_357_544,
    "alexnet": 61_100_840,
    "transformer": 109_482_240,
}


# --------------------------------------------------------------------------- models


def _bert_base_like(torch):
    """BERT-base encoder + pooler (as in BertModel) built from torch.nn modules.

    vocab 30522, hidden 768, 12 layers, 12 heads, FFN 3072, GELU, post-LN,
    512 positions, 2 token types.  No pretraining heads (MLM/NSP).
    """
    nn = torch.nn

    class Embeddings(nn.Module):
        def __init__(self, vocab=30522, hidden=768, max_pos=512, types=2):
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, hidden)
            self.position_embeddings = nn.Embedding(max_pos, hidden)
            self.token_type_embeddings = nn.Embedding(types, hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
            self.dropout = nn.Dropout(0.1)

        def forward(self, input_ids):
            seq = input_ids.shape[1]
            pos = torch.arange(seq, device=input_ids.device).unsqueeze(0)
            tok = torch.zeros_like(input_ids)
            x = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(tok)
            return self.dropout(self.LayerNorm(x))

    class Pooler(nn.Module):
        def __init__(self, hidden=768):
            super().__init__()
            self.dense = nn.Linear(hidden, hidden)
            self.activation = nn.Tanh()

        def forward(self, x):
            return self.activation(self.dense(x[:, 0]))

    class BertBaseLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings()
            layer = nn.TransformerEncoderLayer(
                d_model=768,
                nhead=12,
                dim_feedforward=3072,
                dropout=0.1,
                activation="gelu",
                layer_norm_eps=1e-12,
                batch_first=True,
                norm_first=False,
            )
            self.encoder = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
            self.pooler = Pooler()

        def forward(self, input_ids):
            return self.pooler(self.encoder(self.embeddings(input_ids)))

    return BertBaseLike()


def build_model(name: str):
    """Return (model, example_input_for_COUNT_BATCH, input_description, source)."""
    import torch
    import torchvision
    from torchvision import models as tvm

    tv_source = f"torchvision {torchvision.__version__.split('+')[0]}"
    image = {"kind": "image", "channels": 3, "height": 224, "width": 224, "dtype": "float32"}
    if name == "resnet18":
        model = tvm.resnet18(weights=None)
    elif name == "resnet50":
        model = tvm.resnet50(weights=None)
    elif name == "vgg16":
        model = tvm.vgg16(weights=None)
    elif name == "alexnet":
        model = tvm.alexnet(weights=None)
    elif name == "inception_v3":
        # aux_logits=True is torchvision's default: the auxiliary classifier is part
        # of training, so its gradients are exchanged too.  init_weights=False only
        # skips the (slow) truncated-normal init; shapes are unchanged.
        model = tvm.inception_v3(weights=None, aux_logits=True, init_weights=False)
        image = dict(image, height=299, width=299)
    elif name == "transformer":
        model = _bert_base_like(torch)
        ids = torch.randint(0, 30522, (COUNT_BATCH, TRANSFORMER_SEQ_LEN))
        inp = {
            "kind": "tokens",
            "seq_len": TRANSFORMER_SEQ_LEN,
            "vocab": 30522,
            "architecture": "BERT-base-like encoder + pooler: hidden 768, 12 layers, "
            "12 heads, FFN 3072, GELU, post-LN (torch.nn.TransformerEncoderLayer), "
            "no pretraining heads",
        }
        return model, ids, inp, f"torch {torch.__version__.split('+')[0]} (torch.nn modules)"
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    x = torch.randn(COUNT_BATCH, image["channels"], image["height"], image["width"])
    return model, x, image, tv_source


# ------------------------------------------------------------------------- counting


def _layer_owners(model):
    """Modules that own parameters directly, in registration order: {name: module}."""
    owners = {}
    for name, mod in model.named_modules():
        if any(True for _ in mod.parameters(recurse=False)):
            owners[name] = mod
    return owners


def count_layers(model, example_input):
    """Run one forward pass under FlopCounterMode and attribute FLOPs to layers.

    Returns a list of dicts {name, type, params, fwd_flops_per_sample} in forward
    (first-call) order, and the total counted FLOPs per sample.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    owners = _layer_owners(model)
    called_order: list[str] = []
    flops: dict[str, int] = {}
    stack: list[str] = []
    state = {"last": 0, "prev_layer": None, "pending": 0}
    counter = FlopCounterMode(display=False)

    def flush():
        # Attribute FLOPs counted since the last hook: to the innermost active
        # layer, else to the layer that finished last, else hold them for the
        # next layer to start.
        now = counter.get_total_flops()
        delta = now - state["last"]
        state["last"] = now
        if not delta:
            return
        if stack:
            flops[stack[-1]] = flops.get(stack[-1], 0) + delta
        elif state["prev_layer"] is not None:
            flops[state["prev_layer"]] += delta
        else:
            state["pending"] += delta

    def pre_hook(name):
        def hook(_mod, _args):
            flush()
            if name not in flops:
                called_order.append(name)
                flops[name] = state["pending"]
                state["pending"] = 0
            stack.append(name)

        return hook

    def post_hook(name):
        def hook(_mod, _args, _out):
            flush()
            assert stack and stack[-1] == name, (stack, name)
            stack.pop()
            state["prev_layer"] = name

        return hook

    handles = []
    for name, mod in owners.items():
        handles.append(mod.register_forward_pre_hook(pre_hook(name)))
        handles.append(mod.register_forward_hook(post_hook(name)))

    # Training-mode forward (dropout on, Inception's AuxLogits run), except that
    # BatchNorm uses its running statistics so that a batch of one works; BN is not
    # counted by FlopCounterMode either way.
    model.train()
    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.eval()
    try:
        with torch.no_grad(), counter:
            model(example_input)
            flush()
    finally:
        for h in handles:
            h.remove()
    total = counter.get_total_flops()

    # Parameter-owning modules never called through their own forward (e.g.
    # MultiheadAttention.out_proj, used via F.multi_head_attention_forward) are
    # merged into the nearest called ancestor, whose FLOPs already include them.
    called = set(called_order)
    merged_params = {n: 0 for n in called_order}
    merged_names = {n: [] for n in called_order}
    for name, mod in owners.items():
        target = name
        while target not in called:
            if target == "":
                raise RuntimeError(f"no called ancestor for parameter owner {name!r}")
            target = target.rsplit(".", 1)[0] if "." in target else ""
        merged_params[target] += sum(p.numel() for p in mod.parameters(recurse=False))
        if target != name:
            merged_names[target].append(name)

    layers = []
    for name in called_order:
        entry = {
            "name": name or "<root>",
            "type": type(owners[name]).__name__,
            "params": merged_params[name],
            "fwd_flops_per_sample": flops[name],
        }
        if merged_names[name]:
            entry["includes"] = merged_names[name]
        layers.append(entry)
    assert sum(lay["fwd_flops_per_sample"] for lay in layers) + state["pending"] == total
    if state["pending"]:  # FLOPs before any layer ran: give them to the first layer
        layers[0]["fwd_flops_per_sample"] += state["pending"]
    return layers, total


def provenance(schema_version: int, name: str, source: str, generator: str) -> dict:
    """The fields every file these tools write starts with: its schema version, the model
    and where its definition comes from, the torch version and the tool that wrote it."""
    import torch

    return {
        "schema_version": schema_version,
        "model": name,
        "source": source,
        "torch_version": torch.__version__,
        "generator": generator,
    }


def build_profile(
    name: str,
    batch_size: int = BATCH_SIZE,
    device: str = DEVICE,
    device_flops: float = DEVICE_FLOPS,
    efficiency: float = EFFICIENCY,
) -> dict:
    import torch

    torch.manual_seed(0)
    model, example, input_desc, source = build_model(name)
    raw_layers, total_per_sample = count_layers(model, example)
    total_params = sum(p.numel() for p in model.parameters())
    layer_params = sum(lay["params"] for lay in raw_layers)
    if layer_params != total_params:
        raise RuntimeError(f"{name}: layer params {layer_params} != total {total_params}")

    rate = device_flops * efficiency
    layers = []
    for i, raw in enumerate(raw_layers):
        fwd = raw["fwd_flops_per_sample"] * batch_size // COUNT_BATCH
        entry = {
            "index": i,
            "name": raw["name"],
            "type": raw["type"],
            "params": raw["params"],
            "bytes": raw["params"] * GRAD_BYTES_PER_PARAM,
            "fwd_flops": fwd,
            "fwd_time_s": fwd / rate,
            "bwd_time_s": 2 * fwd / rate,
        }
        if "includes" in raw:
            entry["includes"] = raw["includes"]
        layers.append(entry)
    # Backward runs from the last layer to the first: a layer's gradient is ready
    # once its own backward and those of all later layers are done.
    acc = 0.0
    for entry in reversed(layers):
        acc += entry["bwd_time_s"]
        entry["ready_offset_s"] = acc

    total_fwd = sum(lay["fwd_flops"] for lay in layers)
    return {
        **provenance(SCHEMA_VERSION, name, source, "tools/dnn_profiles/generate.py"),
        "batch_size": batch_size,
        "input": input_desc,
        "device": device,
        "device_flops": device_flops,
        "efficiency": efficiency,
        "flop_counter": "torch.utils.flop_counter.FlopCounterMode, one training-mode "
        f"forward at batch {COUNT_BATCH} scaled linearly to batch_size",
        "flop_convention": "2 FLOPs per multiply-accumulate; only conv, matmul and "
        "attention are counted (BN, norms, activations, pooling, adds, embedding "
        "lookups count 0)",
        "time_model": "fwd_time_s = fwd_flops / (device_flops * efficiency); "
        "bwd_time_s = 2 * fwd_flops / (device_flops * efficiency)",
        "grad_dtype": "float32",
        "bytes_per_param": GRAD_BYTES_PER_PARAM,
        "layer_order": "forward order: index 0 is the input-side layer. A layer is a "
        "module owning parameters directly; owners never called on their own (e.g. "
        "MultiheadAttention.out_proj) are merged into their called parent ('includes')",
        "backward_order": "reverse: backward starts at the last layer, so the last "
        "layer's gradient is ready first; ready_offset_s of layer i = sum of "
        "bwd_time_s over layers j >= i (time after backward start), so layer 0 is "
        "ready at backward_time_s",
        "total_params": total_params,
        "total_bytes": total_params * GRAD_BYTES_PER_PARAM,
        "total_fwd_flops": total_fwd,
        "forward_time_s": total_fwd / rate,
        "backward_time_s": 2 * total_fwd / rate,
        "num_layers": len(layers),
        "layers": layers,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS), help=f"default: {' '.join(MODELS)}")
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    ap.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    ap.add_argument("--device", default=DEVICE)
    ap.add_argument("--device-flops", type=float, default=DEVICE_FLOPS)
    ap.add_argument("--efficiency", type=float, default=EFFICIENCY)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--check", action="store_true", help="fail if a total is >1%% off the known count")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    bad = 0
    for name in args.models:
        prof = build_profile(name, args.batch_size, args.device, args.device_flops, args.efficiency)
        path = args.out_dir / f"{name}.json"
        path.write_text(json.dumps(prof, indent=1) + "\n")
        known = KNOWN_PARAMS[name]
        off = abs(prof["total_params"] - known) / known
        print(
            f"{name:13s} layers={prof['num_layers']:4d} params={prof['total_params']:>11,d} "
            f"bytes={prof['total_bytes'] / 1e6:8.1f} MB fwd={prof['total_fwd_flops'] / 1e9:9.1f} GFLOP "
            f"bwd={prof['backward_time_s'] * 1e3:7.2f} ms -> {path}"
        )
        if off > 0.01:
            print(f"  WARNING: {name} params {prof['total_params']} vs known {known}")
            bad += 1
    return 1 if (bad and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
