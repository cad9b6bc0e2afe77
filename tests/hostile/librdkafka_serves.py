"""A real client still works after an attack: confluent-kafka (librdkafka) produces COUNT records
with acks=all to TOPIC (which exists, one partition), then a consumer group reads them back.
The producer is destroyed before the consumer starts, so the client never holds more than a few
connections at once (some tests cap them). Prints one JSON line; exits non-zero on any error.

Usage: librdkafka_serves.py BOOTSTRAP TOPIC COUNT
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> None:
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"value-{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    if producer.flush(30) != 0:
        raise RuntimeError("records still in flight after 30 s")
    if errors:
        raise RuntimeError(f"delivery errors: {errors[:5]}")
    del producer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"hostile-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values = set()
    deadline = time.time() + 60
    try:
        while len(values) < count and time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            values.add(msg.value())
    finally:
        consumer.close()
    print(json.dumps({"produced": count, "consumed_distinct": len(values)}))
    if len(values) != count:
        sys.exit(1)


if __name__ == "__main__":
    main()
