"""The compatibility client over kcat (Debian's), driving the kcat command. kcat has no admin
API (create) and cannot fetch committed offsets; its producer does not print offsets, and its
consumer in a group (-G) commits what it read when it leaves. Operations: see
../python/common.py."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from common import CONSUME_TIMEOUT_S, key, record, run, value  # noqa: E402


def kcat(*args, stdin=""):
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True,
                          timeout=CONSUME_TIMEOUT_S + 20)
    sys.stderr.write(done.stderr)
    if done.returncode != 0 or "ERROR" in done.stderr:
        raise RuntimeError(f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def produce(bootstrap, topic, codec, count, prefix):
    lines = "".join(f"{key(prefix, i)}|{value(prefix, i)}\n" for i in range(int(count)))
    kcat("-P", "-b", bootstrap, "-t", topic, "-K", "|", "-z", codec, "-X", "acks=all",
         "-X", "enable.idempotence=true", stdin=lines)
    return {"acked": [record(None, None, key(prefix, i), value(prefix, i)) for i in range(int(count))]}


def consume(bootstrap, topic, group, count):
    # -e: leave (committing) once every assigned partition is read to its end.
    out = kcat("-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", "-J", "-e", "-q",
               topic)
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {"records": [record(r["partition"], r["offset"], r["key"], r["payload"]) for r in records]}


def offsets(bootstrap, topic):
    meta = json.loads(kcat("-L", "-J", "-b", bootstrap, "-t", topic))
    out = {"earliest": {}, "latest": {}}
    for t in meta["topics"]:
        for p in t["partitions"]:
            for side, at in (("earliest", -2), ("latest", -1)):
                answer = kcat("-Q", "-b", bootstrap, "-t", f"{topic}:{p['partition']}:{at}")
                out[side][p["partition"]] = int(answer.split("offset ")[1].split()[0])
    return out


def version():
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    kcat_version = out.split("Version ")[1].split()[0]
    return f"{kcat_version} (librdkafka {out.split('librdkafka ')[1].split()[0]})"


run({"version": version, "produce": produce, "consume": consume, "offsets": offsets})
