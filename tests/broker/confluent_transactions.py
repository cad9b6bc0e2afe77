"""confluent-kafka (librdkafka) transactions against a broker.

1. A transactional producer commits COUNT records, aborts COUNT, commits COUNT more.
2. A second producer with the same transactional id fences the first: the first one's next
   transaction fails.
3. A producer that opens a transaction (short timeout) and vanishes without ending it: the
   broker aborts it once the timeout passes, so records committed after it become readable.
4. READ_COMMITTED and READ_UNCOMMITTED consumers read the topic from the start.

Prints one JSON line with what each consumer saw; exits non-zero on any unexpected client error.

Usage: confluent_transactions.py BOOTSTRAP TOPIC COUNT
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def transactional(bootstrap: str, transactional_id: str, timeout_ms: int = 60000) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, prefix: str, count: int) -> None:
    for i in range(count):
        producer.produce(topic, key=str(i % 7).encode(), value=f"{prefix}-{i}".encode())
        producer.poll(0)


def read_all(bootstrap: str, topic: str, isolation: str, expect: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-readers-{isolation}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values = []
    deadline = time.time() + 60
    quiet_until = None
    while time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            # Once the expected count is in, keep polling briefly: extra records would be a bug.
            if len(values) >= expect:
                quiet_until = quiet_until or time.time() + 2
                if time.time() > quiet_until:
                    break
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(msg.error())
        values.append(msg.value().decode())
    consumer.close()
    return values


def main() -> None:
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=2)]).values():
        future.result(timeout=30)

    first = transactional(bootstrap, "py-txn")
    first.begin_transaction()
    send(first, topic, "committed-a", count)
    first.commit_transaction(30)
    first.begin_transaction()
    send(first, topic, "aborted", count)
    first.flush(30)
    first.abort_transaction(30)
    first.begin_transaction()
    send(first, topic, "committed-b", count)
    first.commit_transaction(30)

    # Same transactional id: the newer producer fences the first.
    second = transactional(bootstrap, "py-txn")
    fenced = False
    try:
        first.begin_transaction()
        send(first, topic, "zombie", 10)
        first.commit_transaction(30)
    except KafkaException as e:
        fenced = e.args[0].fatal() or e.args[0].code() in (
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        )

    # A transaction left open (its producer gone) blocks READ_COMMITTED readers until the
    # broker aborts it at its 3 s timeout.
    hanging = transactional(bootstrap, "py-hanging", timeout_ms=3000)
    hanging.begin_transaction()
    send(hanging, topic, "hanging", 10)
    hanging.flush(30)
    del hanging

    second.begin_transaction()
    send(second, topic, "committed-c", count)
    second.commit_transaction(30)

    committed = read_all(bootstrap, topic, "read_committed", 3 * count)
    uncommitted = read_all(bootstrap, topic, "read_uncommitted", 4 * count + 10)
    print(
        json.dumps(
            {
                "fenced": fenced,
                "read_committed": sorted(committed),
                "read_uncommitted_count": len(uncommitted),
                "read_uncommitted_aborted": len([v for v in uncommitted if v.startswith("aborted-")]),
                "read_uncommitted_hanging": len([v for v in uncommitted if v.startswith("hanging-")]),
            }
        )
    )


if __name__ == "__main__":
    main()
