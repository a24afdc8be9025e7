#!/usr/bin/env python3
"""Issue #13 on a GPU, in one device call: ``cypressc tune`` from the plain mappings, the tuned
kernels against cuBLAS, and the PyTorch op under torch.compile and CUDA graphs.

    PYTHONUNBUFFERED=1 python3 bench/tune_gpu.py [--programs gemm,dual_gemm,gemm_reduction]
        [--sizes 4096,8192] [--budget 16] [--rounds 5] [--reps 10] [--time-limit 540]
        [--tune-section FILE.yaml] [--compile-only]

Tunes run size by size (every program at 4096, then at 8192): ``search(programs/P.cyp,
mappings/P/h100_plain.yaml, M=N=K=n)`` (the default search space, or the one a
``--tune-section`` YAML file appended to every mapping narrows; --budget candidates compiled;
each checked against the float32 PyTorch reference of bench/gpu_check.py before it is
timed), the best mapping written to $OUT/tuned_<P>_<n>.yaml.  One worker process per GPU
serves every tune (cypressc.tuner.timing), and the space and its rendered candidates, the
compiler's verdicts and the kernel cache ($CYPRESSC_CACHE_DIR, default build/tune_cache)
carry over from one size to the next.  Each phase start and end, each failed candidate (with
why: refused, launch error, crash, hang, or a wrong result with its error, NaN and wrong
element counts) and each timed candidate prints a line stamped with the seconds since the
start.  A tune starts only if the longest earlier one at that size still fits before
--time-limit less 60 s (the cuBLAS and op checks).  Then, in this process, each best kernel
is timed against the cuBLAS composition of bench/variants.py (gemm: torch.matmul; dual_gemm:
two matmuls + add; gemm_reduction: matmul + sum), interleaved rounds, median; and the best
gemm kernel, registered as ``torch.ops.cypressc.gemm_tuned``, runs under ``torch.compile(
fullgraph=True)`` (compared with eager) and in a CUDA graph of 10 calls replayed on new
inputs (compared with torch).  A table is printed last; JSON goes to $OUT/tune_gpu.json
(per tune: counts, seconds per phase, the failures with their details).  Exit status 0 when
every tune found a correct kernel, no candidate the compiler accepted failed on the GPU
(wrong result, crash, hang, launch error: listed after the table) and the op checks pass (the
ratios to cuBLAS are reported, with "below 0.95" flagged).  ``--compile-only`` is the dry run
for a machine without a GPU: prune and compile only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gpu_check import PROGRAMS  # noqa: E402
from op_checks import op_checks as gemm_op_checks  # noqa: E402

OUT = os.environ.get("OUT")


# The references the tuner's workers load (``--reference bench/tune_gpu.py:ref_<program>``).
def ref_gemm(t):
    return PROGRAMS["gemm"].ref(t)


def ref_dual_gemm(t):
    return PROGRAMS["dual_gemm"].ref(t)


def ref_gemm_reduction(t):
    return PROGRAMS["gemm_reduction"].ref(t)


def ref_gemm_fp8(t):
    return PROGRAMS["gemm_fp8"].ref(t)


T0 = time.time()


def stamp(msg: str) -> None:
    """One progress line, stamped with the seconds since the start."""
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


class Lines:
    """The interface of :class:`cypressc.tuner.report.Progress`, as timestamped lines: each
    phase's start and end (with its seconds), each GPU worker start, each candidate's check
    (its seconds, or why it failed) and each timed candidate."""

    def __init__(self, tag: str, space) -> None:
        self.tag, self.space = tag, space
        self.open: tuple[str, float] | None = None

    def close(self) -> None:
        if self.open is not None:
            stamp(f"{self.tag}: {self.open[0]}: done in {time.time() - self.open[1]:.1f} s")
            self.open = None

    def start(self, phase: str, description: str, total: int, done: int = 0) -> None:
        self.close()
        self.open = (description, time.time())
        stamp(f"{self.tag}: {description}: {total}" + (f" ({done} cached)" if done else ""))

    def advance(self, phase: str) -> None:
        pass

    def event(self, ev: dict, cand) -> None:
        knobs = self.space.describe(cand.values) if cand is not None else ev.get("label")
        if ev.get("event") == "started":
            stamp(
                f"{self.tag}:   GPU worker {ev['gpu']} ({ev['device']}) started in {ev['seconds']:.1f} s "
                f"(start #{ev['starts']})"
            )
        elif ev.get("event") == "checked" and not ev.get("ok"):
            stamp(f"{self.tag}:   FAILED ({ev.get('kind')}) {knobs}: {ev.get('error')}")
        elif ev.get("event") == "checked":
            stamp(
                f"{self.tag}:   checked in {ev.get('seconds', 0):.2f} s (rel {ev.get('rel', 0):.1e}, "
                f"~{ev.get('est_ms', 0):.3f} ms) {knobs}"
            )
        elif ev.get("event") == "result":
            stamp(
                f"{self.tag}:   {ev['tflops']:7.1f} TFLOP/s ({ev['ms']:.3f} ms, rel {ev.get('rel', 0):.1e}) {knobs}"
            )


def split_entry(entry: str) -> tuple[str, str]:
    """``P`` -> (P, h100_plain); ``P:STEM`` -> (P, STEM): the start mapping mappings/P/STEM.yaml."""
    program, _, stem = entry.partition(":")
    return program, stem or "h100_plain"


def plain_mapping(entry: str, args) -> Path:
    """mappings/P/h100_plain.yaml (or mappings/P/STEM.yaml for ``P:STEM``), or a copy with
    --tune-section appended (under the cache)."""
    program, stem = split_entry(entry)
    mapping = ROOT / "mappings" / program / f"{stem}.yaml"
    if not args.tune_section:
        return mapping
    out = Path(os.environ["CYPRESSC_CACHE_DIR"]) / "tune_gpu" / f"{program}_{stem}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = mapping.read_text() + "\n" + Path(args.tune_section).read_text()
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return out


def tune_one(entry: str, n: int, args) -> dict:
    from cypressc.tuner import report
    from cypressc.tuner.search import Options, _space, search

    sizes = {"M": n, "N": n, "K": n}
    program, stem = split_entry(entry)
    prog, mapping = ROOT / "programs" / f"{program}.cyp", plain_mapping(entry, args)
    lines = Lines(f"{program}@{n}", _space(str(prog), str(mapping), mapping.read_text(), {}))
    opts = Options(
        sizes=sizes,
        budget=args.budget,
        rounds=args.rounds,
        reps=args.reps,
        compile_only=args.compile_only,
        workers=args.jobs,
        reference=f"{Path(__file__).resolve()}:ref_{program}",
    )
    try:
        res = search(str(prog), str(mapping), opts, progress=lines)
    finally:
        lines.close()
    print(report.table(res, 8), flush=True)
    print(report.closing_note(res), flush=True)
    row = {
        "program": program,
        "start": stem,
        "n": n,
        "counts": res.counts(),
        "seconds": res.seconds,
        "device": res.device,
        "failures": report.failures(res),
    }
    if not args.compile_only:
        from cypressc.tuner.worker_pool import workers

        row["worker_starts"] = sum(
            w["starts"] for w in workers().values()
        )  # so far; above one per GPU: restarts
        row["worker_gpus"] = len(workers())
    best = res.best
    if best is None:
        row["error"] = "no candidate " + ("compiled" if args.compile_only else "passed the check")
        return row
    text = report.best_yaml(res, str(prog.relative_to(ROOT)), os.path.relpath(mapping, ROOT))
    if OUT:
        (
            Path(OUT) / f"tuned_{program}{'' if stem == 'h100_plain' else '_' + stem}_{n}.yaml"
        ).write_text(text or "")
    base = res.baseline
    row.update(
        knobs=res.space.describe(best.values),
        dir=best.dir,
        name=best.name,
        tflops=best.tflops,
        start_tflops=base.tflops if base else None,
        runner_up=res.space.describe(res.runner_up.values) if res.runner_up else None,
    )
    return row


def vs_cublas(torch, rows: list[dict], args) -> None:
    """Time each best kernel against its cuBLAS composition (bench/variants.py's bench_one)."""
    from variants import bench_one

    from cypressc import runtime

    for row in rows:
        if not row.get("dir"):
            continue
        try:
            kern = runtime.load(row["dir"], row["name"])
            r = bench_one(
                torch,
                row["program"],
                {"M": row["n"], "N": row["n"], "K": row["n"]},
                "f16",
                kern,
                {},
                args,
            )
            peer = r["names"][0]
            row["peer"] = peer
            row["peer_tflops"] = r["peers"][peer].get("tflops")
            cyp = r["peers"]["cypressc"]
            row.update(
                ratio=cyp.get("ratio"),
                rel=cyp.get("rel"),
                bench_tflops=cyp.get("tflops"),
                bench_error=cyp.get("error"),
            )
            print(
                f"[vs cuBLAS] {row['program']} {row['n']}: {cyp.get('tflops', 0):.1f} TFLOP/s vs {peer} "
                f"{row['peer_tflops'] or 0:.1f} -> {row['ratio'] or 0:.3f}x (rel {cyp.get('rel')})",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001 - reported in the table
            row["bench_error"] = f"{type(e).__name__}: {e}"[:300]
        torch.cuda.empty_cache()


def op_checks(torch, row: dict) -> dict:
    """The best gemm as torch.ops.cypressc.gemm_tuned: torch.compile(fullgraph=True) vs eager,
    and a CUDA graph of 10 calls replayed on new inputs (bench/op_checks.py)."""
    from cypressc import runtime

    return gemm_op_checks(torch, runtime.load(row["dir"], row["name"]), "gemm_tuned")


def fmt(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


RESERVE_S = 60.0  # the cuBLAS comparison and the op checks after the tunes
BUGS = ("wrong", "crash", "timeout", "launch_error", "internal", "build")  # never a mapping's fault


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--programs",
        default="gemm,dual_gemm,gemm_reduction",
        help="comma-separated P or P:STEM (start from mappings/P/STEM.yaml, default h100_plain)",
    )
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument(
        "--time-limit",
        type=float,
        default=540.0,
        help="seconds: a tune starts only if the longest earlier one at its size fits before this "
        f"less {RESERVE_S:.0f} s (the cuBLAS and op checks follow)",
    )
    ap.add_argument(
        "--tune-section",
        default=None,
        help="a YAML file with a `tune:` section appended to every plain mapping (narrows the space)",
    )
    ap.add_argument("--compile-only", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("CYPRESSC_CACHE_DIR", str(ROOT / "build" / "tune_cache"))
    if OUT:
        Path(OUT).mkdir(parents=True, exist_ok=True)
    programs = [p for p in args.programs.split(",") if p]
    rows: list[dict] = []
    took: dict[int, float] = {}
    for n in [
        int(x) for x in args.sizes.split(",") if x
    ]:  # every program at one size, then the next
        for program in programs:
            need = took.get(n, 60.0 if not took else max(took.values()))
            left = args.time_limit - RESERVE_S - (time.time() - T0)
            if need > left:
                stamp(
                    f"skip {program}@{n}: {left:.0f} s left, a tune at this size took {need:.0f} s"
                )
                rows.append(
                    {
                        "program": split_entry(program)[0],
                        "start": split_entry(program)[1],
                        "n": n,
                        "error": "skipped: out of time",
                    }
                )
                continue
            print(flush=True)
            stamp(f"==== tune {program} at {n}^3")
            t = time.time()
            try:
                rows.append(tune_one(program, n, args))
            except Exception as e:  # noqa: BLE001 - one program's failure is one row
                traceback.print_exc()
                rows.append(
                    {
                        "program": split_entry(program)[0],
                        "start": split_entry(program)[1],
                        "n": n,
                        "error": f"{type(e).__name__}: {e}"[:300],
                    }
                )
            took[n] = max(took.get(n, 0.0), time.time() - t)
            stamp(f"==== {program}@{n} took {time.time() - t:.1f} s")
    ops: dict = {}
    device = next((r.get("device") for r in rows if r.get("device")), "")
    if not args.compile_only:
        from cypressc.tuner.worker_pool import stop_workers

        stop_workers()  # their inputs and kernels leave the GPU to the checks below
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        stamp("vs cuBLAS")
        vs_cublas(torch, rows, args)
        gemm = next((r for r in rows if r["program"] == "gemm" and r.get("dir")), None)
        if gemm is not None:
            stamp("op checks (torch.compile, CUDA graph)")
            ops = op_checks(torch, gemm)
            print(f"[op] {json.dumps(ops)}", flush=True)
    if OUT:
        (Path(OUT) / "tune_gpu.json").write_text(
            json.dumps({"device": device, "rows": rows, "ops": ops}, indent=1, default=str)
        )
    return summary(rows, ops, device)


def label(row: dict) -> str:
    """The program, and the start mapping when it is not h100_plain."""
    start = row.get("start", "h100_plain")
    return row["program"] if start == "h100_plain" else f"{row['program']} ({start})"


def summary(rows: list[dict], ops: dict, device: str) -> int:
    """The final table, the failed candidates, the op checks; the exit status."""
    print(f"\n## cypressc tune from the plain mappings; {device}; {time.time() - T0:.0f}s")
    print(
        "| program | n | best knobs | TFLOP/s | start | peer | peer TFLOP/s | ratio | built/pruned/timed/failed | "
        "prune s | compile s | timing s | total s |"
    )
    print("|---|---:|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|")
    ok = True
    bugs = []
    for r in rows:
        bugs += [
            dict(f, program=r["program"], n=r["n"])
            for f in r.get("failures", [])
            if f.get("kind") in BUGS
        ]
        if r.get("error"):
            ok = False
            print(f"| {label(r)} | {r['n']} | {r['error']} | | | | | | | | | | |")
            continue
        c, s = r["counts"], r["seconds"]
        ratio = r.get("ratio")
        flag = " below 0.95" if ratio is not None and ratio < 0.95 else ""
        if r.get("bench_error") or (r.get("rel") is not None and r["rel"] > 1e-2):
            ok = False
            flag += " CHECK FAILED"
        failed = c["failed_check"] + c["build_failed"]
        print(
            f"| {label(r)} | {r['n']} | {r['knobs']} | {fmt(r.get('bench_tflops') or r.get('tflops'))} | "
            f"{fmt(r.get('start_tflops'))} | {r.get('peer', '-')} | {fmt(r.get('peer_tflops'))} | "
            f"{fmt(ratio, '.3f')}{flag} | {c['compiled'] + c['cache_hits']}/{c['pruned']}/{c['timed']}/{failed} | "
            f"{s['prune']:.0f} | {s['compile']:.0f} | {s['timing']:.0f} | {s.get('total', 0):.0f} |"
        )
    starts = max((r.get("worker_starts", 0) for r in rows), default=0)
    gpus = max((r.get("worker_gpus", 0) for r in rows), default=0)
    if starts:
        print(
            f"\nGPU worker processes started: {starts} on {gpus} GPU(s) (each start after the first on "
            "its GPU: a crash or a hang)"
        )
    if bugs:
        ok = False
        print(
            f"\n{len(bugs)} candidate(s) the compiler accepted failed (a compiler or backend bug):"
        )
        for f in bugs:
            print(
                f"  {f['program']}@{f['n']} ({f.get('kind')}) {f['knobs']} [{f['label']}]: {f.get('error')}"
            )
    if ops:
        print(
            f"\ntorch.compile(fullgraph=True): {'ok' if ops.get('compile_ok') else 'FAILED'} "
            f"(rel vs eager {ops.get('compile_rel_vs_eager')}, graph breaks {ops.get('graph_breaks')}); "
            f"CUDA graph of 10 calls: {'ok' if ops.get('graph_ok') else 'FAILED'} (rel {ops.get('graph_rel')})"
        )
        ok = ok and bool(ops.get("compile_ok")) and bool(ops.get("graph_ok"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
