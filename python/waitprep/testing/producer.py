"""A lease table's producer in a process of its own, driven one JSON line at a time: the storage
worker the adapter tests (and anyone trying an engine adapter) run beside an engine.

    python -m waitprep.testing.producer --table NAME [--capacity 256] [--record-bytes 65536]
        [--arena-root /dev/shm] [--feed-capacity 4096] [--keep]

It creates the table (as its single producer), one arena file (``<root>/<table>-arena/0.wpa``) of
``capacity`` record slots of ``--record-bytes`` payload each, and the stored/removed event feed
(``waitprep.adapters.events``). It prints ``{"event": "ready", "pid": ...}``, then answers each
command on stdin with one line, ``{"ok": true, ...}`` or ``{"ok": false, "code": ..., "message": ...}``:

- ``{"op": "publish", "items": [ITEM, ...]}``: reserve, write the record, publish, append a
  ``stored`` event, for each item; ``results`` says ``published``, ``exists`` or ``full`` per item.
  An ITEM is ``{"digest": hex, "engineKey": hex (optional, for the feed), "size": payload bytes,
  "tokens": token count, "format": record format (default "raw")}``. The payload is
  :func:`expected_payload` of the digest: a reader checks every byte it got.
- ``{"op": "reserve", "items": [...]}`` reserves only (a pin then misses ``preparing``);
  ``{"op": "complete", "digests": [hex, ...]}`` writes and publishes what was reserved;
  ``{"op": "abandon", "digests": [...]}`` gives it back.
- ``{"op": "evict", "digests": [...]}``: ``try_evict`` each; an evicted artifact's slot is free for
  another record and a ``removed`` event is appended. ``results``: ``evicted``, ``pinned``, ``absent``.
- ``{"op": "churn_start", "items": [...], "interval": seconds}``: a thread evicts and republishes
  the items at random until ``{"op": "churn_stop"}``, which answers the counts (``evicted``,
  ``pinned``: refusals, ``republished``).
- ``{"op": "summary"}``: the table's counts (``pinned_slots``, slots by state, clients).
- ``{"op": "reap"}``: ``reap_dead_clients``. ``{"op": "exit"}`` (or the end of input): closes the
  table, and removes the table, its arena and its feed unless ``--keep``.

:class:`ProducerProcess` starts one and talks to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

__all__ = ["expected_payload", "ProducerProcess", "main"]


def expected_payload(digest: bytes, size: int) -> bytes:
    """The payload the producer writes for ``digest``: ``size`` bytes that depend on every byte of it."""
    return hashlib.shake_256(b"waitprep-test-payload" + bytes(digest)).digest(size)


class _Producer:
    def __init__(self, table: str, capacity: int, record_bytes: int, arena_root: str, feed_capacity: int, keep: bool) -> None:
        import waitprep
        from waitprep import arena
        from waitprep.adapters.events import EventFeedWriter, default_feed_path

        self.name = table
        self.keep = keep
        self.arena_root = arena_root
        self.table = waitprep.create_table(table, capacity)
        self.record_bytes = record_bytes
        self.slot_bytes = arena.ARENA_RECORD_HEADER_BYTES + record_bytes
        os.makedirs(arena.arena_directory(table, arena_root), mode=0o700, exist_ok=True)
        self.arena_file = arena.arena_path(table, 0, arena_root)
        self.fd = os.open(self.arena_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        os.ftruncate(self.fd, capacity * self.slot_bytes)
        self.feed_path = default_feed_path(table, arena_root)
        self.feed = EventFeedWriter(self.feed_path, feed_capacity)
        self.free = list(range(capacity - 1, -1, -1))
        self.slot_of: Dict[bytes, int] = {}
        self.reserved: Dict[bytes, Any] = {}
        self.items: Dict[bytes, Dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.churn: Optional[threading.Thread] = None
        self.churn_stop = threading.Event()
        self.churn_counts = {"evicted": 0, "pinned": 0, "republished": 0, "absent": 0}

    # Records.

    def _write_and_publish(self, digest: bytes, item: Dict[str, Any], reservation: Any) -> str:
        from waitprep import arena
        from waitprep.adapters.events import STORED

        size = int(item.get("size", 1024))
        if size > self.record_bytes or not self.free:
            self.table.abandon(reservation)
            return "full"
        slot = self.free.pop()
        payload = expected_payload(digest, size)
        record, header = arena.encode_arena_record(digest, payload, int(item.get("tokens", 1)), item.get("format", "raw"))
        os.pwrite(self.fd, record, slot * self.slot_bytes)
        self.table.publish(reservation, size_bytes=size, location=arena.arena_location(0, slot * self.slot_bytes),
                           checksum=header.checksum, codec_id=0, representation_version=1)
        self.slot_of[digest] = slot
        self.items[digest] = item
        self.feed.append([(STORED, digest, bytes.fromhex(item.get("engineKey", "")))])
        return "published"

    def _reserve(self, digest: bytes) -> Any:
        import waitprep

        try:
            return self.table.reserve(digest)
        except waitprep.WaitprepError as error:
            if error.code == "ERR_KEY_EXISTS":
                return "exists"
            if error.code == "ERR_TABLE_FULL":
                return "full"
            raise

    def publish(self, items: List[Dict[str, Any]]) -> List[str]:
        out = []
        with self.lock:
            for item in items:
                digest = bytes.fromhex(item["digest"])
                reservation = self._reserve(digest)
                out.append(reservation if isinstance(reservation, str) else self._write_and_publish(digest, item, reservation))
        return out

    def reserve(self, items: List[Dict[str, Any]]) -> List[str]:
        out = []
        with self.lock:
            for item in items:
                digest = bytes.fromhex(item["digest"])
                reservation = self._reserve(digest)
                if isinstance(reservation, str):
                    out.append(reservation)
                    continue
                self.reserved[digest] = (reservation, item)
                out.append("reserved")
        return out

    def complete(self, digests: List[str]) -> List[str]:
        out = []
        with self.lock:
            for text in digests:
                entry = self.reserved.pop(bytes.fromhex(text), None)
                out.append("absent" if entry is None else self._write_and_publish(bytes.fromhex(text), entry[1], entry[0]))
        return out

    def abandon(self, digests: List[str]) -> List[str]:
        out = []
        with self.lock:
            for text in digests:
                entry = self.reserved.pop(bytes.fromhex(text), None)
                if entry is not None:
                    self.table.abandon(entry[0])
                out.append("absent" if entry is None else "abandoned")
        return out

    def _evict(self, digest: bytes) -> str:
        from waitprep.adapters.events import REMOVED

        result = self.table.try_evict(digest)
        if result == "evicted":
            slot = self.slot_of.pop(digest, None)
            if slot is not None:
                self.free.append(slot)
            item = self.items.get(digest, {})
            self.feed.append([(REMOVED, digest, bytes.fromhex(item.get("engineKey", "")))])
        return result

    def evict(self, digests: List[str]) -> List[str]:
        with self.lock:
            return [self._evict(bytes.fromhex(text)) for text in digests]

    # Churn: evict and republish at random, as a storage worker under a budget does.

    def churn_start(self, items: List[Dict[str, Any]], interval: float) -> None:
        if self.churn is not None:
            raise ValueError("churn is already running")
        pool = [(bytes.fromhex(item["digest"]), item) for item in items]
        self.churn_stop.clear()
        self.churn_counts = dict.fromkeys(self.churn_counts, 0)
        rng = random.Random(os.getpid())

        def run() -> None:
            while not self.churn_stop.is_set():
                digest, item = rng.choice(pool)
                with self.lock:
                    if digest in self.slot_of:
                        self.churn_counts[self._evict(digest)] += 1
                    else:
                        reservation = self._reserve(digest)
                        if not isinstance(reservation, str) and self._write_and_publish(digest, item, reservation) == "published":
                            self.churn_counts["republished"] += 1
                if interval:
                    time.sleep(interval)

        self.churn = threading.Thread(target=run, name="churn", daemon=True)
        self.churn.start()

    def churn_end(self) -> Dict[str, int]:
        if self.churn is not None:
            self.churn_stop.set()
            self.churn.join()
            self.churn = None
        return dict(self.churn_counts)

    def summary(self) -> Dict[str, Any]:
        s = self.table.summary()
        return {"pinned_slots": s.pinned_slots, "slots": dataclasses.asdict(s.slots), "clients": dataclasses.asdict(s.clients), "published": len(self.slot_of)}

    def close(self) -> None:
        import waitprep

        self.churn_end()
        self.table.close()
        self.feed.close()
        os.close(self.fd)
        if not self.keep:
            waitprep.unlink_table(self.name)
            shutil.rmtree(os.path.dirname(self.arena_file), ignore_errors=True)
            try:
                os.unlink(self.feed_path)
            except FileNotFoundError:
                pass


def _reply(out: Any, **fields: Any) -> None:
    out.write(json.dumps(dict(fields)) + "\n")
    out.flush()


def main(argv: Optional[List[str]] = None) -> int:
    from waitprep import arena

    parser = argparse.ArgumentParser(prog="python -m waitprep.testing.producer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True)
    parser.add_argument("--capacity", type=int, default=256)
    parser.add_argument("--record-bytes", type=int, default=65536)
    parser.add_argument("--arena-root", default=arena.DEFAULT_ARENA_ROOT)
    parser.add_argument("--feed-capacity", type=int, default=4096)
    parser.add_argument("--keep", action="store_true", help="leave the table, arena and feed behind at exit")
    args = parser.parse_args(argv)
    producer = _Producer(args.table, args.capacity, args.record_bytes, args.arena_root, args.feed_capacity, args.keep)
    out = sys.stdout
    _reply(out, event="ready", pid=os.getpid(), table=args.table, feed=producer.feed_path, arena=producer.arena_file)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                op = command.get("op")
                if op == "exit":
                    break
                if op == "publish":
                    _reply(out, ok=True, results=producer.publish(command["items"]))
                elif op == "reserve":
                    _reply(out, ok=True, results=producer.reserve(command["items"]))
                elif op == "complete":
                    _reply(out, ok=True, results=producer.complete(command["digests"]))
                elif op == "abandon":
                    _reply(out, ok=True, results=producer.abandon(command["digests"]))
                elif op == "evict":
                    _reply(out, ok=True, results=producer.evict(command["digests"]))
                elif op == "churn_start":
                    producer.churn_start(command["items"], float(command.get("interval", 0.0005)))
                    _reply(out, ok=True)
                elif op == "churn_stop":
                    _reply(out, ok=True, **producer.churn_end())
                elif op == "summary":
                    _reply(out, ok=True, **producer.summary())
                elif op == "reap":
                    _reply(out, ok=True, reaped=producer.table.reap_dead_clients())
                else:
                    _reply(out, ok=False, code="ERR_INVALID_ARGUMENT", message="unknown op %r" % (op,))
            except Exception as error:  # one bad command is answered, not fatal
                _reply(out, ok=False, code=getattr(error, "code", type(error).__name__), message=str(error))
    finally:
        producer.close()
    return 0


class ProducerProcess:
    """Starts ``python -m waitprep.testing.producer`` and talks to it: :meth:`call` sends one command
    and returns its reply (raising ``RuntimeError`` for ``{"ok": false}``). ``env`` is the child's
    environment (it must import this copy of waitprep and find its library)."""

    def __init__(self, table: str, *, capacity: int = 256, record_bytes: int = 65536, arena_root: Optional[str] = None,
                 feed_capacity: int = 4096, env: Optional[Dict[str, str]] = None, python: str = sys.executable) -> None:
        argv = [python, "-m", "waitprep.testing.producer", "--table", table, "--capacity", str(capacity),
                "--record-bytes", str(record_bytes), "--feed-capacity", str(feed_capacity)]
        if arena_root is not None:
            argv += ["--arena-root", arena_root]
        self.table = table
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        ready = self._line()
        if ready.get("event") != "ready":
            raise RuntimeError("the producer did not start: %r" % ready)
        self.pid: int = ready["pid"]
        self.feed_path: str = ready["feed"]
        self.arena_file: str = ready["arena"]
        self._lock = threading.Lock()

    def _line(self) -> Dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the producer exited (status %r)" % self.process.poll())
        return json.loads(line)  # type: ignore[no-any-return]

    def call(self, op: str, **args: Any) -> Dict[str, Any]:
        with self._lock:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(dict(args, op=op)) + "\n")
            self.process.stdin.flush()
            reply = self._line()
        if not reply.get("ok"):
            raise RuntimeError("producer %s: %s: %s" % (op, reply.get("code"), reply.get("message")))
        return reply

    def publish(self, items: List[Dict[str, Any]]) -> List[str]:
        return self.call("publish", items=items)["results"]  # type: ignore[no-any-return]

    def evict(self, digests: List[bytes]) -> List[str]:
        return self.call("evict", digests=[d.hex() for d in digests])["results"]  # type: ignore[no-any-return]

    def close(self, timeout: float = 30) -> int:
        """Asks it to exit and waits; kills it if it does not."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write('{"op": "exit"}\n')
                self.process.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def __enter__(self) -> "ProducerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
