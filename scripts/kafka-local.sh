#!/usr/bin/env bash
# A real Apache Kafka 4.x on loopback, for interop tests and benchmarks.
#
#   scripts/kafka-local.sh fetch [VERSION]          download Kafka from Maven Central into the
#                                                   cache (~/.cache/kmirror/kafka-VERSION); prints it
#   scripts/kafka-local.sh start DATA_DIR [PORT]    format and start a single-node KRaft broker with
#                                                   PLAINTEXT on PORT (default 19092), SSL on PORT+2
#                                                   SASL_SSL (SCRAM-SHA-256/512, PLAIN) on PORT+3
#                                                   and a second plaintext listener, REMOTE, on
#                                                   PORT+4 advertised as PORT+5, where benchmarks
#                                                   put a delaying proxy (clients "in another
#                                                   region"), and MTLS (TLS requiring a client
#                                                   certificate the CA signed) on PORT+6, and
#                                                   SASL_PLAINTEXT with OAUTHBEARER (Kafka's
#                                                   unsecured token validator) on PORT+7, and
#                                                   OAUTHBEARER validated by Kafka's OIDC handler
#                                                   (JWKS, issuer, audience) on PORT+8 against
#                                                   a local identity provider on PORT+9
#                                                   (scripts/kafka/oidc_provider.py);
#                                                   a CA, server and client certificates made with
#                                                   openssl (clients' also as an encrypted PKCS#8
#                                                   key and PKCS12 stores, the CA as a PKCS12
#                                                   truststore made with keytool);
#                                                   writes DATA_DIR/env (KMIRROR_KAFKA_* variables);
#                                                   fails naming a taken port and its holder
#   scripts/kafka-local.sh free-port [FROM]         print a base port from FROM (default 19092) on
#                                                   with the ten ports `start` uses free
#   scripts/kafka-local.sh restart DATA_DIR         stop it (if running) and start it again on its
#                                                   data: leader epochs advance
#   scripts/kafka-local.sh stop DATA_DIR            stop it (DATA_DIR/pid holds the process id)
#   scripts/kafka-local.sh start-cluster DATA_DIR [PORT]
#                                                   three Kafka brokers (node ids 1-3, PLAINTEXT
#                                                   on PORT, PORT+1, PORT+2) and a controller-only
#                                                   node (id 9, PORT+3), so every broker may die
#                                                   while the controller elects leaders;
#                                                   default.replication.factor=3,
#                                                   min.insync.replicas=2; writes DATA_DIR/env
#                                                   (KMIRROR_KAFKA3_BOOTSTRAP, KMIRROR_KAFKA3_DATA)
#   scripts/kafka-local.sh kill-node DATA_DIR N     SIGKILL of broker N of that cluster (a crash)
#   scripts/kafka-local.sh start-node DATA_DIR N    start broker N again on its data
#   scripts/kafka-local.sh stop-cluster DATA_DIR    stop the cluster's four nodes
#   scripts/kafka-local.sh fetch-mm2 [VERSION]      download MirrorMaker 2 (connect-mirror and its
#                                                   runtime; default 4.3.1, KMIRROR_MM2_VERSION) into
#                                                   ~/.cache/kmirror/mm2-VERSION; prints it
#
# Needs Java 17+ (with keytool), Maven and openssl. KMIRROR_KAFKA_VERSION overrides the version (default 4.4.0).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="${KMIRROR_KAFKA_VERSION:-4.4.0}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/kmirror"

# Copies a POM's runtime closure from Maven Central into DIST/libs once.
fetch_closure() {
  local pom="$1" version="$2" dist="$3"
  if [ ! -f "$dist/.complete" ]; then
    mkdir -p "$dist/libs"
    mvn -B -q -f "$HERE/kafka/$pom" -Dkafka.version="$version" dependency:copy-dependencies \
      -DoutputDirectory="$dist/libs" -DincludeScope=runtime >&2
    cp "$HERE/kafka/log4j2.properties" "$dist/"
    touch "$dist/.complete"
  fi
  echo "$dist"
}

fetch() {
  local version="${1:-$VERSION}"
  fetch_closure pom.xml "$version" "$CACHE/kafka-$version"
}

