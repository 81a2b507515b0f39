"""The prefix bench runs, small, and reports well-formed figures (never judged on a time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

from _support import child_env, needs_library

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "prefix_pins.py")


@needs_library
@unittest.skipUnless(os.path.isfile(BENCH), "python/bench/prefix_pins.py is not beside these tests")
class PrefixBench(unittest.TestCase):
    def test_it_measures_every_case_and_checks_its_own_counts(self) -> None:
        run = subprocess.run([sys.executable, BENCH, "--chunks", "16", "--rounds", "20", "--json"], capture_output=True, text=True, env=child_env(), timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        out = json.loads(run.stdout)
        self.assertEqual([r["case"] for r in out["results"]], ["loop", "loop-raw", "prefix", "prefix+leases"])
        for r in out["results"]:
            self.assertEqual(r["chunks"], 16)
            self.assertGreater(r["us_per_round"], 0)
            self.assertGreater(r["speedup_vs_loop"], 0)
        self.assertEqual(set(out["env"]), {"date", "cpu", "cores", "python", "library"})


if __name__ == "__main__":
    unittest.main()
