"""The clients the compatibility suite runs, each a command line under the cache that
scripts/compat.sh fills, with the cells that do not apply to it and why."""
import os
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
JAVA_VERSIONS = ["2.0.1", "2.8.2", "3.9.2", "4.4.0"]
# config.Version as sarama.ParseKafkaVersion spells V0_11_0_0, V2_0_0_0 and V3_6_0_0.
SARAMA_VERSIONS = {"0.11": "0.11.0.0", "2.0": "2.0.0", "3.6": "3.6.0"}


@dataclass
class Client:
    slug: str  # names its topic and groups
    name: str
    command: list
    not_applicable: dict = field(default_factory=dict)  # cell -> reason
    note: str = ""
    env: dict = field(default_factory=dict)


def catalogue(cache):
    py = os.path.join(cache, "venv", "bin", "python")
    py_old = os.path.join(cache, "venv-confluent-2.0", "bin", "python")
    pyclients = os.path.join(HERE, "clients", "python")
    go = os.path.join(cache, "go-bin")
    no_zstd_before_2_1 = {"zstd": "zstd needs Kafka protocol 2.1 (Produce v7)"}
    clients = [
        Client("kcat", "kcat (Debian)", [sys.executable, os.path.join(HERE, "clients", "kcat", "client.py")],
               {"create": "no admin API (kafka-topics creates its topic)",
                "committed": "cannot fetch committed offsets (the resume cell checks the commit)"},
               note="its producer prints no offsets: produced records are checked by reading back"),
        Client("confluent-2-0", "confluent-kafka 2.0.2", [py_old, os.path.join(pyclients, "confluent_client.py")]),
        Client("confluent", "confluent-kafka (newest)", [py, os.path.join(pyclients, "confluent_client.py")]),
        Client("aiokafka", "aiokafka", [py, os.path.join(pyclients, "aiokafka_client.py")]),
        Client("kafka-python", "kafka-python", [py, os.path.join(pyclients, "kafka_python_client.py")]),
        Client("kafkajs", "kafkajs (+ kafkajs-snappy, kafkajs-lz4)",
               ["node", os.path.join(HERE, "clients", "node", "client.js")],
               {"zstd": "needs a codec plugin (@kafkajs/zstd, a native build), not installed"},
               note="kafkajs codecs: none and gzip built in, snappy and lz4 by plugins; it reports "
                    "a base offset per partition, so produced records are checked by reading back",
               env={"NODE_PATH": os.path.join(cache, "node", "node_modules")}),
    ]
    for label, version in SARAMA_VERSIONS.items():
        clients.append(Client(f"sarama-{label.replace('.', '-')}", f"Sarama, config.Version {version}",
                              [os.path.join(go, "sarama"), "-kafka-version", version],
                              no_zstd_before_2_1 if label != "3.6" else {}))
    clients += [
        Client("kafka-go", "segmentio/kafka-go", [os.path.join(go, "kafkago")],
               note="kafka-go has no idempotent producer: its produce cells are acks=all only"),
        Client("franz-go", "franz-go", [os.path.join(go, "franz")]),
    ]
    for version in JAVA_VERSIONS:
        jar_dir = os.path.join(cache, "java", version)
        clients.append(Client(f"java-{version.replace('.', '-')}", f"Java kafka-clients {version}",
                              ["java", "-cp", f"{jar_dir}/classes:{jar_dir}/libs/*", "CompatClient"],
                              no_zstd_before_2_1 if version.startswith("2.0") else {}))
    newest = os.path.join(cache, "java", JAVA_VERSIONS[-1])
    clients.append(Client("java-kip848", f"Java kafka-clients {JAVA_VERSIONS[-1]}, group.protocol=consumer",
                          ["java", "-Dcompat.group.protocol=consumer", "-cp",
                           f"{newest}/classes:{newest}/libs/*", "CompatClient"],
                          note="its groups use KIP-848's protocol (ConsumerGroupHeartbeat, "
                               "OffsetCommit/OffsetFetch v9 with member epochs)"))
    return clients
