"""Prefix lookup from Python: one try_pin_prefix call against a loop of single ctypes pins.

    PYTHONPATH=python python3 python/bench/prefix_pins.py [--chunks 128] [--rounds 2000] [--json]

A chunked request of --chunks READY chunks is pinned and released --rounds times per case, each
case checking its own result (every chunk pinned, every pin released), in this order:

- ``loop``: ``Table.try_pin`` and ``Lease.close`` per chunk (2 x chunks ctypes calls, a Lease each);
- ``loop-raw``: ``wp_try_pin`` / ``wp_unpin`` through ctypes with no wrapper objects (the floor of
  a loop of single crossings);
- ``prefix``: ``Table.try_pin_prefix`` then ``LeaseRun.close`` (2 ctypes calls);
- ``prefix+leases``: the same, reading every chunk's Lease from the run (what a caller that wants
  each chunk's metadata pays).

Prints per-round microseconds (median of 5 batches) and each case's speed-up over ``loop``; the
issue's target is ``prefix`` at least 10x faster than ``loop``. Figures, not a test: nothing here
is asserted on a time. docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List

import waitprep
from waitprep._abi import WpLease
from bench_env import cpu_model  # noqa: E402




def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2000, help="rounds per batch (5 batches per case)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)

    name = "wp-bench-prefix-%d" % os.getpid()
    producer = waitprep.create_table(name, max(4 * args.chunks, 16))
    consumer = None
    try:
        consumer = waitprep.open_table(name)
        chunks = [hashlib.sha256(b"chunk-%d" % i).digest() for i in range(args.chunks)]
        for d in chunks:
            producer.publish(producer.reserve(d), 4096, 0, 0, 1, 1)
        lib, handle = consumer.library, consumer._handle
        wp_try_pin, wp_unpin = lib.wp_try_pin, lib.wp_unpin
        byref = ctypes.byref

        def loop() -> int:
            leases = [consumer.try_pin(d) for d in chunks]
            return sum(lease.close() for lease in leases)  # type: ignore[union-attr]

        def loop_raw() -> int:
            raws = []
            for d in chunks:
                raw = WpLease()
                if wp_try_pin(handle, d, None, byref(raw)) == 0:
                    raws.append(raw)
            return sum(wp_unpin(handle, byref(raw)) == 0 for raw in raws)

        def prefix() -> int:
            run = consumer.try_pin_prefix(chunks)
            return run.close() if len(run) == args.chunks else -1

        def prefix_leases() -> int:
            run = consumer.try_pin_prefix(chunks)
            if sum(1 for lease in run if lease.meta.size_bytes == 4096) != args.chunks:
                return -1
            return run.close()

        cases: Dict[str, Callable[[], int]] = {"loop": loop, "loop-raw": loop_raw, "prefix": prefix, "prefix+leases": prefix_leases}
        results = []
        for case, fn in cases.items():
            for _ in range(max(args.rounds // 10, 1)):
                fn()
            batches = []
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(args.rounds):
                    released = fn()
                    if released != args.chunks:
                        raise SystemExit("%s: released %d pins of %d chunks" % (case, released, args.chunks))
                batches.append((time.perf_counter() - start) / args.rounds * 1e6)
            results.append({"case": case, "chunks": args.chunks, "us_per_round": round(statistics.median(batches), 2)})
        for r in results:
            r["speedup_vs_loop"] = round(results[0]["us_per_round"] / r["us_per_round"], 1)
        leaked = sum(consumer.client_pins(s) for s in range(consumer.capacity))
        if leaked:
            raise SystemExit("%d pins left held after the bench" % leaked)
    finally:
        if consumer is not None:
            consumer.close()
        producer.close()
        waitprep.unlink_table(name)

    env = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "library": lib._name,
    }
    if args.json:
        print(json.dumps({"env": env, "results": results}))
        return 0
    print("prefix pins from Python: %(date)s, %(cpu)s, %(cores)s cores, Python %(python)s" % env)
    print("%-14s %7s %14s %9s" % ("case", "chunks", "us per round", "vs loop"))
    for r in results:
        print("%-14s %7d %14.2f %8.1fx" % (r["case"], r["chunks"], r["us_per_round"], r["speedup_vs_loop"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
