#!/usr/bin/env bash
# A kmirror cluster of N processes on loopback, for tests and demos (docs/cluster.md). Every node
# is combined (process.roles=broker,controller: a broker for clients and a voter of the metadata
# quorum) unless KMIRROR_CLUSTER_ROLES says otherwise.
#
#   scripts/cluster-local.sh start N DATA_DIR [BASE_PORT]   start N nodes (default base: the first
#                                                          free block from 29100); node i listens
#                                                          for clients on BASE+3(i-1), for
#                                                          controllers on BASE+3(i-1)+1 and serves
#                                                          /metrics on BASE+3(i-1)+2; prints
#                                                          DATA_DIR/env (source it: it exports
#                                                          KMIRROR_CLUSTER_BOOTSTRAP, the
#                                                          brokers, KMIRROR_CLUSTER_CLIENTS,
#                                                          each node's client address or -,
#                                                          and KMIRROR_CLUSTER_METRICS)
#   scripts/cluster-local.sh stop DATA_DIR                 stop every node (SIGTERM, then SIGKILL)
#   scripts/cluster-local.sh kill I DATA_DIR               SIGKILL node I (a crash), then wait
#                                                          until it is gone
#   scripts/cluster-local.sh restart I DATA_DIR            start node I again on its data
#   scripts/cluster-local.sh status DATA_DIR               each node's roles, pid, whether it runs
#
# KMIRROR_CLUSTER_ROLES gives each node's process.roles, node 1 first, separated by spaces, e.g.
# "controller broker,controller broker,controller broker": node 1 controller-only (no client
# listener), nodes 2 and 3 combined, node 4 broker-only (a learner). The voters are the nodes with
# the controller role (at least one).
# KMIRROR_BIN names the kmirror binary (default: target/release/kmirror, built or brought up to
# date first); `restart` runs the binary the cluster was started with unless KMIRROR_BIN is set;
# KMIRROR_CLUSTER_PROPERTIES holds extra server.properties lines for every node.
# Each node's log is DATA_DIR/node-I/broker.log, its data DATA_DIR/node-I/data.
# The nodes prove DATA_DIR/quorum.secret (made at the first start) to each other's controller
# listeners (controller.quorum.secret.file).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"

