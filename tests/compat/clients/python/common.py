"""What the Python compatibility clients share: the command line every client of tests/compat
takes, the records a produce writes, and the one JSON line each operation prints.

    create BOOTSTRAP TOPIC PARTITIONS
    produce BOOTSTRAP TOPIC CODEC COUNT PREFIX
    consume BOOTSTRAP TOPIC GROUP COUNT
    committed BOOTSTRAP TOPIC GROUP
    offsets BOOTSTRAP TOPIC
    version
"""
import json
import sys
import traceback

ARITY = {"create": 1, "produce": 3, "consume": 2, "committed": 1, "offsets": 0}
# A consume prints what it read by then.
CONSUME_TIMEOUT_S = 40
# Values compress well, so that clients that skip a codec when it does not pay still use it.
PADDING = "x" * 100


def key(prefix, i):
    return f"{prefix}-{i}"


def value(prefix, i):
    return f"value {i} of {prefix} " + PADDING


def record(partition, offset, k, v):
    """A record as printed; keys and values are bytes or None on the wire."""
    text = lambda b: b.decode() if isinstance(b, bytes) else b
    return {"partition": partition, "offset": offset, "key": text(k), "value": text(v)}


def command(argv):
    """(op, bootstrap, topic, args) from the command line, or exits 2."""
    if len(argv) < 3 or argv[0] not in ARITY or len(argv) != 3 + ARITY[argv[0]]:
        sys.exit(f"usage: OP BOOTSTRAP TOPIC ARGS..., got {argv}")
    return argv[0], argv[1], argv[2], argv[3:]


def run(operations):
    """Runs operations[op](bootstrap, topic, *args) and prints its answer, or the error."""
    if sys.argv[1:] == ["version"]:
        print(json.dumps({"version": operations["version"]()}))
        return
    op, bootstrap, topic, args = command(sys.argv[1:])
    try:
        print(json.dumps(operations[op](bootstrap, topic, *args)), flush=True)
    except Exception as e:  # the runner shows the error and the stderr trace
        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)
