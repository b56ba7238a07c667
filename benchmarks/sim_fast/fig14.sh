#!/usr/bin/env bash
# `gradwire reproduce dlcp-fig14 --fast` forced past its refusals, on four of its schemes:
# each at 144 workers in the fast mode (9 of 36 servers) and at 64 at both fidelities
# (4 of 16), then packet level at 144 for the schemes that run in minutes there.
# docs/notes/fast-mode.md has the numbers.
#
#   benchmarks/sim_fast/fig14.sh [OUT_DIR]      # default /tmp/fig14-fast; ~1 h on 2 cores
set -euo pipefail
out=${1:-/tmp/fig14-fast}
dctcp='{ name = "dctcp", "transport.kind" = "dctcp", "switch.policy" = "plain", "routing.mode" = "ecmp" }'
pfabric='{ name = "pfabric", "transport.kind" = "pfabric", "switch.policy" = "pfabric", "routing.mode" = "spray" }'
dlcp='{ name = "dlcp", "transport.kind" = "dlcp", "switch.policy" = "dlcp", "routing.mode" = "spray" }'
strict='{ name = "dlcp-strict", "transport.kind" = "dlcp", "switch.policy" = "dlcp", "routing.mode" = "spray", "transport.dlcp_rate_state" = "pair_strict", "transport.rate_delta" = 1.1, "transport.dlcp_resend_at_line_rate" = false, "transport.rate_period_us" = 85.2, "transport.dlcp_stop_behind_data" = true, "transport.dlcp_rate_hint" = "receiver_share", "transport.dlcp_rate_restart_us" = 1000.0 }'
w64='{ name = "64", "workload.workers" = 64, "workload.servers" = 16 }'
w144='{ name = "144", "workload.workers" = 144, "workload.servers" = 36 }'
gradwire reproduce dlcp-fig14 --fast --out "$out/fast" --set fast.unvalidated=true --set fast.servers=9 \
  --set "sweep.scheme=[$dctcp, $pfabric, $dlcp, $strict]" --set "sweep.workers=[$w64, $w144]"
gradwire reproduce dlcp-fig14 --out "$out/packet-144" \
  --set "sweep.scheme=[$dctcp, $pfabric, $strict]" --set "sweep.workers=[$w144]"
