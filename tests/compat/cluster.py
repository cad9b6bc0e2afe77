"""What the compatibility runner drives besides the clients under test: a `kmirror broker`
process, the mirror of a source Apache Kafka topic, and the reference tools whose answers the
checks compare against (kcat reading a topic back as JSON, Kafka's kafka-topics, `kmirror
dump-log` for the codec each stored batch has)."""
import json
import os
import re
import socket
import subprocess
import tempfile
import time

import capture as recording


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A `kmirror broker` on a free port over a temporary folder; stop() ends it."""

    def __init__(self, binary, workdir, capture=None):
        self.binary, self.dir = binary, workdir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.data = os.path.join(workdir, "data")
        self.recorder = None
        advertised = ""
        if capture:
            # Clients reach the broker through a recording proxy it advertises.
            self.recorder = recording.Recorder(self.port, capture)
            self.address = f"127.0.0.1:{self.recorder.port}"
            advertised = f"advertised.listeners=PLAINTEXT://{self.address}\n"
        config = os.path.join(workdir, "server.properties")
        with open(config, "w") as f:
            f.write(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{self.port}\n{advertised}"
                    f"log.dirs={self.data}\n"
                    "num.partitions=1\nauto.create.topics.enable=false\n"
                    "mirror.state.topic.num.partitions=4\n")
        self.log_path = os.path.join(workdir, "broker.log")
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen([binary, "broker", "--config", config],
                                        stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"kmirror broker did not start; its log:\n{self.log_tail()}")
                time.sleep(0.05)

    def log_tail(self, lines=30):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        if self.recorder:
            self.recorder.close()

    def stored_codecs(self, topic, partition):
        """[(base offset, last offset, codec)] of the partition's stored batches."""
        out = run(self.binary, "dump-log", os.path.join(self.data, f"{topic}-{partition}"))
        return [(int(m[1]), int(m[2]), m[3]) for m in
                re.finditer(r"baseOffset: (\d+) lastOffset: (\d+) .*?compression: (\w+)", out)]

    def mirror(self, source, topic, ends, timeout=90):
        """Mirrors `topic` of the cluster at `source` here (kmirror mirrors --create, --start) and
        waits until every partition is MIRRORING at the source's log end `ends`."""
        config = os.path.join(self.dir, "mirror.properties")
        with open(config, "w") as f:
            f.write(f"bootstrap.servers={source}\n")
        mirrors = [self.binary, "mirrors", "--bootstrap-server", self.address]
        run(*mirrors, "--create", "--mirror", "compat", "--mirror-config", config)
        run(*mirrors, "--start", "--mirror", "compat", "--topics", topic)
        deadline, seen = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            described = json.loads(run(*mirrors, "--describe", "--mirror", "compat", "--json"))
            seen = {(p["partition"], p["state"], p.get("destinationOffset"), p.get("errorMessage"))
                    for p in described if p["topic"] == topic}
            if seen == {(p, "MIRRORING", end, None) for p, end in ends.items()}:
                return
            time.sleep(0.3)
        raise RuntimeError(f"mirror of {topic} not caught up to {ends} in {timeout} s: {seen}")


def run(*args, stdin=None, timeout=120):
    """Runs a reference command; its stdout, or raises with its stderr."""
    done = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:4]))} ... exited {done.returncode}: "
                           f"{done.stderr.strip()[-800:]}")
    return done.stdout


def create_topic(kafka_dist, bootstrap, topic, partitions):
    """Creates a topic with Apache Kafka's kafka-topics (for clients without an admin API)."""
    run("java", "-cp", os.path.join(kafka_dist, "libs", "*"), "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server", bootstrap, "--create", "--topic", topic,
        "--partitions", str(partitions), "--replication-factor", "1")


def partitions(bootstrap, topic):
    """The topic's partition ids from kcat's metadata, or [] when it does not exist."""
    meta = json.loads(run("kcat", "-L", "-J", "-b", bootstrap, "-t", topic))
    return sorted(p["partition"] for t in meta["topics"] if t["topic"] == topic and not t.get("error")
                  for p in t["partitions"])


def read_back(bootstrap, topic):
    """Every record of the topic, as kcat reads it alone from offset 0 (the suite's logs start
    there; an explicit offset needs no ListOffsets): sorted (partition, offset, key, value)
    tuples."""
    out = run("kcat", "-C", "-J", "-e", "-q", "-o", "0", "-b", bootstrap, "-t", topic)
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    return sorted((r["partition"], r["offset"], r["key"], r["payload"]) for r in records)


def produce(bootstrap, topic, records, codec="none"):
    """Produces (key, value) pairs with kcat, acks=all."""
    lines = "".join(f"{k}|{v}\n" for k, v in records)
    run("kcat", "-P", "-b", bootstrap, "-t", topic, "-K", "|", "-z", codec, "-X", "acks=all",
        stdin=lines)


def workdir():
    return tempfile.mkdtemp(prefix="kmirror-compat.")
