#!/usr/bin/env bash
# Several rounds of pair.sh's comparison, each pinned one build per core (taskset) and
# swapping cores and start order every round, then the geometric mean of new/old and the
# range. Single pairs on these VMs scatter by ±5 %; a mean over 6+ rounds resolves ~2 %.
#
#   benchmarks/sim_ab/rounds.sh ROUNDS OLD_BIN NEW_BIN SCENARIO.toml [--set key=value ...]
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,6p "$0"; exit 2; }
rounds=$1 old=$2 new=$3; shift 3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run_one() { local tag=$1 cpu=$2 bin=$3; shift 3; /usr/bin/time -f "%U" -o "$out/$tag.cpu" taskset -c "$cpu" "$bin" "$@" --out "$out/$tag" --quiet >/dev/null 2>"$out/$tag.err" || { echo "$tag failed:"; cat "$out/$tag.err"; exit 1; }; }
ratios=() olds=() news=()
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then run_one old 0 "$old" "$@" & run_one new 1 "$new" "$@" &
  else run_one new 0 "$new" "$@" & run_one old 1 "$old" "$@" &
  fi
  wait
  a=$(cat "$out/old.cpu") b=$(cat "$out/new.cpu")
  cmp -s <(find "$out/old" -name flows.csv -exec cat {} +) <(find "$out/new" -name flows.csv -exec cat {} +) || { echo "round $r: flows.csv DIFFERENT"; exit 1; }
  ratios+=("$(python3 -c "print($b/$a)")") olds+=("$a") news+=("$b")
  echo "round $r: old ${a}s new ${b}s new/old ${ratios[-1]:0:5}"
done
python3 -c "
import math, statistics, sys
n = (len(sys.argv) - 1) // 3
r, a, b = ([float(x) for x in sys.argv[1 + i * n:1 + (i + 1) * n]] for i in range(3))
print(f'new/old over {n} rounds: geometric mean {math.exp(sum(map(math.log, r)) / n):.3f}, range {min(r):.3f}-{max(r):.3f}; '
      f'fastest new / fastest old {min(b) / min(a):.3f}, median / median {statistics.median(b) / statistics.median(a):.3f}; flows.csv identical')" "${ratios[@]}" "${olds[@]}" "${news[@]}"
