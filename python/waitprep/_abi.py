"""native/include/waitprep.h in ctypes: structures, status codes, flags, layout offsets, signatures.

Field for field the C layout (natural alignment, x86-64 / aarch64 Linux); the asserts at the end
pin every size and the offsets a mistake would move. The library is checked against this at load
(ABI version and every status number, see library.py).
"""

from __future__ import annotations

import ctypes
from typing import Dict

#: WP_ABI_VERSION of the header mirrored here.
ABI_VERSION = 4

#: The header's status codes, by name.
STATUS: Dict[str, int] = {
    "WP_OK": 0,
    "WP_MISS_ABSENT": 1,
    "WP_MISS_PREPARING": 2,
    "WP_MISS_EVICTING": 3,
    "WP_MISS_CONTENDED": 4,
    "WP_MISS_NO_DEVICE_RECORD": 5,
    "WP_MISS_DEVICE_MISMATCH": 6,
    "WP_MISS_ARENA_GENERATION_MISMATCH": 7,
    "WP_MISS_DEVICE_WRITE_INCOMPLETE": 8,
    "WP_MISS_STALE_HANDOFF": 9,
    "WP_EXISTS": 20,
    "WP_FULL": 21,
    "WP_PINNED": 22,
    "WP_ABSENT": 23,
    "WP_STALE": 24,
    "WP_ERR_INVALID_ARGUMENT": 40,
    "WP_ERR_BAD_SEGMENT": 41,
    "WP_ERR_WRITER_EXISTS": 42,
    "WP_ERR_NOT_PRODUCER": 43,
    "WP_ERR_NO_CLIENT_SLOT": 44,
    "WP_ERR_SYSTEM": 45,
    "WP_ERR_NOT_FOUND": 46,
    "WP_ERR_EXISTS": 47,
    "WP_ERR_NO_MEMORY": 48,
    "WP_ERR_NO_SPACE": 49,
    "WP_ERR_PERMISSION": 50,
    "WP_ERR_UNTRUSTED_SEGMENT": 51,
}

WP_OK = 0
WP_EXISTS = STATUS["WP_EXISTS"]
WP_FULL = STATUS["WP_FULL"]
WP_PINNED = STATUS["WP_PINNED"]
WP_ABSENT = STATUS["WP_ABSENT"]
WP_STALE = STATUS["WP_STALE"]
WP_ERR_BAD_SEGMENT = STATUS["WP_ERR_BAD_SEGMENT"]
WP_ERR_NOT_FOUND = STATUS["WP_ERR_NOT_FOUND"]
WP_ERR_SYSTEM = STATUS["WP_ERR_SYSTEM"]
WP_ERR_NO_SPACE = STATUS["WP_ERR_NO_SPACE"]
WP_ERR_PERMISSION = STATUS["WP_ERR_PERMISSION"]
WP_ERR_UNTRUSTED_SEGMENT = STATUS["WP_ERR_UNTRUSTED_SEGMENT"]

#: A miss status's reason, named as lib/coordinator/miss-reasons.ts names it: the status name without
#: WP_MISS_, lowercase, "_" as "-" (WP_MISS_NO_DEVICE_RECORD: "no-device-record").
MISS_REASON: Dict[int, str] = {
    code: name[len("WP_MISS_"):].lower().replace("_", "-") for name, code in STATUS.items() if name.startswith("WP_MISS_")
}

#: wp_open_options.flags.
WP_OPEN_SINGLE_THREAD = 1
WP_OPEN_TRUST_UID = 2
WP_OPEN_TRUST_GROUP_WRITE = 4
WP_OPEN_TRUST_WORLD_WRITE = 8

WP_MAGIC = 0x5045525054494157
WP_MAX_CAPACITY = 1 << 24
WP_MAX_CLIENTS = 64

