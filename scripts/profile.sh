#!/usr/bin/env bash
# Profiles kmirror's mirroring hot path with perf: a source Apache Kafka (scripts/kafka-local.sh)
# holding PROFILE_MIB MiB (default 2048) of 1 KiB lz4 records in PROFILE_PARTITIONS partitions
# (default 8), a release `kmirror broker` under `perf record` mirroring all of it, then the
# flat profile of the broker's own code (perf report, top PROFILE_TOP symbols, default 40).
#   scripts/profile.sh [OUTPUT_DIR]    perf.data and report.txt go there (default a temp dir)
# Needs perf (Debian linux-perf) and perf_event_paranoid <= 2.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d "${TMPDIR:-/tmp}/kmirror-profile.XXXXXX")}"
mkdir -p "$out"
mib="${PROFILE_MIB:-2048}" partitions="${PROFILE_PARTITIONS:-8}" top="${PROFILE_TOP:-40}"
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null; }
cargo build --release --locked
kmirror="$PWD/target/release/kmirror"

kafka="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-profile-kafka.XXXXXX")"
broker_pid=""
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null || true
  scripts/kafka-local.sh stop "$kafka"
  rm -rf "$kafka" "$out/broker"
}
trap cleanup EXIT
# shellcheck disable=SC1090
source "$(scripts/kafka-local.sh start "$kafka" \
  "${PROFILE_KAFKA_PORT:-$(scripts/kafka-local.sh free-port 19792)}")"
tool() {
  java -cp "$KMIRROR_KAFKA_DIST/libs/*" \
    -Dlog4j2.configurationFile="file:$KMIRROR_KAFKA_DIST/log4j2.properties" "$@"
}
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KMIRROR_KAFKA_BOOTSTRAP" \
  --create --topic profiled --partitions "$partitions" >/dev/null
records=$((mib * 1024))
tool org.apache.kafka.tools.ProducerPerformance --topic profiled --num-records "$records" \
  --record-size 1024 --throughput -1 --producer-props "bootstrap.servers=$KMIRROR_KAFKA_BOOTSTRAP" \
  acks=1 linger.ms=5 batch.size=262144 compression.type=lz4 2>/dev/null | tail -1
sync

port="${PROFILE_BROKER_PORT:-$(python3 -c \
  'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
mkdir -p "$out/broker"
cat > "$out/broker/server.properties" <<PROPS
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=$out/broker/data
PROPS
echo "bootstrap.servers=$KMIRROR_KAFKA_BOOTSTRAP" > "$out/broker/mirror.properties"
perf record -F 999 -g -o "$out/perf.data" -- "$kmirror" broker --config "$out/broker/server.properties" \
  >"$out/broker.log" 2>&1 &
broker_pid=$!
# The broker gone (a taken port, a bad config) ends the run with its log's reason.
broker_alive() {
  kill -0 "$broker_pid" 2>/dev/null && return 0
  echo "the broker exited; the end of $out/broker.log:" >&2
  tail -20 "$out/broker.log" >&2
  exit 1
}
for _ in $(seq 1 100); do
  broker_alive
  (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
  sleep 0.1
done
"$kmirror" mirrors --bootstrap-server "127.0.0.1:$port" --create --mirror profiled \
  --mirror-config "$out/broker/mirror.properties" >/dev/null
started=$(date +%s.%N)
"$kmirror" mirrors --bootstrap-server "127.0.0.1:$port" --start --mirror profiled --topics profiled >/dev/null
# Copied when every partition's lag is 0 and the log end offsets add up to the records.
until "$kmirror" mirrors --bootstrap-server "127.0.0.1:$port" --describe --mirror profiled \
  | awk -v want="$records" 'NR > 1 && $6 ~ /^[0-9]+$/ { sum += $6 } END { exit !(sum >= want) }'; do
  broker_alive
  sleep 0.2
done
echo "copied $mib MiB in $(echo "$(date +%s.%N) - $started" | bc) s (start included)"
kill -INT "$broker_pid"
wait "$broker_pid" || true
broker_pid=""
perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
  | grep -v '^#' | grep -v '^$' | grep '%' | head -"$top" | tee "$out/report.txt"
echo "profile: $out/perf.data, report: $out/report.txt"
