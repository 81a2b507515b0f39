"""waitprep for a Python model runtime: the shared-memory lease table over libwaitprep.so, and keys.

The Node package (the orchestrator's side: the wait coordinator) and this one share one table
through the C ABI in native/include/waitprep.h. A runtime's storage worker is the table's single
producer; an engine pins what it loads. Standard library and ctypes only.

- :func:`create_table`, :func:`open_table`, :class:`Table`, :class:`Lease`: both roles, with the
  Node API's semantics and error codes (``lib/lease-table/table.ts``).
- :func:`key_digest` (``waitprep.key``): the 32-byte digest Node's ``artifactKey(fields).digest``
  gives for the same fields.
- :class:`WaitprepError`: every error, with ``.code``. A miss is a value: a reason string.
- :func:`load_library`: where libwaitprep.so is found (``WAITPREP_LIBRARY``; see
  ``waitprep.library``).
- Handoff (:meth:`Table.try_pin_exact`, ``waitprep.handoff``), prefix lookups
  (:meth:`Table.try_pin_prefix`, :class:`LeaseRun`) and :meth:`Table.peek`; chained chunk keys
  (``waitprep.chunk_keys``), manifests (``waitprep.manifest``) and arena records
  (``waitprep.arena``: where a lease's bytes are).
- Engine keys (``waitprep.engine_keys``: the digest from an engine's storage key alone) and the
  engine adapters (``waitprep.adapters.vllm``, ``.sglang``, ``.lmcache``; docs/integration.md).
"""

from . import arena, chunk_keys, engine_keys, key, manifest
from .chunk_keys import ChunkChain, ChunkKey, ManifestKey
from .engine_keys import EngineKeys
from .errors import WaitprepError
from .inspection import ClientCounts, ClientInspection, SlotCounts, SlotInspection, TableInspection, TableSummary
from .handoff import HandoffToken, format_handoff_token, parse_handoff_token
from .key import InvalidKeyError
from .key import digest as key_digest
from .key import encode as encode_key
from .library import library_candidates, load_library
from .manifest import ManifestProducer, decode_manifest, encode_manifest
from .table import MISS_REASONS, Lease, LeaseMeta, LeaseRun, Reservation, Table, create_table, device_uuid_bytes, open_table, unlink_table
from ._abi import ABI_VERSION

__version__ = "0.1.0"

__all__ = [
    "ABI_VERSION",
    "ChunkChain",
    "ChunkKey",
    "ClientCounts",
    "ClientInspection",
    "EngineKeys",
    "HandoffToken",
    "InvalidKeyError",
    "Lease",
    "LeaseMeta",
    "LeaseRun",
    "MISS_REASONS",
    "ManifestKey",
    "ManifestProducer",
    "Reservation",
    "SlotCounts",
    "SlotInspection",
    "Table",
    "TableInspection",
    "TableSummary",
    "WaitprepError",
    "arena",
    "chunk_keys",
    "create_table",
    "decode_manifest",
    "device_uuid_bytes",
    "encode_key",
    "encode_manifest",
    "engine_keys",
    "format_handoff_token",
    "key",
    "key_digest",
    "manifest",
    "library_candidates",
    "load_library",
    "open_table",
    "parse_handoff_token",
    "unlink_table",
]
