#!/usr/bin/env bash
# The whole test suite: Rust (every crate) and Python (the real extension, built here).
# Installs what it needs from the project's own files; safe to run on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== installing gradwire (maturin build of the Rust extension) and test dependencies, with torch"
# The torch extra (torch, scikit-learn) lets the backend, DDP, train and tolerance tests
# run instead of skipping. A fresh install of torch from PyPI downloads several GB
# (docs/torch.md); pip keeps an installed torch that satisfies the extra.
python3 -m pip install --quiet --disable-pip-version-check -e ".[test,torch]"

echo "== Rust tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --exclude gradwire-py --no-fail-fast
  cargo test --workspace --exclude gradwire-py --doc
else
  cargo test --workspace --exclude gradwire-py
fi

echo "== Python tests"
python3 -m pytest -q tests/python
