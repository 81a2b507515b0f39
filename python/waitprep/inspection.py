"""What ``Table.inspect()`` and ``Table.summary()`` report, and the decoder of a segment copy.

The decoder reads the layout native/include/waitprep.h draws, as lib/lease-table/inspect.ts does
on the Node side (same fields, snake_case). A copy of a live segment is a plain copy: each field is
read once, so one racing with writers is merely stale, never unsafe. Inspection is for operators,
never for decisions (a pin reads the device record under its seqlock; a copy may show it torn).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from . import _abi
from .errors import WaitprepError

__all__ = [
    "ClientInspection",
    "SlotInspection",
    "SlotMeta",
    "DeviceRecordInspection",
    "TableInspection",
    "TableSummary",
    "SlotCounts",
    "ClientCounts",
    "decode_segment",
]


@dataclass(frozen=True)
class ClientInspection:
    """One registered client entry."""

    index: int
    state: str  # 'claiming' | 'active' | 'reaping'
    #: The client's pid; 0 for 'reaping' (the word names its reaper instead).
    pid: int
    serial: int
    start_time: int
    #: Inode of the client's pid namespace (0: unknown, never reaped).
    pid_namespace: int
    #: Inode of its time namespace (0 without time namespaces).
    time_namespace: int
    #: JavaScript fallback only: the worker_threads threadId that opened it (native clients: 0).
    thread: int
    producer: bool
    #: For 'reaping': the reaping client as (index, low 15 bits of its serial), or 'unregistered'
    #: for a reaper that reaped to make room in a full registry; otherwise None.
    reaper: Union[Tuple[int, int], str, None]


@dataclass(frozen=True)
class SlotMeta:
    size_bytes: int
    location: int
    checksum: int
    codec_id: int
    representation_version: int


@dataclass(frozen=True)
class DeviceRecordInspection:
    device_uuid_hex: str
    arena: int
    arena_generation: int
    write_seq: int


@dataclass(frozen=True)
class SlotInspection:
    """One non-free slot."""

    slot: int
    state: str  # 'reserved' | 'ready' | 'evicting'
    generation: int
    #: Client indexes holding at least one pin.
    pin_holders: List[int]
    digest_hex: str
    meta: SlotMeta
    #: The device record when one is present and was not being written when the copy was read.
    device: Optional[DeviceRecordInspection]


@dataclass(frozen=True)
class TableInspection:
    abi_version: int
    capacity: int
    segment_size: int
    #: The producer's client index, or None.
    producer: Optional[int]
    reaped_clients: int
    clients: List[ClientInspection]
    slots: List[SlotInspection]


@dataclass(frozen=True)
class SlotCounts:
    free: int
    reserved: int
    ready: int
    evicting: int


@dataclass(frozen=True)
class ClientCounts:
    claiming: int
    active: int
    reaping: int


@dataclass(frozen=True)
class TableSummary:
    """Counts for monitoring, read in place by wp_summarize (no copy of the segment; each word read
    atomically, the whole not one snapshot)."""

    capacity: int
    slots: SlotCounts
    #: Slots holding at least one pin.
    pinned_slots: int
    #: Registered client entries by state, the producer included.
    clients: ClientCounts
    #: The producer's client index, or None.
    producer: Optional[int]
    reaped_clients: int


_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def decode_segment(data: bytes, open_capacity: Optional[int] = None) -> TableInspection:
    """Decodes a copy of a segment. ``open_capacity``: the capacity the table was opened with, which
    the header must still say. A short or corrupt copy is ``ERR_BAD_SEGMENT``."""
    if len(data) < _abi.HEADER_SIZE:
        raise WaitprepError("ERR_BAD_SEGMENT", "inspect: the segment is %d bytes, shorter than its %d-byte header" % (len(data), _abi.HEADER_SIZE))
    u32 = lambda at: _U32.unpack_from(data, at)[0]  # noqa: E731
    u64 = lambda at: _U64.unpack_from(data, at)[0]  # noqa: E731
    header_capacity = u32(_abi.HDR_CAPACITY)
    producer_word = u64(_abi.HDR_PRODUCER)
    if open_capacity is not None and header_capacity != open_capacity:
        raise WaitprepError(
            "ERR_BAD_SEGMENT",
            "inspect: the segment's header is corrupt: its capacity is %d, but the table was opened with capacity %d" % (header_capacity, open_capacity),
        )
    if not 1 <= header_capacity <= _abi.WP_MAX_CAPACITY:
        raise WaitprepError("ERR_BAD_SEGMENT", "inspect: the segment's header is corrupt: its capacity %d is outside [1, %d]" % (header_capacity, _abi.WP_MAX_CAPACITY))
    if producer_word != 0 and not 1 <= (producer_word & 0xFF) <= _abi.WP_MAX_CLIENTS:
        raise WaitprepError("ERR_BAD_SEGMENT", "inspect: the segment's header is corrupt: its producer word names no client index (0-63)")
    capacity = header_capacity if open_capacity is None else open_capacity
    if len(data) < _abi.segment_size(capacity):
        raise WaitprepError(
            "ERR_BAD_SEGMENT", "inspect: the segment is %d bytes, but capacity %d needs %d" % (len(data), capacity, _abi.segment_size(capacity))
        )
    producer = None if producer_word == 0 else (producer_word & 0xFF) - 1

    clients: List[ClientInspection] = []
    for i in range(_abi.WP_MAX_CLIENTS):
        at = _abi.CLIENTS_OFFSET + i * _abi.CLIENT_SIZE
        word = u64(at + _abi.CLI_WORD)
        state = word & 3
        if state == 0:
            continue
        pid_bits = (word >> _abi.CLIENT_PID_SHIFT) & _abi.CLIENT_PID_MASK
        reaping = _abi.CLIENT_STATES[state] == "reaping"
        reaper: Union[Tuple[int, int], str, None] = None
        if reaping:
            reaper = (pid_bits & (_abi.WP_MAX_CLIENTS - 1), (pid_bits >> 6) & 0x7FFF) if pid_bits & _abi.CLIENT_REAPER_NAMED else "unregistered"
        clients.append(
            ClientInspection(
                index=i,
                state=_abi.CLIENT_STATES[state],
                pid=0 if reaping else pid_bits,
                serial=word >> _abi.CLIENT_SERIAL_SHIFT,
                start_time=u64(at + _abi.CLI_START_TIME),
                pid_namespace=u64(at + _abi.CLI_PID_NS),
                time_namespace=u64(at + _abi.CLI_TIME_NS),
                thread=u32(at + _abi.CLI_THREAD),
                producer=producer == i,
                reaper=reaper,
            )
        )

    slots: List[SlotInspection] = []
    for s in range(capacity):
        at = _abi.SLOTS_OFFSET + s * _abi.SLOT_SIZE
        state_gen = u64(at + _abi.SLOT_STATE_GEN)
        state = state_gen & 0xFF
        if state == 0 or state >= len(_abi.SLOT_STATES):
            continue
        mask = u64(at + _abi.SLOT_PIN_MASK)
        device_at = at + _abi.SLOT_DEVICE
        seq = u64(device_at)
        device = None
        if seq != 0 and seq & 1 == 0:
            device = DeviceRecordInspection(
                device_uuid_hex=data[device_at + 8 : device_at + 24].hex(),
                arena=u64(device_at + 24),
                arena_generation=u64(device_at + 32),
                write_seq=u64(device_at + 40),
            )
        meta_at = at + _abi.SLOT_META
        slots.append(
            SlotInspection(
                slot=s,
                state=_abi.SLOT_STATES[state],
                generation=state_gen >> 8,
                pin_holders=[c for c in range(_abi.WP_MAX_CLIENTS) if mask >> c & 1],
                digest_hex=data[at + _abi.SLOT_DIGEST : at + _abi.SLOT_DIGEST + 32].hex(),
                meta=SlotMeta(u64(meta_at), u64(meta_at + 8), u64(meta_at + 16), u32(meta_at + 24), u32(meta_at + 28)),
                device=device,
            )
        )
    return TableInspection(
        abi_version=u32(_abi.HDR_ABI_VERSION),
        capacity=capacity,
        segment_size=u64(_abi.HDR_SEGMENT_SIZE),
        producer=producer,
        reaped_clients=u64(_abi.HDR_REAPED),
        clients=clients,
        slots=slots,
    )
