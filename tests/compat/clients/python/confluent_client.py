"""The compatibility client over confluent-kafka (librdkafka); run with 2.0.2 and the newest.
Operations: see common.py."""
import time

import confluent_kafka

from common import CONSUME_TIMEOUT_S, key, record, run, value
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, int(partitions), 1)]).values():
        future.result(30)
    return {"created": topic}


def produce(bootstrap, topic, codec, count, prefix):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "compression.type": codec, "linger.ms": 20})
    acked, failed = [], []

    def delivered(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked.append(record(msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i in range(int(count)):
        producer.produce(topic, key=key(prefix, i), value=value(prefix, i), on_delivery=delivered)
    left = producer.flush(30)
    if failed or left:
        raise KafkaException(f"{left} undelivered, errors: {failed[:3]}")
    return {"acked": acked}


def consume(bootstrap, topic, group, count):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records, deadline = [], time.monotonic() + CONSUME_TIMEOUT_S
    while len(records) < int(count) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        records.append(record(msg.partition(), msg.offset(), msg.key(), msg.value()))
    if records:
        consumer.commit(asynchronous=False)
    consumer.close()
    return {"records": records}


def partitions(client, topic):
    return sorted(client.list_topics(topic, timeout=10).topics[topic].partitions)


def committed(bootstrap, topic, group):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    asked = [TopicPartition(topic, p) for p in partitions(consumer, topic)]
    answer = consumer.committed(asked, timeout=10)
    consumer.close()
    for tp in answer:
        if tp.error:
            raise KafkaException(tp.error)
    return {"committed": {tp.partition: tp.offset for tp in answer}}


def offsets(bootstrap, topic):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-offsets"})
    out = {"earliest": {}, "latest": {}}
    for p in partitions(consumer, topic):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
        out["earliest"][p], out["latest"][p] = low, high
    consumer.close()
    return out


def version():
    return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"


run({"version": version, "create": create, "produce": produce, "consume": consume, "committed": committed,
     "offsets": offsets})