usage() {
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

kmirror_bin() {
  if [[ -n "${KMIRROR_BIN:-}" ]]; then
    echo "$KMIRROR_BIN"
    return
  fi
  # Built (or found up to date) every time: a stale binary would run another version's broker
  # over the nodes' data.
  (cd "$ROOT" && cargo build --release --locked --bin kmirror >&2)
  echo "${CARGO_TARGET_DIR:-$ROOT/target}/release/kmirror"
}

# Ports a started cluster holds, node down or not: a file per cluster, named by its base port,
# holding its node count and data directory (a killed node's ports look free, and a cluster
# started beside it in another test took them before it restarted).
CLAIMS="${TMPDIR:-/tmp}/kmirror-cluster-ports"

# The first base port from $1 with 3*$2 free ports after it, none claimed by a cluster that
# still has a node running or started in the last 10 minutes.
free_base() {
  mkdir -p "$CLAIMS"
  python3 - "$1" "$2" "$CLAIMS" <<'PY'
import glob, os, socket, sys, time
start, count, claims = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def alive(data):
    for pid_file in glob.glob(os.path.join(data, "node-*", "pid")):
        try:
            os.kill(int(open(pid_file).read().strip()), 0)
            return True
        except (OSError, ValueError):
            pass
    return False
claimed = []
for path in glob.glob(os.path.join(claims, "*")):
    try:
        nodes, data = open(path).read().split(maxsplit=1)
        base, data = int(os.path.basename(path)), data.strip()
        if os.path.isdir(data) and (alive(data) or time.time() - os.path.getmtime(path) < 600):
            claimed.append(range(base, base + 3 * int(nodes)))
        else:
            os.remove(path)
    except (OSError, ValueError):
        pass
for base in range(start, 60000, 3 * count):
    if any(p in r for r in claimed for p in range(base, base + 3 * count)):
        continue
    held = []
    try:
        for p in range(base, base + 3 * count):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", p))
            held.append(s)
        print(base)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for s in held:
            s.close()
sys.exit("no free block of ports")
PY
}

# Waits until 127.0.0.1:$2 accepts connections or node $1 exits.
wait_listening() {
  local node="$1" port="$2" data="$3"
  for _ in $(seq 1 600); do
    if ! kill -0 "$(cat "$data/node-$node/pid")" 2>/dev/null; then
      echo "node $node exited while starting; the end of its log ($data/node-$node/broker.log):" >&2
      tail -n 20 "$data/node-$node/broker.log" >&2
      return 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "node $node does not listen on $port after 60 s; see $data/node-$node/broker.log" >&2
  return 1
}

# Node $1 of the cluster in $2 runs the binary the cluster was started with (DATA_DIR/bin),
# unless KMIRROR_BIN names another: a restart never swaps versions behind one's back.
launch() {
  local node="$1" data="$2" bin
  if [[ -z "${KMIRROR_BIN:-}" && -s "$data/bin" ]]; then bin="$(cat "$data/bin")"; else bin="$(kmirror_bin)"; fi
  (cd "$data/node-$node" && exec setsid "$bin" broker --config server.properties >>broker.log 2>&1) &
  echo $! >"$data/node-$node/pid"
}

start() {
  local count="$1" data="$2" base="${3:-}"
  [[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "N must be a positive number, not '$count'" >&2; exit 2; }
  # Clusters started at the same time (tests run in parallel) must not pick the same free
  # ports: one start at a time chooses its ports and holds them until its nodes listen.
  local lock
  exec {lock}>"${TMPDIR:-/tmp}/kmirror-cluster-local.lock"
  flock "$lock"
  [[ -z "$base" ]] && base="$(free_base 29100 "$count")"
  mkdir -p "$data"
  data="$(cd "$data" && pwd)"
  mkdir -p "$CLAIMS" && echo "$count $data" >"$CLAIMS/$base"
  local bin; bin="$(kmirror_bin)"
  echo "$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" >"$data/bin"
  local roles=()
  if [[ -n "${KMIRROR_CLUSTER_ROLES:-}" ]]; then
    read -r -a roles <<<"$KMIRROR_CLUSTER_ROLES"
    [[ "${#roles[@]}" -eq "$count" ]] || { echo "KMIRROR_CLUSTER_ROLES names ${#roles[@]} nodes, not $count" >&2; exit 2; }
  else
    for _ in $(seq 1 "$count"); do roles+=(broker,controller); done
  fi
  local voters="" bootstrap="" clients="" metrics=""
  for i in $(seq 1 "$count"); do
    local client=$((base + 3 * (i - 1))) controller=$((base + 3 * (i - 1) + 1)) role="${roles[$((i - 1))]}"
    case "$role" in
      broker | controller | broker,controller | controller,broker) ;;
      *) echo "node $i: process.roles '$role' is not broker, controller or broker,controller" >&2; exit 2 ;;
    esac
    [[ "$role" == *controller* ]] && voters+="${voters:+,}$i@127.0.0.1:$controller"
    if [[ "$role" == *broker* ]]; then
      bootstrap+="${bootstrap:+,}127.0.0.1:$client"
      clients+="${clients:+,}127.0.0.1:$client"
    else
      clients+="${clients:+,}-"
    fi
    metrics+="${metrics:+,}127.0.0.1:$((client + 2))"
  done
  [[ -n "$voters" ]] || { echo "no node has the controller role" >&2; exit 2; }
  # The nodes' shared secret: only they can talk on the controller listeners.
  [[ -s "$data/quorum.secret" ]] || (umask 077 && head -c 32 /dev/urandom | base64 >"$data/quorum.secret")
  for i in $(seq 1 "$count"); do
    local client=$((base + 3 * (i - 1))) controller=$((base + 3 * (i - 1) + 1)) role="${roles[$((i - 1))]}"
    local listeners="PLAINTEXT://127.0.0.1:$client,CONTROLLER://127.0.0.1:$controller" port="$client"
    # A controller-only node serves no clients: it listens for controllers only.
    [[ "$role" == *broker* ]] || { listeners="CONTROLLER://127.0.0.1:$controller"; port="$controller"; }
    mkdir -p "$data/node-$i/data"
    cat >"$data/node-$i/server.properties" <<EOF
process.roles=$role
node.id=$i
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.secret.file=$data/quorum.secret
listeners=$listeners
log.dirs=$data/node-$i/data
metrics.listener=http://127.0.0.1:$((client + 2))
${KMIRROR_CLUSTER_PROPERTIES:-}
EOF
    # What the node listens on once started: its client port, or a controller's.
    echo "$port" >"$data/node-$i/port"
    echo "$role" >"$data/node-$i/roles"
  done
  for i in $(seq 1 "$count"); do
    launch "$i" "$data"
  done
  for i in $(seq 1 "$count"); do
    wait_listening "$i" "$(cat "$data/node-$i/port")" "$data" || { stop "$data"; exit 1; }
  done
  flock -u "$lock"
  echo "$count" >"$data/nodes"
  {
    echo "export KMIRROR_CLUSTER_BOOTSTRAP=$bootstrap"
    echo "export KMIRROR_CLUSTER_CLIENTS=$clients"
    echo "export KMIRROR_CLUSTER_METRICS=$metrics"
    echo "export KMIRROR_CLUSTER_DIR=$data"
  } >"$data/env"
  echo "$data/env"
}

