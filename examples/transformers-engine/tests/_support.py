"""What the tests share: the tiny geometry's engine (built once per process) and seeded prompts."""

from __future__ import annotations

import os
import random
import sys
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(EXAMPLE))
for path in (EXAMPLE, os.path.join(REPO, "python")):
    if path not in sys.path:
        sys.path.insert(0, path)

from tfengine.engine import Engine  # noqa: E402
from tfengine.model import GEOMETRIES, VOCAB  # noqa: E402

SEED = 11
_engine = None


def engine() -> Engine:
    """One tiny engine per test process: building a model is the slow part of a test."""
    global _engine
    if _engine is None:
        _engine = Engine(GEOMETRIES["tiny"], SEED)
    return _engine


def tokens(seed: int, n: int) -> List[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB) for _ in range(n)]


def library_problem():
    """Why libwaitprep.so cannot be loaded here, or None."""
    import waitprep

    try:
        waitprep.load_library()
    except waitprep.WaitprepError as error:
        return str(error)
    return None


_serial = [0]


def table_name(what: str) -> str:
    """A table name no other test or run uses."""
    _serial[0] += 1
    return "tfengine-test-%s-%d-%d" % (what, os.getpid(), _serial[0])


class StorageCase:
    """A mixin: a storage tier over a fresh table and disk tier (``self.tier``, ``self.producer``),
    a consumer handle (``self.consumer``) and the tiny engine's identity (``self.identity``), all
    removed afterwards. ``publish_context`` runs a turn, saves its KV and prepares it."""

    budget = 1 << 30

    def setUp(self) -> None:
        import shutil
        import tempfile

        import waitprep

        from tfengine.model import model_identity
        from tfengine.storage import StorageTier

        self.name = table_name(type(self).__name__.lower())
        self.disk = tempfile.mkdtemp(prefix="tfengine-disk-")
        self.addCleanup(shutil.rmtree, self.disk, True)
        self.producer = waitprep.create_table(self.name, 64)
        self.addCleanup(waitprep.unlink_table, self.name)
        self.addCleanup(self.producer.close)
        self.tier = StorageTier(self.producer, self.disk, self.budget)
        self.addCleanup(self.tier.close)
        self.consumer = waitprep.open_table(self.name)
        self.addCleanup(self.consumer.close)
        self.identity = model_identity(engine().geometry, SEED)

    def fields(self, context, task="task-0", namespace="team-a", page_generation=0):
        from tfengine.model import key_fields

        return key_fields(self.identity, context, task, namespace, page_generation)

    def save_context(self, context, **identity):
        """A first turn on ``context``; its KV saved to the disk tier. Returns (digest, wire b64, result)."""
        import base64

        import waitprep

        from tfengine import kvcodec
        from tfengine.storage import save_to_disk

        fields = self.fields(context, **identity)
        wire = waitprep.encode_key(fields)
        digest = waitprep.key_digest(fields)
        result = engine().turn(context, None, decode=2)
        save_to_disk(self.disk, digest, kvcodec.encode(result.cache), len(context))
        return digest, base64.b64encode(wire).decode(), result

    def publish_context(self, context, **identity):
        digest, wire, result = self.save_context(context, **identity)
        reply = self.tier.prepare(digest.hex(), wire)
        return digest, reply, result
