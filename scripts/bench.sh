#!/usr/bin/env bash
# Runs the benchmarks and prints their figures (see BENCHMARKS.md for the recorded ones).
#   scripts/bench.sh                every benchmark
#   scripts/bench.sh NAME [ARGS]    one: protocol, storage, mirroring_core, source_fetch,
#                                   broker_vs_kafka, mirror_vs_consumer, stop_partitions,
#                                   stop_mirror_topic
# Benchmarks that need Apache Kafka (source_fetch, broker_vs_kafka) get one started by scripts/kafka-local.sh
# unless KMIRROR_KAFKA_BOOTSTRAP points at a running one.
set -euo pipefail
cd "$(dirname "$0")/.."

with_kafka() {
  if [ -z "${KMIRROR_KAFKA_BOOTSTRAP:-}" ]; then
    kafka_data="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-bench-kafka.XXXXXX")"
    trap 'scripts/kafka-local.sh stop "$kafka_data"; rm -rf "$kafka_data"' EXIT
    # shellcheck disable=SC1090
    source "$(scripts/kafka-local.sh start "$kafka_data" "${KMIRROR_KAFKA_PORT:-19392}")"
  fi
}

if [ $# -gt 0 ]; then
  case "$1" in source_fetch|broker_vs_kafka|mirror_vs_consumer|stop_mirror_topic) with_kafka ;; esac
  cargo bench --locked --bench "$1" -- "${@:2}"
else
  with_kafka
  cargo bench --locked --workspace
fi
