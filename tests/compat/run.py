#!/usr/bin/env python3
"""kmirror's client compatibility suite (issue 22): every client of clients.py runs each
operation against a `kmirror broker` started here, and the runner checks what it did against
references it reads itself (kcat reading the topic back, the stored batches' codecs from
`kmirror dump-log`, the source Kafka's records for the mirrored topic), never the client's own
claim. Writes the results as JSON and the table docs/client-compatibility.md; exits 1 when a
cell that applies fails. scripts/compat.sh installs the clients and runs this.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import cluster
import table
from clients import CODECS, catalogue

PARTITIONS = 3
PRODUCED = 30  # records per produce cell
LATE = 6  # records the runner adds before the resume cell
CELLS = (["create"] + [f"produce-{c}" for c in CODECS]
         + ["offsets", "consume", "committed", "resume", "mirror"])
print_lock = threading.Lock()


def say(text):
    with print_lock:
        print(text, flush=True)


class CellFailed(Exception):
    def __init__(self, reason, stderr=""):
        super().__init__(reason)
        self.reason, self.stderr = reason, stderr


def key(prefix, i):
    return f"{prefix}-{i}"


def value(prefix, i):
    return f"value {i} of {prefix} " + "x" * 100


def invoke(client, *args, timeout=75):
    """Runs one operation of the client; its JSON answer, or CellFailed with its stderr tail."""
    env = dict(os.environ, **client.env)
    try:
        done = subprocess.run(client.command + [str(a) for a in args], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise CellFailed(f"{args[0]} did not end in {timeout} s", (e.stderr or b"").decode(errors="replace")
                         if isinstance(e.stderr, bytes) else (e.stderr or ""))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    answer = json.loads(lines[-1]) if lines else {}
    if done.returncode != 0 or "error" in answer or not answer:
        raise CellFailed(f"{args[0]} failed: {answer.get('error') or f'exit {done.returncode}, no answer'}",
                         done.stderr)
    return answer


def tuples(records):
    return sorted((int(r["partition"]), int(r["offset"]), r["key"], r["value"]) for r in records)


def diff(got, want):
    """How two record lists differ, with examples as (partition, offset, key)."""
    got, want = set(got), set(want)
    example = lambda records: [r[:3] for r in sorted(records)[:2]]
    return (f"{len(want - got)} missing (e.g. {example(want - got)}), "
            f"{len(got - want)} unexpected (e.g. {example(got - want)})")


class Suite:
    def __init__(self, broker, kafka_dist, mirrored):
        self.broker, self.kafka_dist = broker, kafka_dist
        self.mirrored_topic, self.mirrored = mirrored

    def run_client(self, client):
        topic, results = f"compat-{client.slug}", {}
        group = f"{topic}-group"
        for cell in CELLS:
            if cell in client.not_applicable or cell.removeprefix("produce-") in client.not_applicable:
                reason = client.not_applicable.get(cell) or client.not_applicable[cell.removeprefix("produce-")]
                results[cell] = {"status": "n/a", "reason": reason}
                if cell == "create":
                    cluster.create_topic(self.kafka_dist, self.broker.address, topic, PARTITIONS)
                continue
            started = time.monotonic()
            try:
                getattr(self, "cell_" + cell.split("-")[0])(client, topic, group, cell)
                results[cell] = {"status": "pass"}
            except Exception as e:  # noqa: BLE001 -- a cell fails alone, the run goes on
                results[cell] = {"status": "fail", "reason": getattr(e, "reason", f"{type(e).__name__}: {e}"),
                                 "stderr": "\n".join(getattr(e, "stderr", "").splitlines()[-15:])}
                if cell == "create" and not cluster.partitions(self.broker.address, topic):
                    cluster.create_topic(self.kafka_dist, self.broker.address, topic, PARTITIONS)
            results[cell]["seconds"] = round(time.monotonic() - started, 1)
            say(f"  {client.name}: {cell}: {results[cell]['status']}"
                + (f" ({results[cell]['reason']})" if results[cell]["status"] == "fail" else ""))
        return results

    def cell_create(self, client, topic, group, cell):
        invoke(client, "create", self.broker.address, topic, PARTITIONS)
        got = cluster.partitions(self.broker.address, topic)
        if got != list(range(PARTITIONS)):
            raise CellFailed(f"after create, the topic's partitions are {got}, not {PARTITIONS}")

    def cell_produce(self, client, topic, group, cell):
        codec = cell.removeprefix("produce-")
        prefix = f"{client.slug}-{codec}"
        answer = invoke(client, "produce", self.broker.address, topic, codec, PRODUCED, prefix)
        want = {key(prefix, i): value(prefix, i) for i in range(PRODUCED)}
        stored = [r for r in cluster.read_back(self.broker.address, topic) if r[2] in want]
        if sorted((k, v) for _, _, k, v in stored) != sorted(want.items()):
            raise CellFailed(f"read back {len(stored)} of the {PRODUCED} records, or other contents")
        at = {k: (p, o) for p, o, k, _ in stored}
        acked = answer.get("acked", [])
        if len(acked) != PRODUCED or any(
                a["offset"] is not None and at.get(a["key"]) != (a["partition"], a["offset"]) for a in acked):
            raise CellFailed("the acknowledged partitions/offsets differ from where the records are")
        codecs = {p: self.broker.stored_codecs(topic, p) for p in range(PARTITIONS)}
        for p, o, k, _ in stored:
            found = [c for base, last, c in codecs[p] if base <= o <= last]
            if found != [codec]:
                raise CellFailed(f"record {k} at {p}/{o} is stored in a batch compressed {found}, not {codec}")

    def expected_ends(self, topic):
        stored = cluster.read_back(self.broker.address, topic)
        return {p: max([o + 1 for q, o, _, _ in stored if q == p], default=0) for p in range(PARTITIONS)}

    def cell_offsets(self, client, topic, group, cell):
        answer = invoke(client, "offsets", self.broker.address, topic)
        got = {side: {int(p): o for p, o in answer[side].items()} for side in ("earliest", "latest")}
        want = {"earliest": {p: 0 for p in range(PARTITIONS)}, "latest": self.expected_ends(topic)}
        if got != want:
            raise CellFailed(f"answered {got}, the log holds {want}")

    def consume_exactly(self, client, topic, group, want):
        answer = invoke(client, "consume", self.broker.address, topic, group, len(want))
        got = tuples(answer.get("records") or [])
        if got != want:
            raise CellFailed(f"consumed {len(got)} records, expected {len(want)}: {diff(got, want)}"
                             + (" (duplicates)" if len(set(got)) != len(got) else ""))

    def cell_consume(self, client, topic, group, cell):
        self.consume_exactly(client, topic, group, cluster.read_back(self.broker.address, topic))

    def cell_committed(self, client, topic, group, cell):
        answer = invoke(client, "committed", self.broker.address, topic, group)
        got = {int(p): o for p, o in answer["committed"].items() if o >= 0}
        want = {p: end for p, end in self.expected_ends(topic).items() if end > 0}
        if got != want:
            raise CellFailed(f"committed offsets answered {got}, the group consumed up to {want}")

    def cell_resume(self, client, topic, group, cell):
        prefix = f"{client.slug}-late"
        cluster.produce(self.broker.address, topic, [(key(prefix, i), value(prefix, i)) for i in range(LATE)])
        late = [r for r in cluster.read_back(self.broker.address, topic) if r[2].startswith(prefix + "-")]
        self.consume_exactly(client, topic, group, late)

    def cell_mirror(self, client, topic, group, cell):
        self.consume_exactly(client, self.mirrored_topic, f"{topic}-mirror-group", self.mirrored)


def mirror_source_topic(broker, source, kafka_dist):
    """Produces known records (uncompressed, gzip, snappy and lz4 batches) to a new topic of the
    source Kafka, mirrors it here and checks the mirror holds exactly them; (topic, records)."""
    topic = f"compat-source-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(kafka_dist, source, topic, PARTITIONS)
    for codec in ["none", "gzip", "snappy", "lz4"]:
        prefix = f"source-{codec}"
        cluster.produce(source, topic, [(key(prefix, i), value(prefix, i)) for i in range(20)], codec)
    records = cluster.read_back(source, topic)
    ends = {p: max([o + 1 for q, o, _, _ in records if q == p], default=0) for p in range(PARTITIONS)}
    broker.mirror(source, topic, ends)
    mirrored = cluster.read_back(broker.address, topic)
    if mirrored != records:
        raise RuntimeError(f"the mirror of {topic} differs from the source: {diff(mirrored, records)}")
    return topic, records


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kmirror", required=True, help="the kmirror binary")
    parser.add_argument("--source", required=True, help="bootstrap of the source Apache Kafka")
    parser.add_argument("--kafka-dist", required=True, help="Apache Kafka's libs (for kafka-topics)")
    parser.add_argument("--cache", required=True, help="where scripts/compat.sh installed the clients")
    parser.add_argument("--results", required=True, help="results JSON to write")
    parser.add_argument("--table", help="the Markdown table to write")
    parser.add_argument("--only", help="comma-separated client slugs to run")
    parser.add_argument("--jobs", type=int, default=3, help="clients run at once")
    parser.add_argument("--capture", help="keep each client's requests here (see capture.py)")
    args = parser.parse_args()

    clients = catalogue(args.cache)
    if args.only:
        clients = [c for c in clients if c.slug in args.only.split(",")]
    started = time.monotonic()
    broker = cluster.Broker(args.kmirror, cluster.workdir(), args.capture)
    say(f"kmirror broker on {broker.address} (log: {broker.log_path})")
    try:
        suite = Suite(broker, args.kafka_dist, mirror_source_topic(broker, args.source, args.kafka_dist))
        say(f"mirrored {suite.mirrored_topic}: {len(suite.mirrored)} records from {args.source}")
        versions = {}
        for c in clients:
            try:
                versions[c.slug] = invoke(c, "version")["version"]
            except CellFailed as e:
                raise SystemExit(f"{c.name} is not installed ({e.reason}): {e.stderr[-500:]}")
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = dict(zip([c.slug for c in clients], pool.map(suite.run_client, clients)))
    finally:
        broker.stop()
    report = {"cells": CELLS, "seconds": round(time.monotonic() - started),
              "clients": [{"slug": c.slug, "name": c.name, "version": versions[c.slug], "note": c.note,
                           "results": results[c.slug]} for c in clients]}
    with open(args.results, "w") as f:
        json.dump(report, f, indent=2)
    if args.table:
        with open(args.table, "w") as f:
            f.write(table.markdown(report))
    failed = [(c, cell, r) for c in report["clients"] for cell, r in c["results"].items() if r["status"] == "fail"]
    for c, cell, r in failed:
        print(f"\nFAILED: {c['name']} {c['version']}: {cell}: {r['reason']}", file=sys.stderr)
        if r.get("stderr"):
            print("  client stderr (tail):\n    " + r["stderr"].replace("\n", "\n    "), file=sys.stderr)
    passed = sum(r["status"] == "pass" for c in report["clients"] for r in c["results"].values())
    print(f"{passed} passed, {len(failed)} failed")
    if failed:
        print(f"kmirror broker log: {broker.log_path}", file=sys.stderr)
        return 1
    shutil.rmtree(broker.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
