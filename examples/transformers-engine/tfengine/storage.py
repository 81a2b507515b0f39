"""The storage tier: the lease table's single producer, between the disk tier and a /dev/shm arena.

- **Disk tier.** After a turn the engine saves the KV of its prompt with :func:`save_to_disk`: one
  file per key, ``<disk>/<digest hex>.wpar``, holding a standard arena record (waitprep.arena: a
  96-byte header with the digest, payload length, token count, format and checksum, then the
  payload, :mod:`tfengine.kvcodec`'s bytes). It is written to a temporary name and renamed, so a
  reader never sees half a file.
- **Prepare.** On a request from the orchestrator's preparation worker (one JSON line over a Unix
  socket) the storage tier reserves the key's slot, reads the disk file, checks that its header
  names this key and that the payload's checksum and length are the header's, makes room under
  its byte budget, writes the record into an arena file of its own and publishes its location,
  size and checksum. Anything wrong is reported and the reservation abandoned: nothing unchecked
  is ever READY.
- **Evict.** Under the budget it evicts the least recently prepared artifacts first, and only
  those the table lets it evict: ``try_evict`` refuses a pinned artifact, which keeps its bytes.
  When the orchestrator sends eviction values (``{"op": "eviction-values", "values": [[keyHex,
  value], ...]}``, a pause planner's ``evictionValue``: -1 for an artifact no open pause wants,
  higher for one a pause likely to wake soon wants) it evicts the lowest value first (least
  recently prepared among equals) and never one worth as much as the artifact it makes room for;
  a resident key it has no value for counts as -1, and a new artifact with no value may evict any
  (as the package's storage worker does).

Arenas follow waitprep's naming rule (``<table>-arena/<i>.wpa`` under /dev/shm, arena ``i`` in the
top 16 bits of ``location``). Each artifact gets an arena of its own at offset 0, so evicting one
frees its memory at once (the file is removed) without an allocator; an index is reused only
after its artifact was evicted, which the table allows only once no pin is left on it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socketserver
import sys
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional

from waitprep import WaitprepError, arena

#: The record format string: kvcodec's payload, version 1, fp32 (:func:`record_format` names
#: another dtype's).
RECORD_FORMAT = "tfkv1-float32"

#: The most eviction values kept (one per open pause is plenty); the rest of a longer list is ignored.
MAX_EVICTION_VALUES = 100_000


def record_format(dtype: str) -> str:
    """The record format string of kvcodec payloads in ``dtype`` (``"bfloat16"``: ``tfkv1-bfloat16``)."""
    return f"tfkv1-{dtype}"
#: The meta's codec id (no codec: the bytes are the runtime's own) and representation version.
CODEC_ID = 0
REPRESENTATION_VERSION = 1


def disk_path(disk_dir: str, digest: bytes) -> str:
    return os.path.join(disk_dir, digest.hex() + ".wpar")


def save_to_disk(disk_dir: str, digest: bytes, payload: bytes, tokens: int, format: str = RECORD_FORMAT) -> int:
    """Writes the record of ``payload`` (the KV of ``tokens`` tokens under key ``digest``) to the
    disk tier, unless it holds one already (a key names its bytes: same key, same KV). Returns the
    bytes written (0 when it was there)."""
    path = disk_path(disk_dir, digest)
    if os.path.exists(path):
        return 0
    os.makedirs(disk_dir, mode=0o700, exist_ok=True)
    record, _ = arena.encode_arena_record(digest, payload, tokens, format)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "wb") as f:
        f.write(record)
    os.replace(partial, path)
    return len(record)


class RecordError(Exception):
    """A record that does not belong to its key: the read's :class:`waitprep.arena.Mismatch`."""

    def __init__(self, mismatch: "arena.Mismatch") -> None:
        super().__init__(f"{mismatch.reason}: {mismatch.message}")
        self.reason = mismatch.reason


def read_leased(table: Any, lease: Any) -> bytes:
    """The payload of the record a held lease names, checked against the lease's digest, size and
    checksum (waitprep.arena.read_arena_record). Raises :class:`RecordError` otherwise."""
    got = arena.read_arena_record(table.name, lease.digest, lease.meta)
    if isinstance(got, arena.Mismatch):
        raise RecordError(got)
    return got.payload


