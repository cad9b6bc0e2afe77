#!/usr/bin/env bash
# The project's test command (see README.md): formatting, lints, then every test, including the
# #[ignore]d interop tests that need a real Apache Kafka, which this script downloads (Maven
# Central, cached in ~/.cache/kmirror) and starts on loopback for the run.
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

echo "== promtool (Debian's prometheus package) for the alerting rules in dashboards/"
# (On a machine that runs systemd the package also enables a Prometheus server on :9090.)
if ! command -v promtool >/dev/null 2>&1; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool check rules dashboards/kmirror-alerts.yml || {
  echo "dashboards/kmirror-alerts.yml is not a valid Prometheus rules file (promtool's reasons above)" >&2
  exit 1
}
promtool test rules dashboards/kmirror-alerts.test.yml || {
  echo "the alerting rules' unit tests failed (dashboards/kmirror-alerts.test.yml; promtool's report above)" >&2
  exit 1
}

echo "== Apache Kafka for the interop tests"
kafka_data="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-kafka.XXXXXX")"
kafka3_data="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-kafka3.XXXXXX")"
trap 'scripts/kafka-local.sh stop "$kafka_data"; scripts/kafka-local.sh stop-cluster "$kafka3_data"' EXIT
kafka_port="${KMIRROR_KAFKA_PORT:-$(scripts/kafka-local.sh free-port)}"
echo "   on port $kafka_port"
# shellcheck disable=SC1090
source "$(scripts/kafka-local.sh start "$kafka_data" "$kafka_port")"
echo "== a three-broker Apache Kafka, whose leaders the source-election tests kill"
kafka3_port="$(scripts/kafka-local.sh free-port $((kafka_port + 10)))"
echo "   on ports $kafka3_port-$((kafka3_port + 3))"
# shellcheck disable=SC1090
source "$(scripts/kafka-local.sh start-cluster "$kafka3_data" "$kafka3_port")"

echo "== confluent-kafka for the librdkafka interop test"
venv="${HOME}/.cache/kmirror/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/broker/requirements.txt
export KMIRROR_PYTHON="$venv/bin/python"

echo "== kcat (Debian's) for the client compatibility tests"
if ! command -v kcat >/dev/null 2>&1; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq kcat >/dev/null
fi
kcat -V | grep -m1 Version

echo "== the KIP-1279 prototype (its admin CLI and message classes) for tests/interop/prototype"
export KMIRROR_PROTOTYPE_DIR="${KMIRROR_PROTOTYPE_DIR:-$(cd .. && pwd)/shared/kip1279-prototype}"
if [ ! -f "$KMIRROR_PROTOTYPE_DIR/kafka-cluster-mirrors.sh" ] || [ ! -d "$KMIRROR_PROTOTYPE_DIR/lib" ]; then
  echo "the KIP-1279 prototype is not at $KMIRROR_PROTOTYPE_DIR (kafka-cluster-mirrors.sh and lib/):" >&2
  echo "set KMIRROR_PROTOTYPE_DIR to its folder; docs/wire.md says where it comes from" >&2
  exit 1
fi
java -version 2>&1 | head -1 | grep -q '"17\|"1[89]\|"2[0-9]' || {
  echo "the prototype's tests need Java 17 or newer; java -version says: $(java -version 2>&1 | head -1)" >&2
  exit 1
}
echo "   at $KMIRROR_PROTOTYPE_DIR"

echo "== the release broker, for the hostile-client suite (tests/hostile)"
cargo build --release --locked --bin kmirror
export KMIRROR_HOSTILE_BROKER="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/kmirror"
[ -x "$KMIRROR_HOSTILE_BROKER" ] || { echo "no release broker at $KMIRROR_HOSTILE_BROKER" >&2; exit 1; }

echo "== cargo test"
cargo test --workspace --locked -- --include-ignored
echo "== the embedding example (two in-memory clusters, a mirror, a failover)"
cargo run --locked -q -p kmirror-actors --example embed
scripts/compat.sh  # the client compatibility suite, against the release broker and the Kafka above