# Segment layout (the header's diagram), for decoding a copy of the segment.
HEADER_SIZE = 256
CLIENT_SIZE = 64
SLOT_SIZE = 128
CLIENTS_OFFSET = HEADER_SIZE
SLOTS_OFFSET = CLIENTS_OFFSET + WP_MAX_CLIENTS * CLIENT_SIZE
HDR_ABI_VERSION = 8
HDR_CAPACITY = 16
HDR_SEGMENT_SIZE = 40
HDR_PRODUCER = 64
HDR_REAPED = 72
CLI_WORD = 0
CLI_START_TIME = 8
CLI_PID_NS = 16
CLI_THREAD = 32  # written only by the JavaScript fallback (lib/lease-table/layout.ts)
CLI_TIME_NS = 40
CLIENT_PID_SHIFT = 2
CLIENT_PID_MASK = (1 << 22) - 1
CLIENT_SERIAL_SHIFT = 24
CLIENT_REAPER_NAMED = 1 << 21
SLOT_STATE_GEN = 0
SLOT_PIN_MASK = 8
SLOT_DIGEST = 16
SLOT_META = 48
SLOT_DEVICE = 80
SLOT_STATES = ("free", "reserved", "ready", "evicting")
CLIENT_STATES = ("free", "claiming", "active", "reaping")


def segment_size(capacity: int) -> int:
    return SLOTS_OFFSET + capacity * SLOT_SIZE


class WpMeta(ctypes.Structure):
    """wp_meta: size_bytes, location, checksum (u64); codec_id, representation_version (u32)."""

    _fields_ = [
        ("size_bytes", ctypes.c_uint64),
        ("location", ctypes.c_uint64),
        ("checksum", ctypes.c_uint64),
        ("codec_id", ctypes.c_uint32),
        ("representation_version", ctypes.c_uint32),
    ]


class WpLease(ctypes.Structure):
    """wp_lease: slot, generation, meta, and token (this pin's record: a second unpin releases nothing)."""

    _fields_ = [
        ("slot", ctypes.c_uint32),
        ("generation", ctypes.c_uint64),
        ("meta", WpMeta),
        ("token", ctypes.c_uint64),
    ]


class WpReservation(ctypes.Structure):
    """wp_reservation: slot, generation."""

    _fields_ = [("slot", ctypes.c_uint32), ("generation", ctypes.c_uint64)]


class WpDeviceRecord(ctypes.Structure):
    """wp_device_record: device_uuid[16], arena, arena_generation, write_seq."""

    _fields_ = [
        ("device_uuid", ctypes.c_uint8 * 16),
        ("arena", ctypes.c_uint64),
        ("arena_generation", ctypes.c_uint64),
        ("write_seq", ctypes.c_uint64),
    ]