class StorageTier:
    """The producer's state: the table, the disk tier, the arenas in use and the byte budget.

    One lock serialises prepare and evict: the preparation driver has one unit in flight, and a
    lock keeps a test's evict from interleaving with a prepare's bookkeeping.
    """

    def __init__(self, table: Any, disk_dir: str, budget_bytes: int, arena_root: str = arena.DEFAULT_ARENA_ROOT, format: str = RECORD_FORMAT) -> None:
        self.table = table
        #: The record format this tier publishes; a disk record of any other is refused.
        self.format = format
        self.disk_dir = disk_dir
        self.budget_bytes = budget_bytes
        self.root = arena_root
        self.directory = arena.arena_directory(table.name, arena_root)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.lock = threading.Lock()
        #: digest -> (arena index, record bytes), least recently prepared first.
        self.resident: "OrderedDict[bytes, tuple]" = OrderedDict()
        self.used_bytes = 0
        self.free_indices: List[int] = []
        self.next_index = 0
        self.counts: Dict[str, int] = {"prepared": 0, "alreadyReady": 0, "failed": 0, "evicted": 0, "evictRefusedPinned": 0, "worthMoreSkips": 0, "valueUpdates": 0, "bytesIn": 0}
        #: digest -> eviction value, as the orchestrator last sent them (empty: least recently prepared first).
        self.values: Dict[bytes, float] = {}

    def _index(self) -> int:
        if self.free_indices:
            return self.free_indices.pop()
        if self.next_index > arena.MAX_ARENA_INDEX:
            raise RuntimeError("every arena index is in use")
        self.next_index += 1
        return self.next_index - 1

    def _drop(self, digest: bytes) -> None:
        index, size = self.resident.pop(digest)
        os.unlink(arena.arena_path(self.table.name, index, self.root))
        self.free_indices.append(index)
        self.used_bytes -= size

    def evict(self, digest: bytes) -> str:
        """``try_evict`` and, when the table agreed, frees the artifact's arena."""
        with self.lock:
            return self._evict(digest)

    def _evict(self, digest: bytes) -> str:
        result = self.table.try_evict(digest)
        if result == "evicted":
            self.counts["evicted"] += 1
            if digest in self.resident:
                self._drop(digest)
        elif result == "pinned":
            self.counts["evictRefusedPinned"] += 1
        return result

    def set_eviction_values(self, values: Any) -> dict:
        """Replaces the eviction values: ``[[keyHex, value], ...]``, at most MAX_EVICTION_VALUES;
        an entry that is not a 64-digit hex key and a finite number is ignored."""
        if not isinstance(values, list):
            raise ValueError("eviction-values needs values: [[keyHex, value], ...]")
        kept: Dict[bytes, float] = {}
        for pair in values:
            if len(kept) >= MAX_EVICTION_VALUES:
                break
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and len(pair[0]) == 64):
                continue
            value = pair[1]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
                continue
            try:
                kept[bytes.fromhex(pair[0])] = float(value)
            except ValueError:
                continue
        with self.lock:
            self.values = kept
            self.counts["valueUpdates"] += 1
        return {"ok": True, "values": len(kept)}

    def _make_room(self, size: int, for_digest: Optional[bytes] = None) -> bool:
        """Evicts until ``size`` more bytes fit: least recently prepared first, or with eviction
        values lowest first, never one worth as much as ``for_digest``'s; pinned ones stay."""
        order = list(self.resident)
        own = float("inf")
        if self.values:
            worth = lambda digest: self.values.get(digest, -1.0)  # noqa: E731
            own = self.values.get(for_digest, float("inf")) if for_digest is not None else own
            order.sort(key=worth)  # stable: least recently prepared first among equals
        for digest in order:
            if self.used_bytes + size <= self.budget_bytes:
                break
            if self.values and self.values.get(digest, -1.0) >= own:
                self.counts["worthMoreSkips"] += 1
                continue
            self._evict(digest)
        return self.used_bytes + size <= self.budget_bytes

    def prepare(self, key_hex: str, key_bytes_b64: str) -> dict:
        """One unit: the key's record from the disk tier into an arena, checked, then published."""
        start = time.perf_counter()
        digest = hashlib.sha256(base64.b64decode(key_bytes_b64, validate=True)).digest()
        if digest.hex() != key_hex:
            raise ValueError(f"the key's wire form hashes to {digest.hex()}, not {key_hex}")
        with self.lock:
            if self.table.peek(digest) == "ready":
                self.counts["alreadyReady"] += 1
                if digest in self.resident:
                    self.resident.move_to_end(digest)
                return {"ok": True, "alreadyReady": True, "sizeBytes": 0, "prepS": time.perf_counter() - start}
            reservation = self.table.reserve(digest)
            index = None
            try:
                try:
                    with open(disk_path(self.disk_dir, digest), "rb") as f:
                        record = f.read()
                except FileNotFoundError:
                    raise ValueError(f"{key_hex[:12]} is not in the disk tier") from None
                header = arena.decode_record_header(record)
                if isinstance(header, arena.Mismatch):
                    raise RecordError(header)
                wrong = arena.check_record_header(header, digest)
                if wrong is not None:
                    raise RecordError(wrong)
                payload = memoryview(record)[arena.ARENA_RECORD_HEADER_BYTES:]
                if len(payload) != header.payload_length:
                    raise ValueError(f"the disk file holds {len(payload)} payload bytes, its header says {header.payload_length}")
                if arena.record_checksum(payload) != header.checksum:
                    raise ValueError(f"the disk file's payload does not match its checksum {header.checksum}")
                if header.format != self.format:
                    raise ValueError(f"record format {header.format!r}, expected {self.format!r}")
                if not self._make_room(len(record), digest):
                    raise ValueError(f"{len(record)} bytes do not fit the {self.budget_bytes}-byte budget: {self.used_bytes} are pinned, in use or worth more")
                index = self._index()
                path = arena.arena_path(self.table.name, index, self.root)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o600)
                try:
                    view = memoryview(record)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
                self.resident[digest] = (index, len(record))
                self.used_bytes += len(record)
                self.table.publish(reservation, header.payload_length, arena.arena_location(index, 0), header.checksum, CODEC_ID, REPRESENTATION_VERSION)
            except BaseException:
                self.counts["failed"] += 1
                if digest in self.resident:
                    self._drop(digest)
                elif index is not None:
                    self.free_indices.append(index)
                self.table.abandon(reservation)
                raise
            self.counts["prepared"] += 1
            self.counts["bytesIn"] += len(record)
            return {"ok": True, "alreadyReady": False, "sizeBytes": len(record), "tokens": header.token_count, "prepS": time.perf_counter() - start}

    def stats(self) -> dict:
        with self.lock:
            return {**self.counts, "residentArtifacts": len(self.resident), "usedBytes": self.used_bytes, "budgetBytes": self.budget_bytes}

    def close(self) -> None:
        with self.lock:
            for digest in list(self.resident):
                index, size = self.resident.pop(digest)
                try:
                    os.unlink(arena.arena_path(self.table.name, index, self.root))
                except FileNotFoundError:
                    pass
            try:
                os.rmdir(self.directory)
            except OSError:
                pass


