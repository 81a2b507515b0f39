"""An engine's calls into the table from Python, each beside its floor.

    PYTHONPATH=python python3 python/bench/engine_calls.py [--only peek,runs,read,overhead]
        [--rounds N] [--blocks 2048] [--peeks 128] [--record-mib 64] [--json]

Four groups, each case checking its own result (every digest found, every pin released, every
byte read), timed as the median of 7 batches in the thread's CPU time:

- ``peek``: 128 READY digests asked at once (SGLang's ``batch_exists``, LMCache's
  ``batched_contains``): a loop of ``Table.peek``, then ``Table.peek_many`` and
  ``Table.peek_prefix`` (one call). Floors: the bare ctypes call of ``wp_peek_many`` with its
  buffers made beforehand, and the table's own cost (128 peeks inside one C call).
- ``runs``: vLLM's ``prepare_load`` + ``complete_load`` of 2,048 blocks, the keys completed in
  another order: one ``Lease`` per block kept per key (what a caller of ``try_pin_prefix`` had to
  do), against a run released by index (``LeaseRun.release``). The keys' digests are looked up in
  a dict (an adapter computes them at ``lookup``). Floor: ``wp_try_pin_prefix`` + ``wp_unpin_many``
  through bare ctypes.
- ``read``: a 64 MiB arena record read with its checksum off: ``read_arena_record`` (a fresh
  buffer per read) against ``read_arena_record_into`` a caller's buffer (a ``bytearray``, a numpy
  array where numpy imports, an anonymous ``mmap``), each as GB/s beside this run's memcpy
  between two existing buffers; and the checksum's own rate.
- ``overhead``: ``try_pin_exact`` + ``close`` from a token (str and parsed) against bare ctypes;
  ``try_pin_prefix`` + ``close`` of 2,048 chunks from packed bytes and from a list against bare
  ctypes.

Figures, not a test: nothing here is asserted on a time. docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import hashlib
import json
import mmap
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import waitprep
from waitprep import arena
from waitprep._abi import WpLease
from bench_env import cpu_model  # noqa: E402

GROUPS = ("peek", "runs", "read", "overhead")




def timed(fn: Callable[[], Any], check: Callable[[Any], bool], rounds: int, what: str, batches: int = 7, clock: Callable[[], int] = time.thread_time_ns) -> float:
    """Median microseconds of CPU time per call of ``fn`` over ``batches`` batches of ``rounds`` calls; every
    result must pass ``check`` (else the bench stops: a figure of wrong work is no figure)."""
    for _ in range(max(rounds // 10, 1)):
        if not check(fn()):
            raise SystemExit("%s: a warm-up call returned a wrong result" % what)
    medians = []
    for _ in range(batches):
        # The thread's CPU time (user and system), not the wall clock: on a shared host the time
        # spent waiting for a core would swamp the differences measured. A call that works on
        # other threads too (a large read in parts) is timed on the wall clock instead.
        start = clock()
        for _ in range(rounds):
            result = fn()
            if not check(result):
                raise SystemExit("%s: wrong result %r" % (what, result))
        medians.append((clock() - start) / rounds / 1e3)
    return statistics.median(medians)


def digests_of(n: int, salt: bytes) -> List[bytes]:
    return [hashlib.sha256(salt + b"-%d" % i).digest() for i in range(n)]


def row(group: str, case: str, us: float, floor_us: Optional[float], **extra: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {"group": group, "case": case, "us": round(us, 2)}
    if floor_us is not None:
        out["floor_us"] = round(floor_us, 2)
        out["x_floor"] = round(us / floor_us, 2) if floor_us > 0 else None
    out.update(extra)
    return out


def bench_peek(producer: waitprep.Table, consumer: waitprep.Table, n: int, rounds: int) -> List[Dict[str, Any]]:
    digests = digests_of(n, b"peek")
    for d in digests:
        producer.publish(producer.reserve(d), 4096, 0, 0, 1, 1)
    packed = b"".join(digests)
    results = []
    loop = timed(lambda: [consumer.peek(d) for d in digests], lambda r: r.count("ready") == n, rounds, "peek loop")
    results.append(row("peek", "peek loop (%d calls)" % n, loop, None))
    if hasattr(consumer, "peek_many"):
        lib, handle = consumer.library, consumer._handle
        statuses = ctypes.create_string_buffer(n)
        raw = timed(lambda: lib.wp_peek_many(handle, packed, n, statuses), lambda r: r == n, rounds * 4, "wp_peek_many raw")
        repeat = 64
        big = packed * repeat
        big_statuses = ctypes.create_string_buffer(n * repeat)
        inside = timed(lambda: lib.wp_peek_many(handle, big, n * repeat, big_statuses), lambda r: r == n * repeat, max(rounds // 16, 1), "wp_peek_many x64") / repeat
        many = timed(lambda: consumer.peek_many(packed), lambda r: r.count("ready") == n, rounds, "peek_many")
        many_list = timed(lambda: consumer.peek_many(digests), lambda r: r.count("ready") == n, rounds, "peek_many list")
        prefix = timed(lambda: consumer.peek_prefix(packed), lambda r: r == n, rounds * 4, "peek_prefix")
        results.append(row("peek", "wp_peek_many, bare ctypes", raw, inside, floor="the table's own: %d peeks inside one C call" % n))
        results.append(row("peek", "peek_many(packed)", many, raw))
        results.append(row("peek", "peek_many(list)", many_list, raw))
        results.append(row("peek", "peek_prefix(packed)", prefix, raw))
    return results


def bench_runs(producer: waitprep.Table, consumer: waitprep.Table, n: int, rounds: int) -> List[Dict[str, Any]]:
    # vLLM's OffloadKey: the block hash, then the KV group's index as 4 big-endian bytes.
    keys = [hashlib.sha256(b"block-%d" % i).digest() + (0).to_bytes(4, "big") for i in range(n)]
    digest_of = dict(zip(keys, digests_of(n, b"block")))
    for d in digest_of.values():
        producer.publish(producer.reserve(d), 4096, 0, 0, 1, 1)
    completion = list(keys)
    random.Random(7).shuffle(completion)  # complete_load gets the keys in any order
    results = []

    def per_key_leases() -> int:
        # prepare_load: one Lease per block, kept on the key's stack (two requests may load a block).
        run = consumer.try_pin_prefix([digest_of[k] for k in keys])
        stacks: Dict[Any, List[Any]] = {}
        for key, lease in zip(keys, run):
            stacks.setdefault(key, []).append(lease)
        # complete_load: each key's lease closed.
        return sum(stacks[k].pop().close() for k in completion)

    results.append(row("runs", "prepare+complete, a Lease per block", timed(per_key_leases, lambda r: r == n, rounds, "per-key leases"), None))

    lib, handle = consumer.library, consumer._handle
    packed = b"".join(digest_of[k] for k in keys)
    raw_leases = (WpLease * n)()

    def raw() -> int:
        pinned = lib.wp_try_pin_prefix(handle, packed, n, None, raw_leases)
        return lib.wp_unpin_many(handle, raw_leases, pinned)

    floor = timed(raw, lambda r: r == n, rounds * 2, "raw prefix")
    results.append(row("runs", "wp_try_pin_prefix + wp_unpin_many, bare ctypes", floor, None, floor="C's prefix pin and unpin, 2 crossings"))
    if hasattr(waitprep.LeaseRun, "release"):

        def indexed() -> int:
            # prepare_load: one prefix call; the run keeps the pins, the adapter each key's index.
            run = consumer.try_pin_prefix(b"".join(map(digest_of.__getitem__, keys)))
            at = dict(zip(keys, range(len(run))))
            # complete_load: the keys' indexes released in one call.
            return run.release(array.array("I", map(at.__getitem__, completion)))

        results.append(row("runs", "prepare+complete, run released by index", timed(indexed, lambda r: r == n, rounds, "indexed run"), floor))
    return results


def bench_read(root: str, mib: int, rounds: int) -> List[Dict[str, Any]]:
    size = mib << 20
    payload = os.urandom(1 << 20) * mib
    table = "wp-bench-read-%d" % os.getpid()
    digest = hashlib.sha256(b"record").digest()
    record, header = arena.encode_arena_record(digest, payload, token_count=0, format="raw")
    os.makedirs(arena.arena_directory(table, root))
    with open(arena.arena_path(table, 0, root), "wb") as f:
        f.write(record)
    del record
    meta = waitprep.LeaseMeta(size, arena.arena_location(0, 0), header.checksum, 1, 1)
    gbps = lambda us: size / (us * 1e-6) / 1e9  # noqa: E731

    src = bytearray(payload)
    dst = bytearray(size)
    src_address = ctypes.addressof((ctypes.c_char * size).from_buffer(src))
    dst_address = ctypes.addressof((ctypes.c_char * size).from_buffer(dst))
    # Wall time for this group: a large read_arena_record_into reads in parts on several threads.
    wall = time.perf_counter_ns
    memcpy = timed(lambda: ctypes.memmove(dst_address, src_address, size), lambda r: True, rounds, "memcpy", clock=wall)
    del src
    results = [row("read", "memcpy %d MiB between existing buffers" % mib, memcpy, None, gbps=round(gbps(memcpy), 2))]
    fresh = timed(lambda: arena.read_arena_record(table, digest, meta, root=root, verify_checksum=False), lambda r: len(r.payload) == size, rounds, "fresh", clock=wall)
    results.append(row("read", "read_arena_record, checksum off (fresh buffer)", fresh, memcpy, gbps=round(gbps(fresh), 2)))
    if hasattr(arena, "read_arena_record_into"):
        buffers: Dict[str, Any] = {"bytearray": dst, "mmap": mmap.mmap(-1, size)}
        try:
            import numpy  # type: ignore[import-not-found]

            buffers["numpy"] = numpy.zeros(size, dtype=numpy.uint8)
        except ImportError:
            pass
        def into(buf: Any, what: str) -> float:
            return timed(lambda: arena.read_arena_record_into(table, digest, meta, buf, root=root, verify_checksum=False),
                         lambda r: not isinstance(r, arena.Mismatch) and r.payload_length == size, rounds, what, clock=wall)

        for kind, buf in buffers.items():
            us = into(buf, "into " + kind)
            results.append(row("read", "read_arena_record_into(%s), checksum off" % kind, us, memcpy, gbps=round(gbps(us), 2), of_memcpy=round(memcpy / us, 2)))
        parts = getattr(sys.modules.get("waitprep._arena_into"), "PARALLEL_READ_BYTES", None)
        if parts is not None:
            # The same read on the caller's thread alone: what the parts on other cores add.
            sys.modules["waitprep._arena_into"].PARALLEL_READ_BYTES = 1 << 62  # type: ignore[attr-defined]
            try:
                us = into(dst, "into bytearray, one thread")
            finally:
                sys.modules["waitprep._arena_into"].PARALLEL_READ_BYTES = parts  # type: ignore[attr-defined]
            results.append(row("read", "read_arena_record_into(bytearray), one thread", us, memcpy, gbps=round(gbps(us), 2), of_memcpy=round(memcpy / us, 2)))
        if memoryview(dst)[:size] != payload:
            raise SystemExit("read_arena_record_into: the bytes read differ from the record's")
    sha = timed(lambda: arena.record_checksum(payload), lambda r: r == header.checksum, max(rounds // 2, 1), "sha256")
    results.append(row("read", "the checksum alone (SHA-256 of the payload)", sha, None, gbps=round(gbps(sha), 2)))
    shutil.rmtree(arena.arena_directory(table, root))
    return results


def bench_overhead(producer: waitprep.Table, consumer: waitprep.Table, n: int, rounds: int) -> List[Dict[str, Any]]:
    results = []
    digest = hashlib.sha256(b"exact").digest()
    producer.publish(producer.reserve(digest), 4096, 0, 0, 1, 1)
    held = producer.try_pin(digest)
    assert isinstance(held, waitprep.Lease)
    token = held.handoff_token()
    parsed = waitprep.parse_handoff_token(token)
    lib, handle = consumer.library, consumer._handle
    out = WpLease()
    byref = ctypes.byref

    def raw_exact() -> int:
        status = lib.wp_try_pin_exact(handle, parsed.slot, parsed.generation, parsed.digest, None, byref(out))
        return status == 0 and lib.wp_unpin(handle, byref(out)) == 0

    floor = timed(raw_exact, bool, rounds * 20, "raw exact")
    results.append(row("overhead", "wp_try_pin_exact + wp_unpin, bare ctypes", floor, None))
    for kind, tok in (("str", token), ("parsed", parsed)):
        us = timed(lambda: consumer.try_pin_exact(tok).close(), bool, rounds * 20, "exact " + kind)  # type: ignore[union-attr]
        results.append(row("overhead", "try_pin_exact(%s token) + close" % kind, us, floor))
    held.close()

    chunks = digests_of(n, b"chunk")
    for d in chunks:
        producer.publish(producer.reserve(d), 4096, 0, 0, 1, 1)
    packed = b"".join(chunks)
    raw_leases = (WpLease * n)()

    def raw_prefix() -> int:
        pinned = lib.wp_try_pin_prefix(handle, packed, n, None, raw_leases)
        return lib.wp_unpin_many(handle, raw_leases, pinned)

    floor = timed(raw_prefix, lambda r: r == n, rounds, "raw prefix")
    results.append(row("overhead", "wp_try_pin_prefix + wp_unpin_many (%d), bare ctypes" % n, floor, None))
    for kind, arg in (("packed", packed), ("list", chunks)):
        us = timed(lambda: consumer.try_pin_prefix(arg).close(), lambda r: r == n, rounds, "prefix " + kind)
        results.append(row("overhead", "try_pin_prefix(%s, %d) + close" % (kind, n), us, floor))
    return results


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(GROUPS), help="groups to run, comma-separated: %s" % ", ".join(GROUPS))
    parser.add_argument("--rounds", type=int, default=200, help="calls per batch (7 batches per case; scaled per case)")
    parser.add_argument("--peeks", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=2048)
    parser.add_argument("--record-mib", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    groups = [g for g in args.only.split(",") if g]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        parser.error("unknown group(s): %s" % ", ".join(sorted(unknown)))

    results: List[Dict[str, Any]] = []
    name = "wp-bench-engine-%d" % os.getpid()
    producer = waitprep.create_table(name, 16384)
    consumer = None
    try:
        consumer = waitprep.open_table(name)
        if "peek" in groups:
            results += bench_peek(producer, consumer, args.peeks, args.rounds * 10)
        if "runs" in groups:
            results += bench_runs(producer, consumer, args.blocks, args.rounds)
        if "overhead" in groups:
            results += bench_overhead(producer, consumer, args.blocks, args.rounds)
        leaked = sum(consumer.client_pins(s) for s in range(consumer.capacity))
        if leaked:
            raise SystemExit("%d pins left held after the bench" % leaked)
        library = consumer.library._name
    finally:
        if consumer is not None:
            consumer.close()
        producer.close()
        waitprep.unlink_table(name)
    if "read" in groups:
        root = tempfile.mkdtemp(prefix="wp-bench-read-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            results += bench_read(root, args.record_mib, max(args.rounds // 20, 3))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    env = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(), "library": library}
    if args.json:
        print(json.dumps({"env": env, "results": results}))
        return 0
    print("engine calls from Python: %(date)s, %(cpu)s, %(cores)s cores, Python %(python)s" % env)
    print("%-9s %-56s %12s %12s %8s %s" % ("group", "case", "us", "floor us", "x floor", "notes"))
    for r in results:
        notes = ", ".join("%s %s" % (k, r[k]) for k in ("gbps", "of_memcpy", "floor") if k in r)
        floor = "%.2f" % r["floor_us"] if "floor_us" in r else "-"
        ratio = "%.2f" % r["x_floor"] if r.get("x_floor") is not None else "-"
        print("%-9s %-56s %12.2f %12s %8s %s" % (r["group"], r["case"], r["us"], floor, ratio, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
