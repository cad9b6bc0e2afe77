#!/usr/bin/env python3
"""How long `kmirror broker` takes to stop cleanly (SIGTERM to exit) with many partitions.

    scripts/stop-time.py PARTITIONS BINARY [BINARY ...]

Each binary in turn: a fresh single-node broker, PARTITIONS partitions (topics of 1,000) with
one record each, then SIGTERM; prints the time to exit and, for two binaries, their ratio (run
them side by side: the machine is shared). Needs confluent-kafka (tests/broker/requirements.txt).
"""
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stop_time(binary, partitions):
    with tempfile.TemporaryDirectory(prefix="kmirror-stop-time-") as d:
        port, metrics = free_port(), free_port()
        with open(f"{d}/server.properties", "w") as f:
            f.write(
                f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={d}/data\n"
                f"metrics.listener=http://127.0.0.1:{metrics}\n"
            )
        with open(f"{d}/broker.log", "w") as log:
            broker = subprocess.Popen(
                [binary, "broker", "--config", f"{d}/server.properties"], stdout=log, stderr=log
            )
        bootstrap = f"127.0.0.1:{port}"
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            sys.exit(f"{binary} does not listen on {port}; see its log")
        topics = [NewTopic(f"t{i}", 1000, 1) for i in range(partitions // 1000)]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics(topics).values():
            future.result()
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "log_level": 0})
        for topic in topics:
            for p in range(1000):
                producer.produce(topic.topic, b"x", partition=p)
            producer.poll(0)
        if producer.flush(120) != 0:
            sys.exit("not every record was acknowledged")
        started = time.monotonic()
        broker.send_signal(signal.SIGTERM)
        code = broker.wait()
        took = time.monotonic() - started
        print(f"{binary}: {partitions} partitions, stopped in {took:.2f} s (exit {code})", flush=True)
        return took


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    partitions = int(sys.argv[1])
    times = [stop_time(b, partitions) for b in sys.argv[2:]]
    if len(times) == 2:
        print(f"ratio {times[0] / times[1]:.1f}x")


if __name__ == "__main__":
    main()
