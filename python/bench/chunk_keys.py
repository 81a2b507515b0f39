#!/usr/bin/env python3
"""What keying one prompt as chained chunks costs in Python (docs/engine-keys.md): one 32k-token
prompt in 256-token chunks (128 chained keys) through waitprep.chunk_keys.ChunkChain.extend, from a
list of ints (what a tokenizer returns) and from an array('I'), a session's next turn on that chain,
and the form chained keys replace (each chunk keyed over its whole prefix with waitprep.key.digest).
Target: under 10 ms for the 32k prompt. Median, p90 and min over the runs after warm-up.

    python3 python/bench/chunk_keys.py                 table
    python3 python/bench/chunk_keys.py --json          one JSON object on stdout, nothing else
    python3 python/bench/chunk_keys.py --runs 20       fewer runs (default 200; the baseline runs at most 3)

Imports the package from python/ beside this file unless ``waitprep`` is installed.
"""

import json
import os
import platform
import sys
import time
from array import array
from datetime import datetime, timezone

try:
    import waitprep  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waitprep import key as wpkey  # noqa: E402
from waitprep.chunk_keys import ChunkChain, Profile  # noqa: E402
from bench_env import cpu_model  # noqa: E402

PROMPT = 32 * 1024
CHUNK = 256
TURN = 600
OPTIONS = dict(runtime="lmcache/0.3", model="meta-llama/Llama-3.1-8B-Instruct", profile=Profile("bf16", "NHD", 1, 0),
               task="coding-agent", namespace="tenant-42", chunk_tokens=CHUNK)




def measure(fn, check, runs, warm=None):
    for _ in range(max(5, runs // 4) if warm is None else warm):
        check(fn())
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - t0) * 1e3)
        check(result)
    samples.sort()
    q = lambda p: samples[min(len(samples) - 1, int(p * len(samples)))]  # noqa: E731
    return {"median_ms": q(0.5), "p90_ms": q(0.9), "min_ms": samples[0]}


def main():
    args = sys.argv[1:]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 200
    if runs < 1:
        raise SystemExit("--runs: a positive integer")
    tokens = [(i * 2654435761) % 151936 for i in range(PROMPT)]
    packed = array("I", tokens)
    turn = [(i * 31) % 151936 for i in range(TURN)]
    reference = ChunkChain(**OPTIONS).extend(tokens)[-1].hex

    def same_chain(keys):
        if len(keys) != PROMPT // CHUNK or keys[-1].hex != reference:
            raise SystemExit("chunk-keys bench: wrong chain")

    results = [
        dict(case="32k prompt from a list of ints", chunks=PROMPT // CHUNK, **measure(lambda: ChunkChain(**OPTIONS).extend(tokens), same_chain, runs)),
        dict(case="32k prompt from an array('I')", chunks=PROMPT // CHUNK, **measure(lambda: ChunkChain(**OPTIONS).extend(packed), same_chain, runs)),
    ]
    session = ChunkChain(**OPTIONS)
    session.extend(tokens)

    def turn_check(keys):
        if not 2 <= len(keys) <= 3:
            raise SystemExit("chunk-keys bench: a turn completed the wrong number of chunks")

    results.append(dict(case="next turn of %d tokens on the 32k session" % TURN, chunks="2-3", **measure(lambda: session.extend(turn), turn_check, runs)))

    def whole_prefix():
        fields = {"source": {"snapshotKind": "kv-chunk", "runtime": OPTIONS["runtime"], "model": OPTIONS["model"], "adapter": "none",
                             "profile": "bf16", "positionPolicy": "absolute", "task": OPTIONS["task"], "namespace": OPTIONS["namespace"]},
                  "sourcePageGeneration": 0, "codec": "none", "codecConfig": "none", "representationVersion": 1}
        out = []
        for end in range(CHUNK, PROMPT + 1, CHUNK):
            fields["source"]["tokenLayout"] = tokens[:end]
            out.append(wpkey.digest(fields))
        return out

    def baseline_check(keys):
        if len(keys) != PROMPT // CHUNK:
            raise SystemExit("chunk-keys bench: wrong baseline count")

    baseline_runs = max(1, min(3, runs))
    results.append(dict(case="baseline: each chunk keyed over its whole prefix (key.digest)", chunks=PROMPT // CHUNK,
                        **measure(whole_prefix, baseline_check, baseline_runs, warm=0)))

    env = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_model(), "cores": os.cpu_count(),
           "python": platform.python_version(), "promptTokens": PROMPT, "chunkTokens": CHUNK, "runs": runs,
           "baselineRuns": baseline_runs, "targetMs": 10}
    if "--json" in args:
        print(json.dumps({"env": env, "results": results}))
        return
    print("chained chunk keys (Python) - %s, %s (%s cores), Python %s; %d runs (baseline %d), ms; target < 10 ms for the 32k prompt"
          % (env["date"], env["cpu"], env["cores"], env["python"], runs, baseline_runs))
    width = max(len(r["case"]) for r in results)
    print("%-*s  %6s  %9s  %9s  %9s" % (width, "case", "chunks", "median_ms", "p90_ms", "min_ms"))
    for r in results:
        print("%-*s  %6s  %9.3f  %9.3f  %9.3f" % (width, r["case"], r["chunks"], r["median_ms"], r["p90_ms"], r["min_ms"]))


if __name__ == "__main__":
    main()
