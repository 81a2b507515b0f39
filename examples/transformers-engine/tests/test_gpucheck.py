"""The device check's own logic, on the CPU: the stand-in stream's ordering, device readiness through
the Python package (records only after the copy, misses for every other target, the control that
shows a stale read is seen), the restore on the tiny geometry, and the report's verdict.

The same code runs on a GPU with a CUDA stream (scripts/gpu-check.sh; docs/gpu.md)."""

from __future__ import annotations

import io
import json
import os
import tempfile
import unittest
import unittest.mock

from _support import library_problem, table_name

import torch

from gpucheck import build, cli, devices, readiness
from gpucheck.report import Report
from gpucheck.streams import CpuStream

PROBLEM = library_problem()
UUID = cli.CPU_STAND_IN_UUID


class Uuids(unittest.TestCase):
    def test_every_form_a_source_gives_is_one_target_string(self) -> None:
        want = "GPU-5e1f0a2b-0c3d-4e5f-8a9b-0c1d2e3f4a5b"
        for form in (want, want.upper(), want[4:], want[4:].replace("-", ""), bytes.fromhex(want[4:].replace("-", ""))):
            self.assertEqual(devices.normalize_uuid(form), want, form)
        for bad in ("GPU-5e1f", "", "MIG-5e1f0a2b-0c3d-4e5f-8a9b-0c1d2e3f4a5bxx", b"\x00" * 15):
            self.assertIsNone(devices.normalize_uuid(bad), bad)
        self.assertEqual(devices.format_uuid(bytes(range(16))), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f")

    def test_nvidia_smi_lines_give_gpus_and_not_their_mig_devices(self) -> None:
        text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5E1F0A2B-0C3D-4E5F-8A9B-0C1D2E3F4A5B)\n"
                "  MIG 1g.10gb     Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)\n"
                "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)\n")
        self.assertEqual(devices.parse_nvidia_smi_list(text), [
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5e1f0a2b-0c3d-4e5f-8a9b-0c1d2e3f4a5b"},
            {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-0000-0000-000000000001"},
        ])

    @unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
    def test_waitprep_discovery_answers_devices_or_a_reason(self) -> None:
        import waitprep

        found, reason = devices.waitprep_devices(waitprep.load_library()._name)
        if found is None:
            self.assertTrue(reason)
        else:
            self.assertTrue(all(devices.normalize_uuid(d["uuid"]) == d["uuid"] for d in found))


class Stream(unittest.TestCase):
    def test_work_runs_in_order_and_a_hold_keeps_what_follows_waiting(self) -> None:
        stream = CpuStream()
        self.addCleanup(stream.close)
        src, dst = torch.arange(8, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)
        seen = []
        release = stream.hold()
        stream.copy(dst, src)
        stream.host_function(lambda: seen.append(dst.clone()))
        done = stream.event()
        self.assertTrue(stream.busy())
        self.assertFalse(done.query())
        self.assertEqual(seen, [])
        release()
        stream.synchronize()
        self.assertTrue(done.query())
        self.assertFalse(stream.busy())
        self.assertTrue(torch.equal(seen[0], src))

    def test_an_error_in_a_host_function_is_raised_by_synchronize(self) -> None:
        stream = CpuStream()
        self.addCleanup(stream.close)
        stream.host_function(lambda: 1 / 0)
        with self.assertRaisesRegex(RuntimeError, "ZeroDivisionError"):
            stream.synchronize()


@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class Readiness(unittest.TestCase):
    def setUp(self) -> None:
        self.setup = readiness.Setup(table_name("gpucheck"), "cpu", UUID, 4096, artifacts=8, arenas=4, seed=5)
        self.addCleanup(self.setup.close)

    def test_each_way_records_after_the_copy_and_only_that_target_hits(self) -> None:
        for i, way in enumerate(readiness.WAYS):
            got = readiness.check_record_after_copy(self.setup, way, artifact=i, arena=i)
            self.assertEqual(got, {"way": way, "hit": "hit", "bytes_equal": True, "other_device": "device-mismatch",
                                   "other_arena": "device-mismatch", "reused_arena": "arena-generation-mismatch"})
        self.assertEqual(dict(self.setup.producer.records), {"recorded": 2})

    def test_a_write_held_incomplete_is_a_miss_until_it_completes(self) -> None:
        for i, way in enumerate(readiness.WAYS):
            got = readiness.check_incomplete_write(self.setup, way, artifact=2 + i, arena=2 + i)
            self.assertEqual(got, {"way": way, "copy_incomplete_while_pinning": True, "during": "no-device-record",
                                   "during_bytes_equal": None, "after": "hit", "after_bytes_equal": True})

    def test_control_a_record_made_at_enqueue_lets_a_consumer_read_stale_bytes_and_the_check_sees_it(self) -> None:
        got = readiness.check_incomplete_write(self.setup, "early", artifact=4, arena=0)
        self.assertEqual((got["copy_incomplete_while_pinning"], got["during"], got["during_bytes_equal"]), (True, "hit", False))
        self.assertEqual((got["after"], got["after_bytes_equal"]), ("hit", True))

    def test_stress_has_no_stale_or_wrong_artifact_hit(self) -> None:
        got = readiness.stress(self.setup, 200, readiness.WAYS, seed=3)
        self.assertEqual((got["stale_hits"], got["wrong_artifact_hits"]), (0, 0), got)
        self.assertEqual(got["records"], {"recorded": 200})
        self.assertGreater(got["pins"], 0)



@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class ReadinessRun(unittest.TestCase):
    def test_run_records_every_property_on_the_report(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            report = Report(os.path.join(tmp, "r.json"), "test", out=io.StringIO())
            figures = readiness.run(report, "cpu", UUID, table_name("gpucheck-run"), rounds=100, control_rounds=20, artifact_bytes=4096, seed=2)
        names = [p["name"] for p in report.properties]
        self.assertEqual(len(names), 9, names)
        self.assertEqual(report.violated(), [], report.properties)
        self.assertEqual(figures["stress"]["rounds"], 100)
        self.assertEqual(figures["stress_control_early_record"]["rounds"], 20)


@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class Restore(unittest.TestCase):
    def test_tiny_restore_is_byte_exact_and_its_logits_within_the_bound(self) -> None:
        from tfengine.model import GEOMETRIES

        from gpucheck import restore

        with tempfile.TemporaryDirectory() as tmp:
            report = Report(os.path.join(tmp, "r.json"), "test", out=io.StringIO())
            name = table_name("gpucheck-restore")
            got = restore.run(report, "cpu", "float32", GEOMETRIES["tiny"], [96], 16, 3, 1, name, 7, "/dev/shm")
        self.assertEqual(report.violated(), [], report.properties)
        self.assertEqual(len(report.properties), 2)
        row = got["sizes"][0]
        self.assertEqual((row["tokens"], row["prefix_tokens"], row["new_tokens"]), (96, 80, 16))
        self.assertEqual(row["restore"]["bytes"], 80 * GEOMETRIES["tiny"].kv_bytes_per_token(4))
        self.assertTrue(row["restored_kv_equals_resident"])
        self.assertTrue(row["hit_logits_equal_resident_bitwise"])
        self.assertEqual(row["logits"]["greedy_tokens"], 3)
        # The table, its arenas and the disk tier are gone.
        self.assertFalse(os.path.exists(os.path.join("/dev/shm", name)))
        self.assertFalse(os.path.exists(os.path.join("/dev/shm", name + "-arena")))


class Verdict(unittest.TestCase):
    def test_a_violated_property_fails_the_run_and_the_report_says_which(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            report = Report(path, "test", out=io.StringIO())
            report.holds("one", True, "fine")
            report.skip("part", "why")
            self.assertEqual(report.finish(), 0)
            report.holds("two", False, "not fine")
            self.assertEqual(report.finish(), 1)
            with open(path) as f:
                data = json.load(f)
        self.assertEqual(data["verdict"], "violated")
        self.assertEqual([p["name"] for p in data["properties"] if not p["holds"]], ["two"])
        self.assertEqual(data["skipped"], [{"part": "part", "reason": "why"}])

    def test_the_example_output_is_checked_line_by_line(self) -> None:
        good = ["host function: WP_OK (device GPU-x arena 3 generation 7)", "pin with generation 7: WP_OK; device bytes equal the artifact's",
                "pin with generation 8 before a new write: WP_MISS_ARENA_GENERATION_MISMATCH", "event: WP_OK", "pin with generation 8 after it: WP_OK", "ok"]
        self.assertIsNone(build.expected_example_lines(good))
        stale = list(good)
        stale[2] = "pin with generation 8 before a new write: WP_OK"
        self.assertIn("WP_MISS_ARENA_GENERATION_MISMATCH", build.expected_example_lines(stale))

    def test_the_uuid_comparison_holds_only_when_all_three_sources_agree(self) -> None:
        a, b = "GPU-5e1f0a2b-0c3d-4e5f-8a9b-0c1d2e3f4a5b", "GPU-00000000-0000-0000-0000-000000000001"
        cases = [
            ([a], [a], [a], True),
            ([a], [a], [a, b], False),  # nvidia-smi sees a GPU CUDA does not, and nothing hides it
            ([a], [b], [b], False),
            (None, [a], [a], False),  # the driver was not found by waitprep
        ]
        for mine, theirs, smi, holds in cases:
            with unittest.mock.patch.object(devices, "waitprep_devices", return_value=(None if mine is None else [{"ordinal": i, "uuid": u} for i, u in enumerate(mine)], "no driver")), \
                    unittest.mock.patch.object(devices, "torch_devices", return_value=([{"ordinal": i, "uuid": u, "name": "x"} for i, u in enumerate(theirs)], None)), \
                    unittest.mock.patch.object(devices, "nvidia_smi_devices", return_value=([{"index": i, "name": "x", "uuid": u} for i, u in enumerate(smi)], None)), \
                    unittest.mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": ""}):
                with tempfile.TemporaryDirectory() as tmp:
                    report = Report(os.path.join(tmp, "r.json"), "test", out=io.StringIO())
                    got = cli.uuids(report, "unused", True, 0)
                self.assertEqual(report.properties[0]["holds"], holds, (mine, theirs, smi, report.properties))
                self.assertEqual(got["device_uuid"], theirs[0])

    def test_the_example_is_run_and_judged_by_its_exit_and_its_lines(self) -> None:
        good = ["host function: WP_OK", "pin with generation 7: WP_OK; device bytes equal the artifact's",
                "pin with generation 8 before a new write: WP_MISS_ARENA_GENERATION_MISMATCH", "event: WP_OK", "pin with generation 8 after it: WP_OK"]
        with tempfile.TemporaryDirectory() as tmp:
            for lines, code, holds in ((good, 0, True), (good, 1, False), (good[:3], 0, False)):
                fake = os.path.join(tmp, "example-%d-%d" % (len(lines), code))
                with open(fake, "w") as f:
                    f.write("#!/bin/sh\n" + "".join("echo \"%s\"\n" % line for line in lines) + "exit %d\n" % code)
                os.chmod(fake, 0o755)
                report = Report(os.path.join(tmp, "r.json"), "test", out=io.StringIO())
                got = cli.example(report, fake, table_name("gpucheck-example"))
                self.assertEqual(report.properties[0]["holds"], holds, report.properties)
                self.assertEqual(got["lines"], lines)

    def test_options_the_dry_run_and_a_size_too_small(self) -> None:
        args = cli.parse(["--dry-run", "--json", "x.json"])
        self.assertEqual((args.device, args.tiny, args.sizes, args.new_tokens), ("cpu", True, [256, 512, 1024], 32))
        args = cli.parse(["--json", "x.json"])
        self.assertEqual((args.device, args.sizes, args.new_tokens, args.rounds), ("cuda", [2048, 8192, 32768], 512, 4000))
        with self.assertRaises(SystemExit), unittest.mock.patch("sys.stderr", io.StringIO()):
            cli.parse(["--sizes", "512", "--new-tokens", "512"])


if __name__ == "__main__":
    unittest.main()
