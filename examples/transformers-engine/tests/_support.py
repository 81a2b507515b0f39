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
