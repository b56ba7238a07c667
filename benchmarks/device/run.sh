#!/usr/bin/env bash
# Everything this project checks on a lent GPU machine, as one call (device tool, 15 minutes):
#   gpu: benchmarks/gpu_check/run.sh, the backend on CUDA tensors against Gloo (2 ranks, 1 GPU);
#   emu: the emulator with cores to spare, allreduce-fast.toml (Gloo vs DLCP at 1 and 10 Gbit/s,
#        0 and 1 % loss) with the ranks' and the switch's CPU time;
#   ddp: `gradwire emulate ddp-loss` (DDP steps, Gloo vs the DLCP hook and the gradwire
#        backend, 0 and 1 % loss);
#   xcheck: `gradwire crosscheck` (every case, emulator against simulator twin, XCHECK_ITERS
#        iterations or runs of each, 3 by default to fit the device's time; its whole results
#        folder comes back as xcheck.tgz: each run's per-iteration CPU and counters).
# Parts run in the order PARTS names them, each under its own timeout (seconds), so the
# whole call can be fitted inside the device's 10-minute command limit.
# Needs python/gradwire/_core.abi3.so built here (carry it). Where the machine has no iproute2,
# carry .devtools (bin/ip: Debian's ip with its libraries; bin/sysctl: a /proc/sys writer).
#   PARTS="xcheck gpu" XCHECK_S=330 GPU_S=170 bash benchmarks/device/run.sh [OUT_DIR]
#   (default $OUT, else results/device)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-results/device}}
PARTS=${PARTS:-gpu emu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python"
echo "cores $(nproc); $(python3 -c 'import torch; print("torch", torch.__version__)')"
shim=$(mktemp -d)
for tool in ip sysctl; do
  command -v $tool >/dev/null || ln -s "$PWD/.devtools/bin/$tool" "$shim/$tool"
done
export PATH="$PATH:$shim"
echo "kernel $(uname -r); ip: $(command -v ip); sysctl: $(command -v sysctl); tun: $(ls /dev/net/tun)"

gpu() {
  timeout "${GPU_S:-300}" bash benchmarks/gpu_check/run.sh "$OUT/gpu" 2>&1 | tee "$OUT/gpu.log"
}
emu() {
  timeout "${EMU_S:-400}" python3 -m gradwire emulate benchmarks/device/allreduce-fast.toml --no-plot -o "$OUT/emu" 2>&1 |
    tee "$OUT/emu.log" | tail -25
  cp "$OUT/emu/summary.csv" "$OUT/emu_summary.csv" 2>/dev/null
  tar czf "$OUT/emu.tgz" -C "$OUT" emu && rm -rf "$OUT/emu"
}
ddp() {
  timeout "${DDP_S:-200}" python3 -m gradwire emulate ddp-loss --no-plot -o "$OUT/ddp" 2>&1 | tee "$OUT/ddp.log" | tail -12
  cp "$OUT/ddp/summary.csv" "$OUT/ddp_summary.csv" 2>/dev/null
  tar czf "$OUT/ddp.tgz" -C "$OUT" ddp && rm -rf "$OUT/ddp"
}
xcheck() {
  timeout "${XCHECK_S:-500}" python3 -m gradwire crosscheck --iterations "${XCHECK_ITERS:-3}" \
    -o "$OUT/xcheck" 2>&1 | tee "$OUT/xcheck.log" | tail -60
  cp "$OUT/xcheck/crosscheck.csv" "$OUT/crosscheck.csv" 2>/dev/null
  tar czf "$OUT/xcheck.tgz" --exclude='*.png' -C "$OUT" xcheck && rm -rf "$OUT/xcheck"
}
for part in $PARTS; do
  echo "== $part ($(date +%T))"
  $part
done
echo "== done ($(date +%T))"
