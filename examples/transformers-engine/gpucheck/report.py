"""The check's report: its properties (each holds or is violated), what it skipped and why, and
every figure, written as one JSON file after each part so that a run stopped at its time limit
still leaves what it measured."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, TextIO


class Report:
    """What one run found. ``holds`` records a property; ``skip`` a part that did not run, with
    the reason; ``put`` a part's figures. ``exit_code`` is 1 when any property was violated."""

    def __init__(self, path: str, mode: str, out: TextIO = sys.stdout) -> None:
        self.path = path
        self.out = out
        self._start = time.perf_counter()
        self.data: Dict[str, Any] = {
            "schema": 1,
            "mode": mode,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": 0.0,
            "properties": [],
            "skipped": [],
        }

    @property
    def properties(self) -> List[Dict[str, Any]]:
        return self.data["properties"]

    def holds(self, name: str, ok: bool, detail: str) -> bool:
        """Records property ``name``: ``ok`` says whether it held, ``detail`` what was seen."""
        self.properties.append({"name": name, "holds": bool(ok), "detail": detail})
        self.say(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        return bool(ok)

    def skip(self, part: str, reason: str) -> None:
        """Records that ``part`` did not run, and why."""
        self.data["skipped"].append({"part": part, "reason": reason})
        self.say(f"skip {part}: {reason}")

    def put(self, part: str, figures: Any) -> None:
        """Stores ``part``'s figures and writes the report."""
        self.data[part] = figures
        self.write()

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def violated(self) -> List[Dict[str, Any]]:
        return [p for p in self.properties if not p["holds"]]

    def exit_code(self) -> int:
        return 1 if self.violated() else 0

    def write(self) -> None:
        """Writes the report whole (to a temporary name, then renamed: a reader never sees half)."""
        self.data["wall_s"] = round(time.perf_counter() - self._start, 3)
        self.data["verdict"] = "violated" if self.violated() else "holds"
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        partial = f"{self.path}.{os.getpid()}.partial"
        with open(partial, "w") as f:
            json.dump(self.data, f, indent=2, sort_keys=False, default=_plain)
            f.write("\n")
        os.replace(partial, self.path)

    def finish(self, extra: Optional[Dict[str, Any]] = None) -> int:
        """Writes the report a last time and prints the summary; returns the exit code."""
        if extra:
            self.data.update(extra)
        self.write()
        bad = self.violated()
        self.say(f"{len(self.properties)} properties, {len(bad)} violated, {len(self.data['skipped'])} parts skipped; "
                 f"{self.data['wall_s']:.1f} s; report: {self.path}")
        for p in bad:
            self.say(f"violated: {p['name']}: {p['detail']}")
        return self.exit_code()


def _plain(value: Any) -> Any:
    """JSON for what json does not know: tuples are lists already; anything else by its str."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
