"""``python -m gpucheck``: the device check's command line (``scripts/gpu-check.sh`` runs it).

Exit status: 0 when every property held, 1 when any was violated (the report names each; a
setup failure, such as no CUDA device or a failed build, is one), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

from .report import Report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PARTS = ("uuids", "example", "readiness", "restore")

#: What every option defaults to on a GPU, and in the tiny CPU geometry (--tiny, --dry-run).
DEFAULTS = {
    "gpu": dict(sizes="2048,8192,32768", new_tokens=512, decode=16, reps=3, rounds=4000, control_rounds=500, artifact_bytes=2 << 20),
    "tiny": dict(sizes="256,512,1024", new_tokens=32, decode=4, reps=2, rounds=300, control_rounds=100, artifact_bytes=64 << 10),
}
#: A stand-in device UUID for the CPU dry run's device records (never all zeros: that means "no record").
CPU_STAND_IN_UUID = "GPU-00000000-0000-4000-8000-0000000000c0"


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/gpu-check.sh", description="waitprep's device check (docs/gpu.md).")
    p.add_argument("--dry-run", action="store_true", help="--device cpu --tiny: every part the CPU can run, on a tiny geometry")
    p.add_argument("--device", default=None, help="cuda (default), cuda:N, or cpu")
    p.add_argument("--tiny", action="store_true", help="the tiny geometry and small counts (the dry run's)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--json", default=None, help="where the report goes (default: $GPU_CHECK_JSON, else $OUT/gpu-check.json, else <build dir>/gpu-check.json)")
    p.add_argument("--build-dir", default=os.path.join(REPO, "build-gpu-check"))
    p.add_argument("--sizes", default=None, help="prompt sizes in tokens, comma-separated (default 2048,8192,32768)")
    p.add_argument("--new-tokens", type=int, default=None, help="N: tokens a hit prefills on top of the restored prefix (default 512)")
    p.add_argument("--decode", type=int, default=None, help="greedy tokens compared per turn (default 16)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions of each measurement, after one warm-up (default 3)")
    p.add_argument("--rounds", type=int, default=None, help="producer rounds of the readiness stress (default 4000)")
    p.add_argument("--control-rounds", type=int, default=None, help="rounds of the early-record control stress, a figure (default 500)")
    p.add_argument("--artifact-bytes", type=int, default=None, help="bytes of each readiness artifact (default 2 MiB)")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--arena-root", default="/dev/shm", help="where the storage tier's arenas go")
    p.add_argument("--skip", default="", help=f"parts not to run, comma-separated, of {','.join(PARTS)}")
    p.add_argument("--watchdog", type=float, default=390.0,
                   help="seconds after which a run still going prints every thread's stack and exits 1 (0: never; default 390)")
    args = p.parse_args(argv)
    if args.dry_run:
        args.device = args.device or "cpu"
        args.tiny = True
    args.device = args.device or "cuda"
    for name, value in DEFAULTS["tiny" if args.tiny else "gpu"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    args.skip = {s for s in args.skip.split(",") if s}
    unknown = args.skip - set(PARTS)
    if unknown:
        p.error(f"--skip: unknown part(s) {sorted(unknown)}; known: {', '.join(PARTS)}")
    if any(s <= args.new_tokens for s in args.sizes):
        p.error(f"--sizes {args.sizes}: each must exceed --new-tokens {args.new_tokens}")
    if args.json is None:
        args.json = os.environ.get("GPU_CHECK_JSON") or (os.path.join(os.environ["OUT"], "gpu-check.json") if os.environ.get("OUT") else os.path.join(args.build_dir, "gpu-check.json"))
    return args


def _guard(report: Report, part: str, fn: Callable[[], Any]) -> Any:
    """Runs one part; an exception in it is a violated property (the other parts still run)."""
    start = time.perf_counter()
    try:
        return fn()
    except Exception as error:  # reported as the part's failure, with where it came from
        where = "".join(traceback.format_exception(type(error), error, error.__traceback__)[-3:]).strip()
        report.holds(f"{part}: ran to the end", False, f"{type(error).__name__}: {error} [{where[-600:]}]")
        return None
    finally:
        report.say(f"     {part}: {time.perf_counter() - start:.1f} s")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(argv)
    if args.watchdog > 0:
        # A hang (a host function that never gets to run, say) then ends with the stacks that
        # show where, inside the caller's time limit, and the report written so far.
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    cuda = args.device.startswith("cuda")
    report = Report(args.json, "gpu" if cuda else ("dry-run" if args.tiny else "cpu"))
    report.data["options"] = {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items() if k != "json"}
    report.say(f"gpucheck: {report.data['mode']} on {args.device}; report: {args.json}")

    import torch

    if cuda and not torch.cuda.is_available():
        report.holds("a CUDA device is available", False, f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees none; use --dry-run on a machine without a GPU")
        return report.finish()
    if not cuda:
        for part, why in (("cuda-uuids", "no GPU: PyTorch's and nvidia-smi's UUIDs need one"),
                          ("cuda-example-run", "no GPU: the CUDA example stops at its first CUDA call"),
                          ("readiness-cuda", "no GPU: copies, host functions and events run on a CPU stand-in stream (an ordered worker thread)"),
                          ("restore-cuda", "no GPU: the engine runs on the CPU, the arena is mapped but not registered, and timings are not a GPU's")):
            report.skip(part, why)

    from . import build, devices

    report.put("environment", devices.environment(REPO, args.device))
    tag = f"gpucheck-{os.getpid()}"

    built: Dict[str, Any] = {"library": build.build_library(REPO, args.build_dir)}
    if "error" in built["library"]:
        report.holds("build: libwaitprep.so with CMake", False, built["library"]["error"])
        report.put("build", built)
        return report.finish()
    library = built["library"]["path"]
    # Every waitprep call in this process loads this library (the package reads the variable at
    # its first load).
    os.environ["WAITPREP_LIBRARY"] = library
    report.holds("build: libwaitprep.so with CMake", True, f"{library} in {built['library']['seconds']} s")
    if "example" not in args.skip:
        built["cuda_example"] = build.build_cuda_example(REPO, args.build_dir, os.path.dirname(library))
        ok = "error" not in built["cuda_example"]
        if ok or cuda:
            report.holds("build: the CUDA example with nvcc", ok, built["cuda_example"].get("error") or f"{built['cuda_example']['path']} ({built['cuda_example']['nvcc']})")
        else:
            report.skip("cuda-example-build", built["cuda_example"]["error"])
    report.put("build", built)

    free = shutil.disk_usage(args.arena_root).free if os.path.isdir(args.arena_root) else 0
    # One record of the largest size at a time (each size's is evicted before the next), twice
    # over for headroom; 128 KiB of KV per token at the 8B geometry in bf16.
    need = 2 * max(args.sizes) * 131072 if not args.tiny else 1 << 24
    if "restore" not in args.skip and free < need:
        report.holds("setup: room for the arenas", False, f"{args.arena_root} has {free / 2**30:.1f} GiB free, the restore needs about {need / 2**30:.1f} GiB (--arena-root names another tmpfs)")
        return report.finish()

    uuid = CPU_STAND_IN_UUID
    if "uuids" in args.skip:
        report.skip("uuids", "--skip")
    else:
        index = (torch.device(args.device).index or 0) if cuda else 0
        found = _guard(report, "uuids", lambda: uuids(report, library, cuda, index))
        if cuda and found:
            uuid = found.get("device_uuid") or uuid
    if cuda and uuid == CPU_STAND_IN_UUID:
        uuid = devices.normalize_uuid(torch.cuda.get_device_properties(torch.device(args.device).index or 0).uuid) or uuid

    if "example" in args.skip:
        report.skip("example", "--skip")
    elif cuda and built.get("cuda_example", {}).get("path"):
        _guard(report, "example", lambda: example(report, built["cuda_example"]["path"], f"{tag}-example"))

    if "readiness" in args.skip:
        report.skip("readiness", "--skip")
    else:
        from . import readiness

        got = _guard(report, "readiness", lambda: readiness.run(report, args.device, uuid, f"{tag}-readiness", args.rounds, args.control_rounds, args.artifact_bytes, args.seed))
        if got is not None:
            report.put("readiness", got)

    if "restore" in args.skip:
        report.skip("restore", "--skip")
    else:
        from tfengine.model import GEOMETRIES, Geometry

        from . import restore

        geometry = GEOMETRIES["tiny"] if args.tiny else Geometry(**restore.LLAMA_31_8B)
        got = _guard(report, "restore", lambda: restore.run(report, args.device, args.dtype, geometry, args.sizes, args.new_tokens, args.decode,
                                                           args.reps, f"{tag}-restore", args.seed, args.arena_root))
        if got is not None:
            report.put("restore", got)
            summary = summarize(got)
            report.put("summary", summary)
            for line in summary["lines"]:
                report.say(line)
    faulthandler.cancel_dump_traceback_later()
    return report.finish()


def uuids(report: Report, library: str, cuda: bool, index: int) -> Dict[str, Any]:
    """waitprep's CUDA discovery against PyTorch and ``nvidia-smi -L``."""
    from . import devices

    mine, why_not = devices.waitprep_devices(library)
    figures: Dict[str, Any] = {"waitprep": mine, "waitprep_reason": why_not}
    if not cuda:
        figures["note"] = "CPU run: waitprep's discovery is recorded as it answered here; nothing to compare it with"
        report.holds("uuids: waitprep's discovery answers without a GPU (devices or a reason)", mine is not None or bool(why_not),
                     f"devices {mine}" if mine is not None else f"reason: {why_not}")
        report.put("uuids", figures)
        return figures
    theirs, torch_why = devices.torch_devices()
    smi, smi_why = devices.nvidia_smi_devices()
    figures.update(torch=theirs, torch_reason=torch_why, nvidia_smi=smi, nvidia_smi_reason=smi_why)
    mine_set = {d["uuid"] for d in mine or []}
    torch_set = {d["uuid"] for d in theirs or []}
    smi_set = {d["uuid"] for d in smi or []}
    by_ordinal = all(d["uuid"] == next((t["uuid"] for t in theirs or [] if t["ordinal"] == d["ordinal"]), None) for d in mine or [])
    # nvidia-smi lists every GPU; CUDA_VISIBLE_DEVICES may hide some from CUDA.
    hidden = bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    smi_ok = (torch_set <= smi_set) if hidden else (torch_set == smi_set)
    ok = bool(mine) and mine_set == torch_set and by_ordinal and smi_ok
    report.holds("uuids: waitprep's CUDA discovery, PyTorch and nvidia-smi -L name the same GPUs", ok,
                 f"waitprep {sorted(mine_set) or why_not}; torch {sorted(torch_set) or torch_why}; nvidia-smi {sorted(smi_set) or smi_why}"
                 + ("" if by_ordinal else "; ordinals differ between waitprep and torch"))
    figures["device_uuid"] = next((t["uuid"] for t in theirs or [] if t["ordinal"] == index), None)
    report.put("uuids", figures)
    return figures


