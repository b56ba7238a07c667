#!/usr/bin/env bash
# Build the ns-3 reference programs of gradwire's ns-3 cross-check.
#
# Installs ns-3.37 from Debian (libns3-dev: headers, shared libraries, pkg-config files)
# if it is missing, then compiles every validation/ns3/*.cc into validation/ns3/build/.
# Usage: validation/ns3/build.sh            (from anywhere; idempotent)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/build"
modules=(ns3-core ns3-network ns3-internet ns3-point-to-point ns3-applications ns3-traffic-control)

if ! pkg-config --exists "${modules[@]}" 2>/dev/null || [ ! -f /usr/include/ns3/core-module.h ]; then
    echo "build.sh: installing ns-3 (libns3-dev) from Debian" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get install -y libns3-dev pkg-config g++ >/dev/null \
        || { $sudo apt-get update >/dev/null && $sudo apt-get install -y libns3-dev pkg-config g++ >/dev/null; }
fi

# Debian's .pc files carry a stray "-I/usr\;" cflag; take only the libraries from
# pkg-config and point at the headers ourselves. --no-as-needed keeps every ns-3 module
# linked, so its TypeIds (e.g. ns3::TcpDctcp) are registered at start-up.
libs="$(pkg-config --libs "${modules[@]}" | tr ' ' '\n' | grep -E '^-lns3' | awk '!seen[$0]++' | tr '\n' ' ')"

mkdir -p "$out"
status=0
for src in "$here"/*.cc; do
    name="$(basename "$src" .cc)"
    bin="$out/$name"
    if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$here/build.sh" ]; then
        continue
    fi
    echo "build.sh: g++ -O2 $name.cc" >&2
    # shellcheck disable=SC2086
    if ! g++ -O2 -std=c++17 -o "$bin" "$src" -I/usr/include -Wl,--no-as-needed $libs; then
        status=1
    fi
done
exit $status
