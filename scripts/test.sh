#!/usr/bin/env bash
# The project's test command (see README.md): formatting, lints, then every test, including the
# ones marked #[ignore] because they need extra set-up that this script provides.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh rustup install may lack the two components the checks use.
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked -- --include-ignored
