#!/usr/bin/env bash
# The client compatibility suite (tests/compat, table in docs/client-compatibility.md): installs
# the clients into ~/.cache/kmirror/compat (once; again only when their pins change), then runs
# tests/compat/run.py against a `kmirror broker` it starts on a free port.
#
#   KMIRROR_HOSTILE_BROKER   the kmirror binary (default: target/release/kmirror)
#   KMIRROR_KAFKA_BOOTSTRAP  the source Apache Kafka (scripts/kafka-local.sh's env file); unset,
#                            this script starts one on free ports and stops it on exit
#   COMPAT_ONLY              comma-separated client slugs to run (tests/compat/clients.py)
#   COMPAT_CAPTURE           a folder: keep each client's requests there (tests/compat/capture.py;
#                            tests/broker/captured/ was made with it and is replayed by cargo test)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/kmirror/compat"
CLIENTS="$ROOT/tests/compat/clients"
JAVA_VERSIONS=(2.0.1 2.8.2 3.9.2 4.4.0)
mkdir -p "$CACHE"
started=$SECONDS

fail() { echo "compat.sh: $*" >&2; exit 1; }

# True when STAMP records the hash of the given files (then the step is done already).
fresh() {
  local stamp="$1"; shift
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(cat "$@" | sha256sum)" ]
}
stamp() {
  local stamp="$1"; shift
  cat "$@" | sha256sum > "$stamp"
}

echo "== compat: kcat"
if ! command -v kcat >/dev/null 2>&1; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq kcat >/dev/null || fail "apt-get install kcat failed"
fi

echo "== compat: Python clients (two venvs)"
python_env() {
  local venv="$1" requirements="$2"
  fresh "$venv/.stamp" "$requirements" && return 0
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" \
    || fail "pip install -r $requirements failed"
  stamp "$venv/.stamp" "$requirements"
}
python_env "$CACHE/venv" "$CLIENTS/python/requirements.txt"
python_env "$CACHE/venv-confluent-2.0" "$CLIENTS/python/requirements-confluent-2.0.txt"

echo "== compat: kafkajs"
# kafkajs-lz4's native codec (lz4) is built by node-gyp, which downloads the running Node's headers
# unless told where they are: point it at the ones installed beside this Node (Debian's nodejs
# ships them under /usr/include/node), since only the package registries are reachable.
command -v node >/dev/null 2>&1 || fail "node is not installed (kafkajs needs Node.js and npm)"
if [ -z "${npm_config_nodedir:-}" ]; then
  node_prefix="$(node -p "require('path').resolve(process.execPath, '..', '..')")"
  node_header="$node_prefix/include/node/node_version.h"
  [ -f "$node_header" ] || fail "no Node headers at $node_header for node-gyp (install the nodejs package's headers, or set npm_config_nodedir)"
  header_version="$(awk '/define NODE_(MAJOR|MINOR|PATCH)_VERSION/ {v = v (v ? "." : "") $3} END {print v}' "$node_header")"
  [ "v$header_version" = "$(node --version)" ] \
    || fail "the Node headers at $node_header are v$header_version, node is $(node --version): set npm_config_nodedir to the matching ones"
  export npm_config_nodedir="$node_prefix"
fi
if ! fresh "$CACHE/node/.stamp" "$CLIENTS/node/package-lock.json"; then
  rm -rf "$CACHE/node" && mkdir -p "$CACHE/node"
  cp "$CLIENTS/node/package.json" "$CLIENTS/node/package-lock.json" "$CACHE/node/"
  (cd "$CACHE/node" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci (kafkajs) failed"
  stamp "$CACHE/node/.stamp" "$CLIENTS/node/package-lock.json"
fi

echo "== compat: Go clients (Sarama, kafka-go, franz-go)"
go_sources=("$CLIENTS"/go/go.mod "$CLIENTS"/go/go.sum "$CLIENTS"/go/*/*.go)
if ! fresh "$CACHE/go-bin/.stamp" "${go_sources[@]}"; then
  mkdir -p "$CACHE/go-bin"
  (cd "$CLIENTS/go" && GOTOOLCHAIN=local GOFLAGS=-modcacherw GOMODCACHE="$CACHE/gomod" \
    go build -o "$CACHE/go-bin/" ./sarama ./kafkago ./franz) || fail "go build of the Go clients failed"
  stamp "$CACHE/go-bin/.stamp" "${go_sources[@]}"
fi

echo "== compat: Java kafka-clients ${JAVA_VERSIONS[*]}"
for v in "${JAVA_VERSIONS[@]}"; do
  dir="$CACHE/java/$v"
  if [ ! -f "$dir/libs/.complete" ]; then
    mvn -B -q -f "$CLIENTS/java/pom.xml" -Dkafka.version="$v" dependency:copy-dependencies \
      -DoutputDirectory="$dir/libs" -DincludeScope=runtime || fail "Maven could not fetch kafka-clients $v"
    touch "$dir/libs/.complete"
  fi
  if ! fresh "$dir/.stamp" "$CLIENTS/java/CompatClient.java"; then
    rm -rf "$dir/classes"
    javac -nowarn -d "$dir/classes" -cp "$dir/libs/*" "$CLIENTS/java/CompatClient.java" \
      || fail "CompatClient.java does not compile against kafka-clients $v"
    stamp "$dir/.stamp" "$CLIENTS/java/CompatClient.java"
  fi
done
echo "   installed in $((SECONDS - started)) s"

broker="${KMIRROR_HOSTILE_BROKER:-$ROOT/target/release/kmirror}"
[ -x "$broker" ] || fail "no kmirror binary at $broker (set KMIRROR_HOSTILE_BROKER)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-compat.XXXXXX")"
cleanup() {
  if [ -n "${own_kafka:-}" ]; then
    scripts/kafka-local.sh stop "$own_kafka"
    rm -rf "$own_kafka"
  fi
}
trap cleanup EXIT
if [ -z "${KMIRROR_KAFKA_BOOTSTRAP:-}" ]; then
  echo "== compat: Apache Kafka (the mirror's source)"
  port="$(scripts/kafka-local.sh free-port 20092)"
  own_kafka="$work/kafka"
  mkdir -p "$own_kafka"
  # shellcheck disable=SC1090
  source "$(scripts/kafka-local.sh start "$own_kafka" "$port")"
fi
kafka_dist="${KMIRROR_KAFKA_DIST:-$(scripts/kafka-local.sh fetch)}"

echo "== compat: the suite (broker $broker, source $KMIRROR_KAFKA_BOOTSTRAP)"
status=0
python3 tests/compat/run.py --kmirror "$broker" --source "$KMIRROR_KAFKA_BOOTSTRAP" \
  --kafka-dist "$kafka_dist" --cache "$CACHE" --results "$work/results.json" \
  --table docs/client-compatibility.md ${COMPAT_ONLY:+--only "$COMPAT_ONLY"} \
  ${COMPAT_CAPTURE:+--capture "$COMPAT_CAPTURE"} || status=$?
echo "   results: $work/results.json; table: docs/client-compatibility.md; $((SECONDS - started)) s in all"
[ "$status" = 0 ] || fail "client compatibility cells failed (see FAILED lines above)"