fetch_mm2() {
  # Maven Central serves connect-mirror up to 4.3.1 (not 4.4.0): its clients talk to 4.4 brokers.
  local version="${1:-${KMIRROR_MM2_VERSION:-4.3.1}}"
  fetch_closure pom-mm2.xml "$version" "$CACHE/mm2-$version"
}

certificates() {
  local dir="$1"
  # A CA, a server certificate for 127.0.0.1/localhost signed by it, and an unrelated CA for tests
  # that must fail verification.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kmirror test CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=unrelated CA" \
    -keyout "$dir/other-ca.key" -out "$dir/other-ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$dir/server.rsa.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$dir/san.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/san.ext" -out "$dir/server.pem" 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$dir/server.rsa.key" -out "$dir/server.key"
  cat "$dir/server.key" "$dir/server.pem" > "$dir/server.keystore.pem"
  # Client identities for mutual TLS: "mirror" signed by the CA (PEM, PEM with an encrypted
  # PKCS#8 key, PKCS12), "stranger" signed by the unrelated CA; the CA as a PKCS12 truststore.
  local name ca
  # Extensions make them X.509 v3 certificates (TLS libraries refuse v1 ones).
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > "$dir/client.ext"
  for name in mirror stranger; do
    ca=ca; [ "$name" = stranger ] && ca=other-ca
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" \
      -keyout "$dir/$name.rsa.key" -out "$dir/$name.csr" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/$ca.pem" -CAkey "$dir/$ca.key" \
      -CAcreateserial -days 2 -extfile "$dir/client.ext" -out "$dir/$name.pem" 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in "$dir/$name.rsa.key" -out "$dir/$name.key"
  done
  openssl pkcs8 -topk8 -v2 aes-256-cbc -passout pass:key-secret -in "$dir/mirror.rsa.key" \
    -out "$dir/mirror.enc.key"
  # The identity provider's token signing key.
  openssl genrsa -out "$dir/idp.key" 2048 2>/dev/null
  openssl pkcs12 -export -in "$dir/mirror.pem" -inkey "$dir/mirror.key" -certfile "$dir/ca.pem" \
    -passout pass:store-secret -out "$dir/mirror.p12"
  rm -f "$dir/truststore.p12"
  keytool -importcert -noprompt -alias ca -file "$dir/ca.pem" -keystore "$dir/truststore.p12" \
    -storetype PKCS12 -storepass trust-secret >/dev/null 2>&1
}

# Who holds TCP port $1 on loopback: a process ("python3, pid 123") when ss or lsof can tell,
# else "another process"; nothing when the port is free.
port_holder() {
  local port="$1" who=""
  # SO_REUSEADDR as Kafka binds: connections of a stopped Kafka left in TIME_WAIT do not hold
  # the port, a listener does.
  python3 -c 'import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' \
    "$port" 2>/dev/null && return 0
  if command -v ss >/dev/null 2>&1; then
    who="$(ss -Hltnp "sport = :$port" 2>/dev/null \
      | sed -n 's/.*users:((\"\([^"]*\)\",pid=\([0-9]*\).*/\1, pid \2/p' | head -1)"
  fi
  if [ -z "$who" ] && command -v lsof >/dev/null 2>&1; then
    who="$(lsof -nP -iTCP:"$port" -sTCP:LISTEN 2>/dev/null | awk 'NR == 2 { print $1 ", pid " $2 }')"
  fi
  echo "${who:-another process}"
}

