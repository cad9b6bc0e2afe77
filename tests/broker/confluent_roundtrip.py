"""confluent-kafka (librdkafka) against a broker: create a topic, produce with idempotence and
lz4, consume it as a consumer group with committed offsets, produce ten more, then check a new
member of the group resumes from the committed offsets (it reads exactly the ten). Prints one JSON line with what happened; exits non-zero on any client error.

Usage: confluent_roundtrip.py BOOTSTRAP TOPIC COUNT
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(timeout=30)

    errors = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    for i in range(count):
        producer.produce(topic, key=str(i % 97).encode(), value=f"value-{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    if producer.flush(30) != 0:
        raise RuntimeError("messages still in flight after 30 s")
    if errors:
        raise RuntimeError(f"delivery errors: {errors[:5]}")

    def consumer() -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "py-readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )

    c = consumer()
    c.subscribe([topic])
    values = set()
    deadline = time.time() + 60
    while len(values) < count and time.time() < deadline:
        msg = c.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        values.add(msg.value().decode())
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    c.close()

    for i in range(10):
        producer.produce(topic, value=f"late-{i}".encode(), on_delivery=delivered)
    if producer.flush(30) != 0 or errors:
        raise RuntimeError(f"late messages not delivered: {errors[:5]}")

    again = consumer()
    again.subscribe([topic])
    resumed = []
    deadline = time.time() + 30
    while len(resumed) < 10 and time.time() < deadline:
        msg = again.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        resumed.append(msg.value().decode())
    # Anything beyond the ten would mean the group did not resume where it committed.
    end = time.time() + 2
    while time.time() < end:
        msg = again.poll(0.2)
        if msg is not None and not msg.error():
            resumed.append(msg.value().decode())
    again.close()

    print(
        json.dumps(
            {
                "produced": count,
                "consumed_distinct": len(values),
                "committed_total": sum(tp.offset for tp in committed),
                "read_after_resume": sorted(resumed),
            }
        )
    )


if __name__ == "__main__":
    main()
