"""The compatibility client over kafka-python. Operations: see common.py."""
import time

import kafka

from common import CONSUME_TIMEOUT_S, key, record, run, value
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


def create(bootstrap, topic, partitions):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, int(partitions), 1)])
    finally:
        admin.close()
    return {"created": topic}


def produce(bootstrap, topic, codec, count, prefix):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             compression_type=None if codec == "none" else codec, linger_ms=20)
    futures = [producer.send(topic, key=key(prefix, i).encode(), value=value(prefix, i).encode())
               for i in range(int(count))]
    answers = [f.get(timeout=30) for f in futures]
    producer.close()
    return {"acked": [record(a.partition, a.offset, key(prefix, i), value(prefix, i))
                      for i, a in enumerate(answers)]}


def consume(bootstrap, topic, group, count):
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    records, deadline = [], time.monotonic() + CONSUME_TIMEOUT_S
    while len(records) < int(count) and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            records += [record(m.partition, m.offset, m.key, m.value) for m in batch]
    if records:
        consumer.commit()
    consumer.close()
    return {"records": records}


def committed(bootstrap, topic, group):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {"committed": {tp.partition: o.offset for tp, o in answer.items() if tp.topic == topic}}


def offsets(bootstrap, topic):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    if not tps:
        raise RuntimeError(f"no partitions known for {topic}")
    earliest, latest = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    consumer.close()
    return {"earliest": {tp.partition: o for tp, o in earliest.items()},
            "latest": {tp.partition: o for tp, o in latest.items()}}


def version():
    return kafka.__version__


run({"version": version, "create": create, "produce": produce, "consume": consume, "committed": committed,
     "offsets": offsets})