def example(report: Report, path: str, table: str) -> Dict[str, Any]:
    """The CUDA example, run as a producer of a table of its own."""
    import waitprep

    from . import build

    got = build.run_cuda_example(path, table)
    try:
        waitprep.unlink_table(table)
    except waitprep.WaitprepError:
        pass
    wrong = build.expected_example_lines(got.get("lines", []))
    report.holds("example: the CUDA example's records, pins and device bytes are the documented ones", got.get("exit") == 0 and wrong is None,
                 f"exit {got.get('exit')}; " + (wrong or "every outcome as documented") + f"; output: {' | '.join(got.get('lines', [])[-6:])}")
    report.put("cuda_example", got)
    return got


def summarize(restored: Dict[str, Any]) -> Dict[str, Any]:
    """The figures that go into docs/gpu.md's table and stand in for the experiment's assumptions."""
    rows = restored["sizes"]
    lines = [f"{'tokens':>7} {'prefill tok/s':>13} {'restore GB/s':>12} {'restore ms':>10} {'plain H2D GB/s':>14} {'hit prefill ms':>14} {'saved ms':>9} {'max|dlogit|':>11} {'greedy':>7}"]
    for r in rows:
        lg = r["logits"]
        lines.append(f"{r['tokens']:>7} {r['prefill_tokens_per_s']:>13,.0f} {r['restore']['gb_per_s']:>12.1f} {r['restore']['total_ms']:>10.1f} "
                     f"{r['plain_h2d']['gb_per_s']:>14.1f} {r['hit_prefill_s'] * 1e3:>14.1f} {r['saved_per_hit_s'] * 1e3:>9.1f} "
                     f"{lg['max_abs_diff']:>11.4g} {lg['greedy_agree']:>3}/{lg['greedy_tokens']:<3}")
    return {
        "prefill_tokens_per_s": {str(r["tokens"]): round(r["prefill_tokens_per_s"]) for r in rows},
        "restore_gb_per_s": {str(r["tokens"]): round(r["restore"]["gb_per_s"], 2) for r in rows},
        "plain_h2d_gb_per_s": {str(r["tokens"]): round(r["plain_h2d"]["gb_per_s"], 2) for r in rows},
        "saved_per_hit_s": {str(r["tokens"]): round(r["saved_per_hit_s"], 4) for r in rows},
        "greedy_agree_share": sum(r["logits"]["greedy_agree"] for r in rows) / max(1, sum(r["logits"]["greedy_tokens"] for r in rows)),
        "lines": lines,
    }


if __name__ == "__main__":
    sys.exit(main())