def _answer(tier: StorageTier, request: dict) -> dict:
    op = request.get("op")
    try:
        if op == "prepare":
            return tier.prepare(request["keyHex"], request["keyBytes"])
        if op == "evict":
            return {"ok": True, "result": tier.evict(bytes.fromhex(request["keyHex"]))}
        if op == "eviction-values":
            return tier.set_eviction_values(request.get("values"))
        if op == "stats":
            return {"ok": True, **tier.stats()}
        return {"ok": False, "error": f"unknown op {op!r}"}
    except (WaitprepError, ValueError, RecordError, OSError, RuntimeError) as error:
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def serve_socket(tier: StorageTier, path: str) -> socketserver.UnixStreamServer:
    """A Unix socket server answering one JSON request a line, on a thread of its own."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                self.wfile.write((json.dumps(_answer(tier, json.loads(line))) + "\n").encode())
                self.wfile.flush()

    if os.path.exists(path):
        os.unlink(path)
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="storage-socket", daemon=True).start()
    return server


def main(argv: "Optional[List[str]]" = None) -> None:
    """The storage tier's process: creates the table, serves prepares on the socket and, on stdin,
    the orchestrator's own requests ({"op": "stats" | "evict" | "eviction-values" | "exit", "id"}), answered on stdout
    as {"event": "reply", "id", ...}."""
    import argparse

    from waitprep import create_table, unlink_table

    parser = argparse.ArgumentParser(prog="python -m tfengine.storage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True)
    parser.add_argument("--capacity", type=int, default=1024)
    parser.add_argument("--disk", required=True, help="the disk tier's directory")
    parser.add_argument("--socket", required=True, help="the Unix socket the preparation worker connects to")
    parser.add_argument("--budget", type=int, required=True, help="bytes of arena records the tier may hold")
    args = parser.parse_args(argv)

    table = create_table(args.table, args.capacity)
    tier = StorageTier(table, args.disk, args.budget)
    server = serve_socket(tier, args.socket)
    out = sys.stdout
    out.write(json.dumps({"event": "ready", "pid": os.getpid(), "table": args.table, "arenas": tier.directory}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("op") == "exit":
                break
            out.write(json.dumps({"event": "reply", "id": request.get("id"), **_answer(tier, request)}) + "\n")
            out.flush()
    finally:
        server.shutdown()
        server.server_close()
        tier.close()
        table.close()
        unlink_table(args.table)
        try:
            os.unlink(args.socket)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main()
