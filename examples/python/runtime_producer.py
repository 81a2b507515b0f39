"""A model runtime's side of a waitprep lease table, in Python: the producer.

    pip install ./python    # or PYTHONPATH=python from a checkout
    WAITPREP_LIBRARY=/path/to/build/Release/libwaitprep.so \\
        python3 examples/python/runtime_producer.py --table demo [--keys JSON] [--device-write JSON]

Creates the table (``--capacity``, default 64; ``--open`` opens an existing one
instead) as its single producer, computes each key's digest with
``waitprep.key_digest`` (the same bytes as Node's ``artifactKey(fields).digest``),
reserves a slot, "validates" the prepared artifact, and publishes its metadata.
Then it prints one JSON line::

    {"event": "published", "table": "demo", "pid": 123,
     "keys": [{"index": 0, "digest": "<64 hex>", "slot": 5, "generation": "1",
               "meta": {"sizeBytes": "...", "location": "...", "checksum": "...",
                        "codecId": 1, "representationVersion": 1}}, ...],
     "deviceWrites": [{"index": 0, "device": "GPU-...", "arena": "3", "arenaGeneration": "7",
                       "writeSeq": "1", "result": "recorded"}]}

(u64 values are decimal strings: a JSON number would lose precision above 2^53.)
and then reads commands, one a line, from stdin:

    evict   try_evict every key; prints {"event": "evict", "results": ["evicted"|"pinned"|"absent", ...]}
            (index-aligned with "keys")
    reap    reap_dead_clients; prints {"event": "reap", "reaped": N}
    exit    closes the table (releasing the producer role) and exits 0; so does end of input.

--keys is a JSON list of key-field objects (the shape docs/key-encoding.md and
waitprep.key describe; sourcePageGeneration / representationVersion may be
decimal strings). --device-write is a JSON object, or a list of them,
{"key": <index, default 0>, "device": "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
"arena": N, "arenaGeneration": N, "writeSeq": N}: the runtime records that it
finished writing that artifact into that device arena. --lib overrides WAITPREP_LIBRARY.
"""

import argparse
import hashlib
import json
import os
import sys

import waitprep

#: Used when --keys is not given: three pages of one prompt.
BUILTIN_KEYS = [
    {
        "source": {
            "snapshotKind": "kv-page",
            "runtime": "python-runtime",
            "model": "tiny-model",
            "adapter": "none",
            "profile": "default",
            "positionPolicy": "absolute",
            "task": "chat",
            "namespace": "tenant-0",
            "tokenLayout": [101, 2023, 2003, page],
        },
        "sourcePageGeneration": 0,
        "codec": "identity",
        "codecConfig": "v0",
        "representationVersion": 1,
    }
    for page in range(3)
]


def prepare(index, fields, digest):
    """Stands in for the runtime's real work: encode, write and checksum the artifact's bytes.

    Returns the metadata to publish. Here it is made up but deterministic, so a
    reader can check it: a size, a 64-bit location (above 2^53 on purpose), a
    checksum over stand-in bytes, a codec id and the key's representation version.
    """
    payload = b"artifact:" + digest
    return {
        "size_bytes": 65536 * (index + 1),
        "location": 0x7F00_0000_0000_0000 + index * 0x10_0000,
        "checksum": int.from_bytes(hashlib.sha256(payload).digest()[:8], "little"),
        "codec_id": 1,
        "representation_version": fields["representationVersion"],
    }


def meta_json(meta):
    return {
        "sizeBytes": str(meta["size_bytes"]),
        "location": str(meta["location"]),
        "checksum": str(meta["checksum"]),
        "codecId": meta["codec_id"],
        "representationVersion": meta["representation_version"],
    }


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default="waitprep-python-demo", help="table name (default %(default)s)")
    parser.add_argument("--lib", default=None, help="path of libwaitprep.so (default: $WAITPREP_LIBRARY, then beside the Node package)")
    parser.add_argument("--capacity", type=int, default=64, help="slots of the table to create (default %(default)s)")
    parser.add_argument("--open", action="store_true", help="open an existing table instead of creating one")
    parser.add_argument("--keys", default=None, help="JSON list of key-field objects (default: a built-in set)")
    parser.add_argument("--device-write", default=None, help="JSON object or list: device writes to record")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    keys = [waitprep.key.from_json(k) for k in json.loads(args.keys)] if args.keys is not None else BUILTIN_KEYS
    writes = json.loads(args.device_write) if args.device_write is not None else []
    if isinstance(writes, dict):
        writes = [writes]

    digests = [waitprep.key_digest(fields) for fields in keys]  # ERR_INVALID_KEY names a bad field
    if args.open:
        table = waitprep.open_table(args.table, "producer", library=args.lib)
    else:
        table = waitprep.create_table(args.table, args.capacity, "producer", library=args.lib)
    with table:
        published = []
        for index, (fields, digest) in enumerate(zip(keys, digests)):
            reservation = table.reserve(digest)
            try:
                meta = prepare(index, fields, digest)
                # The real runtime validates here, before publishing: the artifact's bytes
                # (checksum over what was written) and its geometry (page size, layout, dtype
                # for this codec and representation version). A published artifact is taken
                # as ready by every consumer; on any failure it abandons the reservation.
            except BaseException:
                table.abandon(reservation)
                raise
            table.publish(reservation, **meta)
            slot, generation = reservation
            published.append(
                {"index": index, "digest": digest.hex(), "slot": slot, "generation": str(generation), "meta": meta_json(meta)}
            )

        recorded = []
        for write in writes:
            index = write.get("key", 0)
            result = table.record_device_write(
                digests[index],
                write["device"],
                int(write["arena"]),
                int(write["arenaGeneration"]),
                int(write.get("writeSeq", 1)),
            )
            recorded.append(
                {
                    "index": index,
                    "device": write["device"],
                    "arena": str(write["arena"]),
                    "arenaGeneration": str(write["arenaGeneration"]),
                    "writeSeq": str(write.get("writeSeq", 1)),
                    "result": result,
                }
            )

        emit({"event": "published", "table": args.table, "pid": os.getpid(), "keys": published, "deviceWrites": recorded})

        for line in sys.stdin:
            command = line.strip()
            if command == "evict":
                emit({"event": "evict", "results": [table.try_evict(d) for d in digests]})
            elif command == "reap":
                emit({"event": "reap", "reaped": table.reap_dead_clients()})
            elif command == "exit":
                break
            elif command:
                emit({"event": "error", "message": "unknown command %r (evict, reap, exit)" % command})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
