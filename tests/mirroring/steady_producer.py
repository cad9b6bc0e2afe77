"""A steady producer for the failover test: writes 1 KiB records to a topic with acks=all until
a stop file appears, then flushes and prints one JSON line with the records the cluster
acknowledged and those it refused.

    steady_producer.py BOOTSTRAP TOPIC STOP_FILE
"""
import json
import os
import sys
import time

from confluent_kafka import Producer

bootstrap, topic, stop_file = sys.argv[1:4]
counts = {"acked": 0, "failed": 0}


def delivered(error, _message):
    counts["failed" if error else "acked"] += 1


producer = Producer({
    "bootstrap.servers": bootstrap,
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
})
value = os.urandom(1024)
sent = 0
while not os.path.exists(stop_file):
    # About 2,000 records a second: steady, and faster than the throttled mirror.
    for _ in range(100):
        producer.produce(topic, value=value, key=str(sent).encode(), on_delivery=delivered)
        sent += 1
    producer.poll(0)
    time.sleep(0.05)
producer.flush(30)
print(json.dumps({"sent": sent, **counts}))
