"""The compatibility client over aiokafka (asyncio). Operations: see common.py."""
import asyncio
import time

import aiokafka

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from common import CONSUME_TIMEOUT_S, key, record, run, value


async def create(bootstrap, topic, partitions):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        answer = await admin.create_topics([NewTopic(topic, int(partitions), 1)])
    finally:
        await admin.close()
    for name, code, *message in answer.topic_errors:
        if code != 0:
            raise RuntimeError(f"CreateTopics {name}: error {code} {message}")
    return {"created": topic}


async def produce(bootstrap, topic, codec, count, prefix):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                compression_type=None if codec == "none" else codec,
                                linger_ms=20)
    await producer.start()
    try:
        sent = [await producer.send(topic, key=key(prefix, i).encode(), value=value(prefix, i).encode())
                for i in range(int(count))]
        answers = await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return {"acked": [record(a.partition, a.offset, key(prefix, i), value(prefix, i))
                      for i, a in enumerate(answers)]}


async def consume(bootstrap, topic, group, count):
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    records, deadline = [], time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(records) < int(count) and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records += [record(m.partition, m.offset, m.key, m.value) for m in batch]
        if records:
            await consumer.commit()
    finally:
        await consumer.stop()
    return {"records": records}


async def committed(bootstrap, topic, group):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        answer = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {"committed": {tp.partition: o.offset for tp, o in answer.items() if tp.topic == topic}}


async def offsets(bootstrap, topic):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    tps = [TopicPartition(topic, p["partition"]) for t in described for p in t["partitions"]]
    if not tps:
        raise RuntimeError(f"no partitions known for {topic}: {described}")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        earliest = await consumer.beginning_offsets(tps)
        latest = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {"earliest": {tp.partition: o for tp, o in sorted(earliest.items())},
            "latest": {tp.partition: o for tp, o in sorted(latest.items())}}


def version():
    return aiokafka.__version__


def sync(operation):
    return lambda *args: asyncio.run(operation(*args))


OPERATIONS = {"create": create, "produce": produce, "consume": consume, "committed": committed,
              "offsets": offsets}
run({"version": version, **{name: sync(op) for name, op in OPERATIONS.items()}})
