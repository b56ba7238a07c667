#!/usr/bin/env bash
# The whole test suite: lints, Rust (every crate) and Python (the real extension, built here).
# Installs what it needs from the project's own files into its own virtual environment
# (.venv-test, which sees the system's packages, so an installed torch is reused): your own
# Python environment is left as it is. Safe to run on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-test
if [ ! -x "$VENV/bin/python" ]; then
  # A fresh install needs about 12 GB free: torch with its CUDA libraries ~6 GB in $VENV,
  # the Rust build ~3 GB in target/. Say so before pip and cargo fail with ENOSPC midway.
  free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
  if [ "${free_kb:-0}" -lt $((12 * 1024 * 1024)) ]; then
    echo "!! only $((free_kb / 1024)) MB free on $(df -P . | awk 'NR == 2 { print $6 }'):" \
      "a fresh install of the test environment needs about 12 GB (see docs/testing.md)" >&2
  fi
  echo "== creating $VENV (a virtual environment for the tests, with the system's packages visible)"
  python3 -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"

# CI builds once from a clean clone: incremental state (~1 GB) would never be reused.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

echo "== installing gradwire into $VENV (editable; maturin compiles the Rust extension) with torch and ray"
# The torch extra (torch, scikit-learn) lets the backend, DDP, train and tolerance tests
# run instead of skipping; the cluster extra (ray) the --cluster ray tests. A fresh install
# of torch from PyPI downloads several GB (docs/torch.md); pip keeps an installed torch
# that satisfies the extra. docs/testing.md lists what this installs.
"$PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir -e ".[test,torch,cluster]"

echo "== lints: rustfmt, clippy, ruff"
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# the tracing build (`--features trace`, validation/trace_compare.py) stays compilable
cargo clippy -p gradwire-sim --features trace --quiet -- -D warnings
"$PY" -m ruff check python tests benchmarks tools validation
"$PY" -m ruff format --check python tests benchmarks tools validation

echo "== Rust tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --exclude gradwire-py --no-fail-fast
  cargo test --workspace --exclude gradwire-py --doc
else
  cargo test --workspace --exclude gradwire-py
fi

echo "== Python tests"
# -rs: say why each skipped test was skipped
"$PY" -m pytest -q -rs tests/python
