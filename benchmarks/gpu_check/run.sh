#!/usr/bin/env bash
# The "gradwire" backend on a GPU: 2 ranks on one CUDA GPU, checked against Gloo
# (collectives, stream semantics, DDP and FSDP losses, timings); see worker.py.
#
# From the repository root, on a machine with a CUDA GPU, torch, numpy and the built
# extension (python/gradwire/_core.abi3.so, from `maturin develop --release`; on a device
# machine without Rust, carry that file). Prints a summary; exits 1 if a check failed.
#   bash benchmarks/gpu_check/run.sh [OUT_DIR]        (default results/gpu_check)
#   DEVICE=cpu bash benchmarks/gpu_check/run.sh       (dry run of the script on CPU)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUTDIR=${1:-results/gpu_check}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUTDIR"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
if [ "$DEVICE" = cpu ]; then
  export GRADWIRE_STAGE_CPU_FOR_TESTS=1
else
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA GPU here")'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
"$PY" -c 'import gradwire._core, torch; print("torch", torch.__version__)'
start=$(date +%s)
timeout 540 "$PY" -m torch.distributed.run --standalone --nproc-per-node=2 \
  benchmarks/gpu_check/worker.py "$OUTDIR" --device "$DEVICE"
echo "took $(( $(date +%s) - start )) s"
"$PY" - "$OUTDIR" <<'PY'
import json, sys
out = sys.argv[1]
ranks = [json.load(open(f"{out}/rank{r}.json")) for r in (0, 1)]
r0 = ranks[0]
print(f"device {r0['device']}, torch {r0['torch']}")
for r, d in enumerate(ranks):
    print(f"rank {r}: {len(d['passed'])} checks passed, {len(d['failed'])} failed")
    for name, why in d["failed"].items():
        print(f"  FAILED {name}: {why.splitlines()[0]}")
for k in ("all_reduce 64 MiB median s", "all_reduce 64 MiB gradwire/gloo", "ddp step", "ddp step median s",
          "ddp step gradwire/gloo"):
    print(f"{k}: {r0.get(k)}")
json.dump(ranks, open(f"{out}/results.json", "w"), indent=1)
sys.exit(1 if any(d["failed"] for d in ranks) else 0)
PY
