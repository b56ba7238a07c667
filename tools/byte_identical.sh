#!/usr/bin/env bash
# Byte-identical outputs of two gradwire-sim builds on the built-in scenarios and the
# reproductions' --quick points: flows.csv byte for byte, summary.json apart from its wall
# time fields (wall_seconds, events_per_second).
#
#   tools/byte_identical.sh OLD_BIN NEW_BIN [OUT_DIR] [--full]
#
# Without --full the sweeps' large points are cut to what runs in seconds (the cases list
# says how). Exit 1 if any output differs.
set -u
old=$1 new=$2 out=${3:-/tmp/byte_identical}
mkdir -p "$out"
full=0; [ "${4:-}" = "--full" ] && full=1
here=$(cd "$(dirname "$0")/.." && pwd)
sc=$here/python/gradwire/scenarios
SMALL=(--set topology.leaves=2 --set topology.hosts_per_leaf=4 --set topology.spines=2 --set topology.uplinks_per_leaf=2)
RAT_QUICK=(--set workload.bytes=9700000 --set workload.iterations=2)
PCN_QUICK=(--set workload.iterations=2 --set stop_ms=80.0)

strip() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [d.pop(k,None) for k in ("wall_seconds","events_per_second")]; print(json.dumps(d,sort_keys=True))' "$1"; }
fail=0
# check LABEL SCENARIO [--set key=value]...: both builds, then every run's outputs compared
check() {
  local label=$1 file=$2; shift 2
  rm -rf "$out/old/$label" "$out/new/$label"
  "$old" "$file" --out "$out/old/$label" --quiet "$@" >"$out/$label.old.log" 2>&1 & local p1=$!
  "$new" "$file" --out "$out/new/$label" --quiet "$@" >"$out/$label.new.log" 2>&1 & local p2=$!
  wait $p1; local r1=$?; wait $p2; local r2=$?
  if [ $r1 != 0 ] || [ $r2 != 0 ]; then echo "FAIL $label: exit $r1 / $r2 (logs in $out)"; fail=1; return; fi
  local n=0 bad=0 f rel s
  while IFS= read -r f; do
    rel=${f#"$out/old/$label/"}
    n=$((n+1))
    cmp -s "$f" "$out/new/$label/$rel" || { echo "  differs: $label/$rel"; bad=1; }
    s=${f%flows.csv}summary.json
    if [ -f "$s" ]; then
      [ "$(strip "$s")" = "$(strip "$out/new/$label/${rel%flows.csv}summary.json")" ] || { echo "  differs: $label/${rel%flows.csv}summary.json"; bad=1; }
    fi
  done < <(find "$out/old/$label" -name flows.csv | sort)
  if [ $n = 0 ]; then echo "FAIL $label: no flows.csv"; fail=1;
  elif [ $bad = 1 ]; then echo "FAIL $label ($n runs)"; fail=1;
  else echo "ok   $label ($n runs identical)"; fi
}

PS4=(--set workload.workers=4 --set workload.servers=1)
W4='sweep.workers=[{ name = "4", "workload.workers" = 4, "workload.servers" = 1 }]'
check incast-dctcp "$sc/incast-dctcp.toml"
check leafspine-compare "$sc/leafspine-compare.toml" "${SMALL[@]}" "${PS4[@]}"
check leafspine-ps-dctcp "$sc/leafspine-ps-dctcp.toml" "${SMALL[@]}" "${PS4[@]}"
check leafspine-ps48-dctcp "$sc/leafspine-ps48-dctcp.toml" "${SMALL[@]}" "${PS4[@]}"
check collective-rat-vs-ring "$sc/collective-rat-vs-ring.toml"
# the reproductions' --quick points (python/gradwire/reproduce.py), fig14 at its 4-worker point
for m in resnet50 inception_v3; do
  check "dlcp-fig14-$m-quick" "$sc/repro/dlcp-fig14-$m.toml" "${SMALL[@]}" --set "$W4"
  check "dlcp-fig16-$m-quick" "$sc/repro/dlcp-fig16-$m.toml" "${SMALL[@]}" "${PS4[@]}"
done
for m in resnet50 vgg16; do
  check "ltp-bst-$m-quick" "$sc/repro/ltp-bst-$m.toml" --set topology.hosts_per_leaf=4 --set workload.workers=3 --set workload.iterations=3
done
check rat-fig4-quick "$sc/repro/rat-fig4.toml" "${RAT_QUICK[@]}"
check rat-fig5-quick "$sc/repro/rat-fig5.toml" "${RAT_QUICK[@]}" --set topology.hosts_per_leaf=8 --set workload.servers=16 --set pauses.period_us=500.0
check pcn-ddlgen-quick "$sc/repro/pcn-ddlgen.toml" "${PCN_QUICK[@]}"
# every transport under each preset, and the options the registry moved
check baseline-ns3 "$sc/incast-dctcp.toml" --set baseline=ns3 --set 'sweep={"transport.kind"=["newreno","dctcp","pias","pfabric","dlcp","ltp"]}'
check baseline-sackless "$sc/incast-dctcp.toml" --set baseline=sackless --set 'sweep={"transport.kind"=["newreno","dctcp","pias","pfabric","dlcp","ltp"]}'
check tcp-options "$sc/incast-dctcp.toml" --set transport.kind=newreno --set transport.tcp_handshake=true --set transport.tcp_connections=per_pair --set topology.link_loss_rate=0.001
check tcp-persistent "$sc/leafspine-ps-dctcp.toml" "${SMALL[@]}" "${PS4[@]}" --set transport.tcp_connections=persistent --set transport.tcp_cc=reno
check pias-from-workload "$sc/leafspine-ps-dctcp.toml" "${SMALL[@]}" "${PS4[@]}" --set transport.kind=pias --set transport.pias_thresholds_from_workload=true
check dlcp-deviations "$sc/incast-dctcp.toml" --set transport.kind=dlcp --set switch.policy=dlcp --set transport.dlcp_rate_state=pair_strict --set transport.dlcp_rate_hint=receiver_share --set transport.dlcp_rate_restart_us=1000
check dlcp-median-profile "$sc/repro/dlcp-fig16-resnet50.toml" "${SMALL[@]}" "${PS4[@]}" --set transport.importance=median_profile --set 'sweep={"transport.kind"=["dlcp"]}'
if [ $full = 1 ]; then
  check large-pcn-144 "$sc/large/pcn-144.toml"
  check large-rat-144 "$sc/large/rat-144.toml"
fi
exit $fail