# Fails, naming the port and its holder, unless the ports from base $1 at the offsets given
# (all ten that `start` uses by default) are free.
check_ports() {
  local base="$1" i who; shift
  local roles=(PLAINTEXT CONTROLLER SSL SASL_SSL REMOTE "REMOTE (advertised, for a proxy)" MTLS
    OAUTHBEARER OIDC "the OIDC identity provider")
  local offsets=("$@")
  [ ${#offsets[@]} -gt 0 ] || offsets=(0 1 2 3 4 5 6 7 8 9)
  for i in "${offsets[@]}"; do
    who="$(port_holder $((base + i)))"
    if [ -n "$who" ]; then
      echo "port $((base + i)) (${roles[$i]}, base port $base + $i) is taken (by $who):" \
        "stop it or choose another base port; scripts/kafka-local.sh free-port prints a free one" >&2
      exit 1
    fi
  done
}

start() {
  local data="$1" port="${2:-19092}"
  local cport=$((port + 1)) sport=$((port + 2)) aport=$((port + 3)) rport=$((port + 4)) pport=$((port + 5))
  local mport=$((port + 6)) oport=$((port + 7)) iport=$((port + 8)) jport=$((port + 9))
  check_ports "$port"
  local dist; dist="$(fetch)"
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" cp="$dist/libs/*"
  mkdir -p "$data/logs"
  data="$(cd "$data" && pwd)"
  certificates "$data"
  cat > "$data/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,SSL://127.0.0.1:$sport,SASL_SSL://127.0.0.1:$aport,REMOTE://127.0.0.1:$rport,MTLS://127.0.0.1:$mport,OAUTH://127.0.0.1:$oport,OIDC://127.0.0.1:$iport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SSL://127.0.0.1:$sport,SASL_SSL://127.0.0.1:$aport,REMOTE://127.0.0.1:$pport,MTLS://127.0.0.1:$mport,OAUTH://127.0.0.1:$oport,OIDC://127.0.0.1:$iport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,REMOTE:PLAINTEXT,MTLS:SSL,OAUTH:SASL_PLAINTEXT,OIDC:SASL_PLAINTEXT
listener.name.oidc.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oidc.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oidc.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=http://127.0.0.1:$jport/jwks
sasl.oauthbearer.expected.issuer=http://127.0.0.1:$jport
sasl.oauthbearer.expected.audience=kafka
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="kafka";
ssl.keystore.type=PEM
ssl.keystore.location=$data/server.keystore.pem
listener.name.mtls.ssl.client.auth=required
listener.name.mtls.ssl.truststore.type=PEM
listener.name.mtls.ssl.truststore.location=$data/ca.pem
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";
log.dirs=$data/logs
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=1000
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:alice
allow.everyone.if.no.acl.found=true
log.cleaner.backoff.ms=200
PROPS
  local cluster_id
  cluster_id=$("$java" -cp "$cp" kafka.tools.StorageTool random-uuid)
  "$java" -cp "$cp" -Dlog4j2.configurationFile="file:$dist/log4j2.properties" kafka.tools.StorageTool \
    format -t "$cluster_id" -c "$data/server.properties" \
    --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]' \
    --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]' >"$data/format.log" 2>&1
  launch "$data"
  cat > "$data/env" <<ENV
export KMIRROR_KAFKA_DIST=$dist
export KMIRROR_KAFKA_DATA=$data
export KMIRROR_KAFKA_CLUSTER_ID=$cluster_id
export KMIRROR_KAFKA_BOOTSTRAP=127.0.0.1:$port
export KMIRROR_KAFKA_SSL=127.0.0.1:$sport
export KMIRROR_KAFKA_SASL_SSL=127.0.0.1:$aport
export KMIRROR_KAFKA_MTLS=127.0.0.1:$mport
export KMIRROR_KAFKA_OAUTH=127.0.0.1:$oport
export KMIRROR_KAFKA_OIDC=127.0.0.1:$iport
export KMIRROR_KAFKA_OIDC_TOKEN_URL=http://127.0.0.1:$jport/token
export KMIRROR_KAFKA_REMOTE_LISTENER=127.0.0.1:$rport
export KMIRROR_KAFKA_REMOTE=127.0.0.1:$pport
export KMIRROR_KAFKA_CA=$data/ca.pem
export KMIRROR_KAFKA_OTHER_CA=$data/other-ca.pem
export KMIRROR_KAFKA_USER=alice
export KMIRROR_KAFKA_PASSWORD=alice-secret
ENV
  echo "$data/env"
}

launch() {
  local data="$1" dist; dist="$(fetch)"
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" cp="$dist/libs/*"
  local aport; aport="$(sed -n 's/^listeners=.*MTLS:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$data/server.properties")"
  # The identity provider first: Kafka fetches its keys when the OIDC listener starts.
  local jwks; jwks="$(sed -n 's/^sasl.oauthbearer.jwks.endpoint.url=//p' "$data/server.properties")"
  local jport="${jwks##*:}"; jport="${jport%%/*}"
  if ! { [ -f "$data/idp.pid" ] && kill -0 "$(cat "$data/idp.pid")" 2>/dev/null; }; then
    nohup python3 "$HERE/kafka/oidc_provider.py" "$jport" "$data/idp.key" >>"$data/idp.log" 2>&1 &
    echo $! > "$data/idp.pid"
    for _ in $(seq 1 100); do
      (echo >/dev/tcp/127.0.0.1/"$jport") 2>/dev/null && break
      sleep 0.1
    done
  fi
  # The ports Kafka binds (not the advertised REMOTE one, nor the identity provider's): one held
  # by another process would answer the readiness check below for a Kafka that never started.
  local base; base="$(listener_base "$data")"
  check_ports "$base" 0 1 2 3 4 6 7 8
  nohup "$java" -Xms512m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="$jwks" \
    -Dlog4j2.configurationFile="file:$dist/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$data/server.properties" >>"$data/broker.log" 2>&1 &
  local pid=$!
  echo "$pid" > "$data/pid"
  for _ in $(seq 1 600); do
    (echo >/dev/tcp/127.0.0.1/"$aport") 2>/dev/null && kill -0 "$pid" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || exited_at_start "$data" "$pid"
    sleep 0.1
  done
  echo "Kafka did not open its listeners within 60 s; the end of $data/broker.log:" >&2
  tail -20 "$data/broker.log" >&2
  exit 1
}

# Kafka (process $2) is gone before opening its listeners: why, as far as can be told.
exited_at_start() {
  local data="$1" pid="$2" status=0
  wait "$pid" 2>/dev/null || status=$?
  echo "Kafka exited at start (exit status $status); the end of $data/broker.log:" >&2
  grep -v '^SLF4J:' "$data/broker.log" | tail -30 >&2 || true
  if grep -q 'no-operation (NOP) logger' "$data/broker.log"; then
    echo "(Kafka logs nothing here: the cached closure has slf4j-api 1.7 under log4j-slf4j2-impl," \
      "so SLF4J falls back to a no-op logger; pinning org.slf4j:slf4j-api 2.x in" \
      "scripts/kafka/pom.xml would let it say why)" >&2
  fi
  # A port taken since they were checked is the usual reason.
  check_ports "$(listener_base "$data")" 0 1 2 3 4 6 7 8
  exit 1
}

# The base port of the broker in $1 (its PLAINTEXT listener).
listener_base() {
  sed -n 's/^listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\),.*/\1/p' "$1/server.properties"
}

stop() {
  local data="$1"
  [ -f "$data/pid" ] || return 0
  local pid; pid="$(cat "$data/pid")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$data/pid"
}

stop_idp() {
  local data="$1"
  [ -f "$data/idp.pid" ] || return 0
  local pid; pid="$(cat "$data/idp.pid")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$data/idp.pid"
}

# Kafka and its identity provider.
stop_all() {
  local data="$1"
  stop "$data"
  stop_idp "$data"
}

# A base port from $1 on with PORT..PORT+9 free (something else may hold 19092).
free_port() {
  python3 - "$1" <<'PY'
import socket
import sys
for base in range(int(sys.argv[1]), 60000, 10):
    held = []
    try:
        for p in range(base, base + 10):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            held.append(s)
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in held:
            s.close()
PY
}

# Three brokers and a controller-only node in DATA_DIR/node-N (see the usage above).
start_cluster() {
  local data="$1" port="${2:-19092}"
  local cport=$((port + 3)) i who
  for i in 0 1 2 3; do
    who="$(port_holder $((port + i)))"
    if [ -n "$who" ]; then
      echo "port $((port + i)) (base port $port + $i) is taken (by $who): choose another base" \
        "port; scripts/kafka-local.sh free-port prints a free one" >&2
      exit 1
    fi
  done
  local dist; dist="$(fetch)"
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" cp="$dist/libs/*"
  mkdir -p "$data"
  data="$(cd "$data" && pwd)"
  local voters="9@127.0.0.1:$cport" node
  mkdir -p "$data/node-9/logs"
  cat > "$data/node-9/server.properties" <<PROPS
process.roles=controller
node.id=9
controller.quorum.voters=$voters
listeners=CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT
log.dirs=$data/node-9/logs
# The controller applies the defaults of a topic created without them.
default.replication.factor=3
min.insync.replicas=2
PROPS
  for node in 1 2 3; do
    mkdir -p "$data/node-$node/logs"
    cat > "$data/node-$node/server.properties" <<PROPS
process.roles=broker
node.id=$node
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$((port + node - 1))
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data/node-$node/logs
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
replica.lag.time.max.ms=5000
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=1000
PROPS
  done
  local cluster_id
  cluster_id=$("$java" -cp "$cp" kafka.tools.StorageTool random-uuid)
  for node in 9 1 2 3; do
    "$java" -cp "$cp" -Dlog4j2.configurationFile="file:$dist/log4j2.properties" kafka.tools.StorageTool \
      format -t "$cluster_id" -c "$data/node-$node/server.properties" >"$data/node-$node/format.log" 2>&1
  done
  for node in 9 1 2 3; do launch_node "$data" "$node"; done
  # A broker opens its listener once the controller has it registered.
  for node in 1 2 3; do wait_node "$data" "$node" "$((port + node - 1))"; done
  cat > "$data/env" <<ENV
export KMIRROR_KAFKA_DIST=$dist
export KMIRROR_KAFKA3_DATA=$data
export KMIRROR_KAFKA3_BOOTSTRAP=127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))
ENV
  echo "$data/env"
}

# Starts node $2 of the cluster in $1 (without waiting).
launch_node() {
  local data="$1" node="$2" dist; dist="$(fetch)"
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" cp="$dist/libs/*"
  nohup "$java" -Xms256m -Xmx384m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="file:$dist/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$data/node-$node/server.properties" >>"$data/node-$node/broker.log" 2>&1 &
  echo $! > "$data/node-$node/pid"
}

# Waits until node $2 of the cluster in $1 listens on port $3.
wait_node() {
  local data="$1" node="$2" port="$3" pid; pid="$(cat "$data/node-$node/pid")"
  for _ in $(seq 1 900); do
    (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && kill -0 "$pid" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "Kafka node $node exited at start; the end of $data/node-$node/broker.log:" >&2
      grep -v '^SLF4J:' "$data/node-$node/broker.log" | tail -30 >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  echo "Kafka node $node does not listen on $port after 90 s; see $data/node-$node/broker.log" >&2
  exit 1
}

kill_node() {
  local data="$1" node="$2"
  [ -f "$data/node-$node/pid" ] || return 0
  kill -9 "$(cat "$data/node-$node/pid")" 2>/dev/null || true
  rm -f "$data/node-$node/pid"
}

start_node() {
  local data="$1" node="$2" port
  kill_node "$data" "$node"
  launch_node "$data" "$node"
  port="$(sed -n 's/^listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\)$/\1/p' "$data/node-$node/server.properties")"
  wait_node "$data" "$node" "$port"
}

stop_cluster() {
  local data="$1" node
  for node in 1 2 3 9; do stop "$data/node-$node"; done
}

case "${1:-}" in
  fetch) fetch "${2:-}" ;;
  free-port) free_port "${2:-19092}" ;;
  fetch-mm2) fetch_mm2 "${2:-}" ;;
  start) start "${2:?data directory}" "${3:-19092}" ;;
  restart) stop "${2:?data directory}"; launch "$2" ;;
  stop) stop_all "${2:?data directory}" ;;
  start-cluster) start_cluster "${2:?data directory}" "${3:-19092}" ;;
  kill-node) kill_node "${2:?data directory}" "${3:?node id}" ;;
  start-node) start_node "${2:?data directory}" "${3:?node id}" ;;
  stop-cluster) stop_cluster "${2:?data directory}" ;;
  *) sed -n '2,46p' "$0"; exit 2 ;;
esac