class WpOpenOptions(ctypes.Structure):
    """wp_open_options: create_capacity, mode, flags, trusted_uid."""

    _fields_ = [
        ("create_capacity", ctypes.c_uint32),
        ("mode", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("trusted_uid", ctypes.c_uint32),
    ]


class WpSummary(ctypes.Structure):
    """wp_summary: slots by state, pinned slots, clients by state, the producer's index, reaped clients."""

    _fields_ = [
        ("slots", ctypes.c_uint32 * 4),
        ("pinned_slots", ctypes.c_uint32),
        ("clients", ctypes.c_uint32 * 4),
        ("producer_client", ctypes.c_int32),
        ("reaped_clients", ctypes.c_uint64),
    ]


assert ctypes.sizeof(WpMeta) == 32, ctypes.sizeof(WpMeta)
assert ctypes.sizeof(WpLease) == 56, ctypes.sizeof(WpLease)
assert WpLease.meta.offset == 16 and WpLease.token.offset == 48
assert ctypes.sizeof(WpReservation) == 16, ctypes.sizeof(WpReservation)
assert ctypes.sizeof(WpDeviceRecord) == 40, ctypes.sizeof(WpDeviceRecord)
assert WpDeviceRecord.arena.offset == 16 and WpDeviceRecord.write_seq.offset == 32
assert ctypes.sizeof(WpOpenOptions) == 16, ctypes.sizeof(WpOpenOptions)
assert ctypes.sizeof(WpSummary) == 48 and WpSummary.producer_client.offset == 36 and WpSummary.reaped_clients.offset == 40

_VOIDP = ctypes.c_void_p
_DIGEST = ctypes.c_char_p  # const uint8_t digest[32]: a bytes object of exactly 32 bytes
_P = ctypes.POINTER

#: Every function this package calls: (result type, argument types).
SIGNATURES = {
    "wp_open_ex": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, _P(WpOpenOptions), _P(_VOIDP)]),
    "wp_segment_owner": (ctypes.c_int, [ctypes.c_char_p, _P(ctypes.c_uint32), _P(ctypes.c_uint32)]),
    "wp_close": (None, [_VOIDP]),
    "wp_unlink": (ctypes.c_int, [ctypes.c_char_p]),
    "wp_try_pin": (ctypes.c_int, [_VOIDP, _DIGEST, _P(WpDeviceRecord), _P(WpLease)]),
    "wp_unpin": (ctypes.c_int, [_VOIDP, _P(WpLease)]),
    "wp_reserve": (ctypes.c_int, [_VOIDP, _DIGEST, _P(WpReservation)]),
    "wp_publish": (ctypes.c_int, [_VOIDP, _P(WpReservation), _P(WpMeta)]),
    "wp_abandon": (ctypes.c_int, [_VOIDP, _P(WpReservation)]),
    "wp_try_evict": (ctypes.c_int, [_VOIDP, _DIGEST]),
    "wp_record_device_write": (ctypes.c_int, [_VOIDP, _DIGEST, _P(WpDeviceRecord)]),
    "wp_reap_dead_clients": (ctypes.c_int, [_VOIDP]),
    "wp_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "wp_abi_version": (ctypes.c_uint32, []),
    "wp_capacity": (ctypes.c_uint32, [_VOIDP]),
    "wp_client_index": (ctypes.c_int, [_VOIDP]),
    "wp_is_producer": (ctypes.c_int, [_VOIDP]),
    "wp_slot_state_gen": (ctypes.c_uint64, [_VOIDP, ctypes.c_uint32]),
    "wp_slot_pin_mask": (ctypes.c_uint64, [_VOIDP, ctypes.c_uint32]),
    "wp_client_pins": (ctypes.c_uint32, [_VOIDP, ctypes.c_uint32]),
    "wp_segment": (_VOIDP, [_VOIDP, _P(ctypes.c_size_t)]),
    "wp_check_segment": (ctypes.c_int, [_VOIDP, _P(ctypes.c_uint64)]),
    "wp_summarize": (ctypes.c_int, [_VOIDP, _P(WpSummary)]),
    "wp_pin_loop": (ctypes.c_uint64, [_VOIDP, _DIGEST, ctypes.c_uint64]),
    "wp_try_pin_exact": (ctypes.c_int, [_VOIDP, ctypes.c_uint32, ctypes.c_uint64, _DIGEST, _P(WpDeviceRecord), _P(WpLease)]),
    "wp_try_pin_prefix": (ctypes.c_int, [_VOIDP, ctypes.c_char_p, ctypes.c_uint32, _P(WpDeviceRecord), _P(WpLease)]),
    "wp_unpin_many": (ctypes.c_int, [_VOIDP, _P(WpLease), ctypes.c_uint32]),
    "wp_peek": (ctypes.c_int, [_VOIDP, _DIGEST]),
    "wp_peek_many": (ctypes.c_int, [_VOIDP, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_char_p]),
    "wp_unpin_indexed": (ctypes.c_int, [_VOIDP, _P(WpLease), ctypes.c_uint32, _P(ctypes.c_uint32), ctypes.c_uint32]),
}
