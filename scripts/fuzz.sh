#!/usr/bin/env bash
# Runs every cargo-fuzz target (protocol/fuzz: decoders; fuzz/: the broker's request path) for a while (default 60 s each) and reports what it found.
#   scripts/fuzz.sh [SECONDS]
# Needs the nightly toolchain and cargo-fuzz; installs cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
# cargo-fuzz finds a crate's targets in its fuzz/ folder: protocol/fuzz, then fuzz/ at the top.
for crate in protocol .; do
  for target in $(cd "$crate" && cargo +nightly fuzz list); do
    echo "== $crate/fuzz/$target for ${seconds}s"
    (cd "$crate" && cargo +nightly fuzz run -O "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048) 2>&1 \
      | grep -E '^(Done|#[0-9]+ +DONE)|ERROR|panicked|SUMMARY' || true
  done
done
