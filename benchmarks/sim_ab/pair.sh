#!/usr/bin/env bash
# Compare two simulator builds on one scenario, side by side: both run at the same time,
# one per core, so the machine's noise (large on these VMs: ±10-20 % between identical
# runs) hits both alike. Prints each build's user CPU seconds, their ratio, and whether
# their flows.csv are byte-identical (a speed change must keep them so).
#
#   benchmarks/sim_ab/pair.sh OLD_BIN NEW_BIN SCENARIO.toml [--set key=value ...]
#
# e.g. (DLCP at 144 workers, first 5 ms; gradwire-sim binaries of two commits):
#   benchmarks/sim_ab/pair.sh /tmp/old/gradwire-sim target/release/gradwire-sim \
#     scenarios/repro/dlcp-fig14-resnet50.toml --set 'sweep={}' --set transport.kind=dlcp \
#     --set switch.policy=dlcp --set routing.mode=spray --set workload.workers=144 \
#     --set workload.servers=36 --set stop_ms=5
# It runs the pair twice, each build once in each slot, and reports the geometric mean:
# the slot matters. The same binary against itself at 432 hosts (the k = 12 model of
# benchmarks/sim_memory/ft1024.toml) came out 0.936, the process started first ~6 % slower
# (at 128 hosts 0.978-1.010); a one-order ratio near 0.95 says nothing.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,17p "$0"; exit 2; }
old=$1 new=$2; shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run_one() { local tag=$1 bin=$2; shift 2; /usr/bin/time -f "%U" -o "$out/$tag.cpu" "$bin" "$@" --out "$out/$tag" --quiet >/dev/null 2>"$out/$tag.err" || { echo "$tag failed:"; cat "$out/$tag.err"; exit 1; }; }
ratios=()
for order in old-first new-first; do
  if [ "$order" = old-first ]; then run_one old "$old" "$@" & run_one new "$new" "$@" &
  else run_one new "$new" "$@" & run_one old "$old" "$@" &
  fi
  wait
  a=$(cat "$out/old.cpu") b=$(cat "$out/new.cpu")
  same=$(cmp -s <(find "$out/old" -name flows.csv -exec cat {} +) <(find "$out/new" -name flows.csv -exec cat {} +) && echo identical || echo DIFFERENT)
  r=$(python3 -c "print(f'{$b/$a:.3f}')")
  ratios+=("$r")
  echo "$order: old ${a}s  new ${b}s  new/old $r  flows.csv $same"
  rm -rf "$out/old" "$out/new"
done
echo "new/old, both orders: $(python3 -c "print(f'{(${ratios[0]} * ${ratios[1]}) ** 0.5:.3f}')")"
