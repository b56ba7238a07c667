#!/usr/bin/env bash
# Everything this project checks on a lent GPU machine, as one call (device tool, 15 minutes):
#   1. benchmarks/gpu_check/run.sh: the backend on CUDA tensors against Gloo (2 ranks, 1 GPU);
#   2. the emulator with cores to spare: allreduce-fast.toml (Gloo vs DLCP, 1 and 10 Gbit/s),
#      with each process's CPU time, if `ip` and /dev/net/tun are there.
# Needs python/gradwire/_core.abi3.so built here (carry it). Results go to $OUT (or argv 1).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-results/device}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python"
echo "cores $(nproc); $(python3 -c 'import torch; print("torch", torch.__version__)')"
timeout 300 bash benchmarks/gpu_check/run.sh "$OUT/gpu" 2>&1 | tee "$OUT/gpu.log"
cp "$OUT/gpu/results.json" "$OUT/gpu_results.json" 2>/dev/null
echo "kernel $(uname -r); ip: $(command -v ip || echo none); tun: $(ls /dev/net/tun 2>&1);" \
  "netns: $(unshare -n true 2>&1 && echo ok)"
[ -e /dev/net/tun ] || { mkdir -p /dev/net && mknod /dev/net/tun c 10 200 2>/dev/null; }
if command -v ip >/dev/null && [ -e /dev/net/tun ]; then
  timeout 240 python3 -m gradwire emulate benchmarks/device/allreduce-fast.toml --no-plot -o "$OUT/emu" 2>&1 | tail -30
  tar czf "$OUT/emu.tgz" -C "$OUT" emu && rm -rf "$OUT/emu"
else
  echo "no ip/tun here: emulator skipped"
fi
