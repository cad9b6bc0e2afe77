#!/usr/bin/env bash
# Runs the benchmarks and prints their figures (see BENCHMARKS.md for the recorded ones).
#   scripts/bench.sh            every criterion benchmark
#   scripts/bench.sh protocol   one benchmark target
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  cargo bench --locked --bench "$1" -- "${@:2}"
else
  cargo bench --locked --workspace
fi