# Whether process $1 is gone: exited, or a zombie (state Z) with no thread left but its main
# one (another still exiting may hold the listeners).
gone() {
  local pid="$1" stat
  kill -0 "$pid" 2>/dev/null || return 0
  stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 0
  stat="${stat##*) }"
  [[ "${stat%% *}" == Z && "$(ls "/proc/$pid/task" 2>/dev/null | wc -l)" -le 1 ]]
}

# Waits until process $1 is gone: SIGKILL only queues the death, and a node that still holds its
# listeners (a big process takes a while to exit on a loaded machine) makes its restart fail
# with "Address already in use".
wait_gone() {
  local pid="$1"
  for _ in $(seq 1 200); do
    gone "$pid" && return 0
    sleep 0.05
  done
  echo "process $pid still runs 10 s after SIGKILL" >&2
  return 1
}

kill_node() {
  local node="$1" data="$2" pid
  pid="$(cat "$data/node-$node/pid")"
  kill -KILL "$pid" 2>/dev/null || return 0
  wait_gone "$pid"
}

stop_node() {
  local node="$1" data="$2" pid
  pid="$(cat "$data/node-$node/pid" 2>/dev/null)" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    gone "$pid" && return 0
    sleep 0.1
  done
  kill_node "$node" "$data"
}

# Stops every node, each in turn even if one will not die (it says which), then frees the
# cluster's ports.
stop() {
  local data="$1" rc=0
  for dir in "$data"/node-*; do
    if [[ -d "$dir" ]]; then stop_node "${dir##*/node-}" "$data" || rc=1; fi
  done
  data="$(cd "$data" 2>/dev/null && pwd)" || return "$rc"
  grep -lxF -- "$(cat "$data/nodes" 2>/dev/null) $data" "$CLAIMS"/* 2>/dev/null | xargs -r rm -f
  return "$rc"
}

case "${1:-}" in
  start) [[ $# -ge 3 ]] || usage; start "$2" "$3" "${4:-}" ;;
  stop) [[ $# -eq 2 ]] || usage; stop "$2" ;;
  kill) [[ $# -eq 3 ]] || usage; kill_node "$2" "$3" ;;
  restart)
    [[ $# -eq 3 ]] || usage
    stop_node "$2" "$3"
    launch "$2" "$3"
    wait_listening "$2" "$(cat "$3/node-$2/port")" "$3"
    ;;
  status)
    [[ $# -eq 2 ]] || usage
    for dir in "$2"/node-*; do
      pid="$(cat "$dir/pid" 2>/dev/null || echo -)"
      if gone "$pid"; then state=stopped; else state=running; fi
      echo "${dir##*/} $(cat "$dir/roles" 2>/dev/null || echo broker,controller) pid $pid $state port $(cat "$dir/port")"
    done
    ;;
  *) usage ;;
esac
