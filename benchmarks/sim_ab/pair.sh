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
# Repeat it a few times, swapping the order of the two builds.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,16p "$0"; exit 2; }
old=$1 new=$2; shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run_one() { local tag=$1 bin=$2; shift 2; /usr/bin/time -f "%U" -o "$out/$tag.cpu" "$bin" "$@" --out "$out/$tag" --quiet >/dev/null 2>"$out/$tag.err" || { echo "$tag failed:"; cat "$out/$tag.err"; exit 1; }; }
run_one old "$old" "$@" &
run_one new "$new" "$@" &
wait
a=$(cat "$out/old.cpu") b=$(cat "$out/new.cpu")
same=$(cmp -s <(find "$out/old" -name flows.csv -exec cat {} +) <(find "$out/new" -name flows.csv -exec cat {} +) && echo identical || echo DIFFERENT)
echo "old ${a}s  new ${b}s  new/old $(python3 -c "print(f'{$b/$a:.3f}')")  flows.csv $same"
