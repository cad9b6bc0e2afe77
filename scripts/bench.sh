#!/usr/bin/env bash
# Runs the benchmarks and prints their figures (see BENCHMARKS.md for the recorded ones).
#   scripts/bench.sh                every benchmark
#   scripts/bench.sh NAME [ARGS]    one: protocol, storage, mirroring_core, source_fetch,
#                                   broker_vs_kafka, mirror_vs_consumer, stop_partitions,
#                                   stop_mirror_topic, mirror_vs_mm2, scale, throttled_mirror,
#                                   quorum, cluster_mirror, replicated_produce, verify_vs_mirror,
#                                   wan_model
# replicated_produce also starts a three-broker Kafka (scripts/kafka-local.sh start-cluster).
# mirror_vs_mm2 also starts a second Kafka (MirrorMaker 2's destination) and fetches MirrorMaker 2
# from Maven Central (scripts/kafka-local.sh fetch-mm2); MM2_BENCH_* variables size it, and
# MM2_BENCH_DELAY_MS=50 puts the source 50 ms (round trip) away behind a delaying proxy.
# Benchmarks that need Apache Kafka (source_fetch, broker_vs_kafka) get one started by scripts/kafka-local.sh
# unless KMIRROR_KAFKA_BOOTSTRAP points at a running one.
set -euo pipefail
cd "$(dirname "$0")/.."

# Brokers this script started, stopped on exit.
started_kafka=()
started_kafka3=()
cleanup() {
  for data in "${started_kafka3[@]}"; do
    scripts/kafka-local.sh stop-cluster "$data"
    rm -rf "$data"
  done
  for data in "${started_kafka[@]}"; do
    scripts/kafka-local.sh stop "$data"
    rm -rf "$data"
  done
}
trap cleanup EXIT

with_kafka() {
  if [ -z "${KMIRROR_KAFKA_BOOTSTRAP:-}" ]; then
    kafka_data="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-bench-kafka.XXXXXX")"
    started_kafka+=("$kafka_data")
    # shellcheck disable=SC1090
    source "$(scripts/kafka-local.sh start "$kafka_data" \
      "${KMIRROR_KAFKA_PORT:-$(scripts/kafka-local.sh free-port 19392)}")"
  fi
}

with_kafka3() {
  if [ -z "${KMIRROR_KAFKA3_BOOTSTRAP:-}" ]; then
    kafka3_data="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-bench-kafka3.XXXXXX")"
    started_kafka3+=("$kafka3_data")
    # shellcheck disable=SC1090
    source "$(scripts/kafka-local.sh start-cluster "$kafka3_data" \
      "$(scripts/kafka-local.sh free-port 19592)")"
  fi
}

with_mm2() {
  with_kafka
  target_data="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-bench-target.XXXXXX")"
  started_kafka+=("$target_data")
  local target_port="${KMIRROR_KAFKA_TARGET_PORT:-$(scripts/kafka-local.sh free-port 19492)}"
  scripts/kafka-local.sh start "$target_data" "$target_port" >/dev/null
  export KMIRROR_KAFKA_TARGET_BOOTSTRAP="127.0.0.1:$target_port"
  export KMIRROR_KAFKA_TARGET_DATA="$target_data"
  KMIRROR_MM2_DIST="$(scripts/kafka-local.sh fetch-mm2)"
  export KMIRROR_MM2_DIST
}

if [ $# -gt 0 ]; then
  case "$1" in
    source_fetch|broker_vs_kafka|mirror_vs_consumer|stop_mirror_topic|throttled_mirror|cluster_mirror|verify_vs_mirror) with_kafka ;;
    mirror_vs_mm2) with_mm2 ;;
    replicated_produce) with_kafka3 ;;
  esac
  cargo bench --locked --bench "$1" -- "${@:2}"
else
  with_mm2
  with_kafka3
  cargo bench --locked --workspace
fi
