"""Device readiness with real copies (docs/device-readiness.md), through the Python package.

A :class:`Producer` is the table's single producer: it publishes artifacts, copies one into a
device arena on its stream, and records the device write only after the copy completed, either
way the docs give:

- ``host-function``: a host function enqueued behind the copy makes the record (CUDA runs it once
  everything before it on the stream finished);
- ``event``: an event recorded behind the copy, synchronized by the producer's own thread, which
  then makes the record.

A third way, ``early``, records when the copy is enqueued: the mistake the docs warn about. The
check runs it as a control, to show that its byte comparison sees the stale bytes such a record
lets a consumer read; no property ever expects a producer to work that way.

Every producer call on the table handle holds one lock: host functions run on the driver's
callback thread while the producer's own thread reserves, publishes and records on the same handle.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

WAYS = ("host-function", "event")


@dataclass
class Arena:
    """A request-owned region of device memory: its id, its generation (bumped on every reuse) and
    what it was last given: ``(generation, artifact index)`` as one tuple, so a reader sees both
    from one write."""

    id: int
    buf: Any
    generation: int = 0
    state: Tuple[int, Optional[int]] = (0, None)


@dataclass
class Artifact:
    """A published artifact: its digest, its bytes in pinned host memory (the copy's source) and a
    reference copy on the device that consumers compare an arena with."""

    digest: bytes
    host: Any
    reference: Any


class Producer:
    """The table's single producer, copying on ``stream`` and recording on ``table``."""

    def __init__(self, table: Any, stream: Any, device_uuid: str) -> None:
        self.table = table
        self.stream = stream
        self.uuid = device_uuid
        self.lock = threading.Lock()
        self.write_seq = 0
        self.records: Counter = Counter()

    def publish(self, digest: bytes, size: int, checksum: int) -> None:
        from waitprep import arena

        with self.lock:
            reservation = self.table.reserve(digest)
            self.table.publish(reservation, size, arena.arena_location(0, 0), checksum, 0, 1)

    def reuse(self, target: Arena, artifact: Optional[int]) -> int:
        """Before ``target`` is overwritten: its generation goes up, so no record naming an older
        one matches a consumer asking with the new one. Returns the new generation."""
        target.generation += 1
        target.state = (target.generation, artifact)
        return target.generation

    def _record(self, digest: bytes, arena_id: int, generation: int, seq: int) -> None:
        with self.lock:
            self.records[self.table.record_device_write(digest, self.uuid, arena_id, generation, seq)] += 1

    def write(self, artifact: Artifact, target: Arena, way: str, enqueued: Optional[Callable[[], None]] = None) -> None:
        """Copies ``artifact`` into ``target`` (at its current generation) and records the write
        the given ``way``. ``host-function`` returns once both are enqueued; ``event`` once the
        record is made; ``enqueued`` is called as soon as the copy is on the stream."""
        self.write_seq += 1
        fields = (artifact.digest, target.id, target.generation, self.write_seq)
        n = artifact.host.numel()
        if way == "early":
            self._record(*fields)
            self.stream.copy(target.buf[:n], artifact.host)
            if enqueued:
                enqueued()
        elif way == "host-function":
            self.stream.copy(target.buf[:n], artifact.host)
            self.stream.host_function(lambda: self._record(*fields))
            if enqueued:
                enqueued()
        elif way == "event":
            self.stream.copy(target.buf[:n], artifact.host)
            copied = self.stream.event()
            if enqueued:
                enqueued()
            copied.synchronize()
            self._record(*fields)
        else:
            raise ValueError(f"way {way!r}: expected one of {WAYS + ('early',)}")


class Consumer:
    """Pins with device targets and reads the arena a hit names (on a stream of its own on CUDA)."""

    def __init__(self, table: Any, device_uuid: str, compare_stream: Any = None) -> None:
        self.table = table
        self.uuid = device_uuid
        self.compare_stream = compare_stream

    def same_bytes(self, target: Arena, artifact: Artifact) -> bool:
        import torch

        n = artifact.reference.numel()
        if self.compare_stream is None:
            return bool(torch.equal(target.buf[:n], artifact.reference))
        with torch.cuda.stream(self.compare_stream):
            return bool(torch.equal(target.buf[:n], artifact.reference))

    def pin(self, artifact: Artifact, arena_id: int, generation: int, device: Optional[str] = None) -> Any:
        return self.table.try_pin(artifact.digest, device=device or self.uuid, arena=arena_id, arena_generation=generation)

    def read(self, artifact: Artifact, target: Arena, generation: int) -> Tuple[str, Optional[bool]]:
        """Pins ``artifact`` for ``target`` at ``generation``: ``("hit", whether the arena holds the
        artifact's bytes)`` or ``(miss reason, None)``. The pin is held while the bytes are read."""
        got = self.pin(artifact, target.id, generation)
        if isinstance(got, str):
            return got, None
        try:
            return "hit", self.same_bytes(target, artifact)
        finally:
            got.close()


def other_uuid(uuid: str) -> str:
    """The same UUID with its last hex digit changed: another device."""
    last = uuid[-1]
    return uuid[:-1] + ("0" if last != "0" else "1")


class Setup:
    """A table (producer and consumer handles), a stream, artifacts and arenas, on ``device``."""

    def __init__(self, name: str, device: str, device_uuid: str, artifact_bytes: int, artifacts: int, arenas: int, seed: int) -> None:
        import torch
        import waitprep
        from waitprep import arena as arena_records

        from .streams import CpuStream, CudaStream

        self.name = name
        self.device = device
        self.cuda = device.startswith("cuda")
        self.table = waitprep.create_table(name, max(64, 4 * artifacts))
        self.consumer_table = waitprep.open_table(name)
        self.stream = CudaStream(device) if self.cuda else CpuStream()
        self.producer = Producer(self.table, self.stream, device_uuid)
        self.consumer = Consumer(self.consumer_table, device_uuid, torch.cuda.Stream(device=device) if self.cuda else None)
        generator = torch.Generator().manual_seed(seed)
        self.artifacts: List[Artifact] = []
        for i in range(artifacts):
            host = torch.randint(0, 256, (artifact_bytes,), dtype=torch.uint8, generator=generator)
            if self.cuda:
                host = host.pin_memory()
            payload = host.numpy().tobytes()
            digest = waitprep.key_digest(_fields(seed, i))
            self.producer.publish(digest, len(payload), arena_records.record_checksum(payload))
            self.artifacts.append(Artifact(digest, host, host.to(device)))
        self.arenas = [Arena(1000 + i, torch.zeros(artifact_bytes, dtype=torch.uint8, device=device)) for i in range(arenas)]
        if self.cuda:
            torch.cuda.synchronize(device)

    def close(self) -> None:
        import waitprep

        self.stream.close()
        self.consumer_table.close()
        self.table.close()
        waitprep.unlink_table(self.name)


def _fields(seed: int, i: int) -> Dict[str, Any]:
    return {
        "source": {
            "snapshotKind": "kv-cache", "runtime": "gpucheck", "model": "device-readiness", "adapter": "none",
            "profile": "bytes", "positionPolicy": "absolute", "task": f"seed-{seed}", "namespace": "gpucheck",
            "tokenLayout": [i],
        },
        "sourcePageGeneration": 0, "codec": "none", "codecConfig": "none", "representationVersion": 1,
    }


def _outcome(got: Any) -> str:
    """A pin's outcome as a word: ``hit`` (the lease is closed at once) or the miss reason."""
    if isinstance(got, str):
        return got
    got.close()
    return "hit"


def check_record_after_copy(setup: Setup, way: str, artifact: int, arena: int) -> Dict[str, Any]:
    """One write the given way, then: the consumer asking for that target hits and reads the
    artifact's bytes; another device, another arena, and the arena's next generation miss."""
    a, target = setup.artifacts[artifact], setup.arenas[arena]
    generation = setup.producer.reuse(target, artifact)
    setup.producer.write(a, target, way)
    setup.stream.synchronize()
    outcome, same = setup.consumer.read(a, target, generation)
    other_device = _outcome(setup.consumer.pin(a, target.id, generation, device=other_uuid(setup.consumer.uuid)))
    other_arena = _outcome(setup.consumer.pin(a, target.id + 7, generation))
    newer = setup.producer.reuse(target, None)
    reused = _outcome(setup.consumer.pin(a, target.id, newer))
    return {"way": way, "hit": outcome, "bytes_equal": same, "other_device": other_device, "other_arena": other_arena, "reused_arena": reused}


def check_incomplete_write(setup: Setup, way: str, artifact: int, arena: int) -> Dict[str, Any]:
    """A write held incomplete on purpose (the stream waits behind a hold): a consumer pinning then
    must miss; once released and done, it hits and reads the artifact's bytes. With ``way`` early
    (the control), the early record lets the consumer hit while the arena still holds old bytes."""
    a, target = setup.artifacts[artifact], setup.arenas[arena]
    generation = setup.producer.reuse(target, artifact)
    release = setup.stream.hold()
    enqueued = threading.Event()
    writer = threading.Thread(target=setup.producer.write, args=(a, target, way, enqueued.set), name="producer")
    writer.start()
    try:
        if not enqueued.wait(30):
            raise RuntimeError("the producer did not enqueue its copy within 30 s")
        busy_before = setup.stream.busy()
        during, during_same = setup.consumer.read(a, target, generation)
        busy_after = setup.stream.busy()
    finally:
        release()
        writer.join(60)
    setup.stream.synchronize()
    after, after_same = setup.consumer.read(a, target, generation)
    return {
        "way": way,
        "copy_incomplete_while_pinning": busy_before and busy_after,
        "during": during,
        "during_bytes_equal": during_same,
        "after": after,
        "after_bytes_equal": after_same,
    }


def stress(setup: Setup, rounds: int, ways: Tuple[str, ...], seed: int, in_flight: int = 2) -> Dict[str, Any]:
    """The producer reuses arenas round after round (each round: bump the arena's generation, copy
    an artifact into it, record the write ``ways[round % len(ways)]``), while a consumer thread
    pins, with the generation each arena holds at that moment, both the artifact it was given and
    another one, and reads the arena on every hit.

    A hit is *conclusive* when the arena's generation is unchanged after the read: no reuse can
    have started, so the arena must hold that artifact's bytes; a conclusive hit with other bytes
    is a stale hit. A hit for the other artifact is a wrong-artifact hit (each arena generation is
    written once, with one artifact). A hit whose arena was reused during the read proves
    nothing either way and is counted apart.
    """
    rng = random.Random(seed)
    done = threading.Event()
    counts: Counter = Counter()
    misses: Counter = Counter()
    failures: List[BaseException] = []
    pending: Deque[Any] = deque()

    def produce() -> None:
        try:
            for r in range(rounds):
                target = setup.arenas[r % len(setup.arenas)]
                artifact = rng.randrange(len(setup.artifacts))
                setup.producer.reuse(target, artifact)
                setup.producer.write(setup.artifacts[artifact], target, ways[r % len(ways)])
                # Bounded work in flight: a producer that only enqueues would run far ahead of its copies.
                pending.append(setup.stream.event())
                while len(pending) > in_flight:
                    pending.popleft().synchronize()
            setup.stream.synchronize()
        except BaseException as error:
            failures.append(error)
        finally:
            done.set()

    def consume() -> None:
        crng = random.Random(seed + 1)
        try:
            while not done.is_set() or counts["pins"] == 0:
                target = crng.choice(setup.arenas)
                generation, given = target.state
                if given is None:
                    continue
                other = crng.choice([i for i in range(len(setup.artifacts)) if i != given])
                for which, index in (("given", given), ("other", other)):
                    counts["pins"] += 1
                    outcome, same = setup.consumer.read(setup.artifacts[index], target, generation)
                    if outcome != "hit":
                        misses[outcome] += 1
                        continue
                    conclusive = target.state[0] == generation
                    if which == "other":
                        counts["wrong_artifact_hits"] += 1
                    elif not conclusive:
                        counts["hits_overlapping_reuse"] += 1
                    elif same:
                        counts["conclusive_hits"] += 1
                    else:
                        counts["stale_hits"] += 1
        except BaseException as error:
            failures.append(error)

    records_before = Counter(setup.producer.records)
    # Host functions run Python on the driver's thread, which must take the GIL from the two
    # threads here: a short switch interval hands it over sooner than the default 5 ms.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    start = time.perf_counter()
    consumer = threading.Thread(target=consume, name="consumer")
    consumer.start()
    try:
        produce()
        consumer.join(120)
    finally:
        sys.setswitchinterval(interval)
    seconds = time.perf_counter() - start
    if failures:
        raise failures[0]
    return {
        "rounds": rounds,
        "ways": list(ways),
        "arenas": len(setup.arenas),
        "artifacts": len(setup.artifacts),
        "artifact_bytes": setup.artifacts[0].host.numel(),
        "seconds": round(seconds, 3),
        "pins": counts["pins"],
        "conclusive_hits": counts["conclusive_hits"],
        "stale_hits": counts["stale_hits"],
        "wrong_artifact_hits": counts["wrong_artifact_hits"],
        "hits_overlapping_reuse": counts["hits_overlapping_reuse"],
        "misses": dict(sorted(misses.items())),
        "records": {str(k): v for k, v in (setup.producer.records - records_before).items()},
    }


def run(report: Any, device: str, device_uuid: str, table_name: str, rounds: int, control_rounds: int, artifact_bytes: int, seed: int) -> Dict[str, Any]:
    """Every readiness check, its properties recorded on ``report``; returns the figures."""
    figures: Dict[str, Any] = {"device": device, "device_uuid": device_uuid, "stream": "cuda" if device.startswith("cuda") else "cpu-ordered-queue"}
    setup = Setup(table_name, device, device_uuid, artifact_bytes, artifacts=8, arenas=4, seed=seed)
    try:
        figures["record_after_copy"] = []
        for i, way in enumerate(WAYS):
            got = check_record_after_copy(setup, way, artifact=i, arena=i)
            figures["record_after_copy"].append(got)
            report.holds(f"readiness: {way} record, then a hit on the device bytes", got["hit"] == "hit" and got["bytes_equal"] is True,
                         f"pin {got['hit']}, device bytes {'equal' if got['bytes_equal'] else 'NOT equal' if got['bytes_equal'] is False else 'not read'} to the artifact's")
            report.holds(f"readiness: {way} record, other targets miss",
                         got["other_device"] == "device-mismatch" and got["other_arena"] == "device-mismatch" and got["reused_arena"] == "arena-generation-mismatch",
                         f"another device: {got['other_device']}, another arena: {got['other_arena']}, the arena's next generation: {got['reused_arena']}")
        figures["incomplete_write"] = []
        for i, way in enumerate(WAYS):
            got = check_incomplete_write(setup, way, artifact=2 + i, arena=2 + i)
            figures["incomplete_write"].append(got)
            report.holds(f"readiness: {way} record, a write not yet complete is a miss",
                         got["copy_incomplete_while_pinning"] and got["during"] != "hit" and got["after"] == "hit" and got["after_bytes_equal"] is True,
                         f"while the copy was held ({'incomplete' if got['copy_incomplete_while_pinning'] else 'NOT held'}): {got['during']}; "
                         f"after it completed: {got['after']}, bytes {'equal' if got['after_bytes_equal'] else 'not equal'}")
        control = check_incomplete_write(setup, "early", artifact=4, arena=0)
        figures["control_early_record"] = control
        report.holds("readiness: control: a record made before its copy completed is caught reading stale bytes",
                     control["copy_incomplete_while_pinning"] and control["during"] == "hit" and control["during_bytes_equal"] is False,
                     f"pinned during the held copy: {control['during']}, bytes {'equal' if control['during_bytes_equal'] else 'stale' if control['during_bytes_equal'] is False else 'not read'}")
        got = stress(setup, rounds, WAYS, seed)
        figures["stress"] = got
        report.holds("readiness: stress, no hit on stale bytes or on another artifact", got["stale_hits"] == 0 and got["wrong_artifact_hits"] == 0,
                     f"{got['rounds']} rounds, {got['pins']} pins: {got['conclusive_hits']} conclusive hits, {got['stale_hits']} stale, "
                     f"{got['wrong_artifact_hits']} on another artifact, {got['hits_overlapping_reuse']} overlapping a reuse; misses {got['misses']}")
        report.holds("readiness: stress made conclusive hits", got["conclusive_hits"] > 0,
                     f"{got['conclusive_hits']} conclusive hits of {got['pins']} pins (none would mean the stress proved nothing)")
        if control_rounds > 0:
            # The early-record producer under the same stress: how often its stale bytes are seen.
            # Timing decides that, so it is a figure, not a property.
            figures["stress_control_early_record"] = stress(setup, control_rounds, ("early",), seed + 7)
    finally:
        setup.close()
    return figures
