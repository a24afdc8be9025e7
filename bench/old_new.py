#!/usr/bin/env python3
"""Old vs new generated kernels vs the cuBLAS peers, on one GPU in one process.

    bash bench/old_kernels.sh [REV]                  # here: generate build/old and build/new
    PYTHONUNBUFFERED=1 python3 bench/old_new.py [--root build] [--targets PATTERNS]
        [--sizes 4096,8192] [--rounds 20] [--reps 10] [--jobs N] [--dry-run]

bench/old_kernels.sh writes ``<root>/{old,new}/<program>-<mapping>-<dtype>/`` (the `cypressc
build` files of REV's compiler and of the working tree's) with ``targets.tsv`` (what each side's
compiler did) and ``runtime/`` (that side's cypress.cuh).  This script takes every target built
on both sides (``--targets``: comma-separated fnmatch patterns on the labels, e.g.
``gemm-h100*,dual_gemm-*``); a target only one compiler could build is reported, not timed.

1. ``make lib<name>.so`` in every directory, all at once (``--jobs``), each side against its own
   runtime header: ``EXTRA_NVCCFLAGS=-I<side>/runtime`` comes before the Makefile's own include
   dirs on nvcc's line, so it wins over whatever cypressc the device tree holds (``-Xptxas -v``
   too: registers and spills per side go to the JSON).
2. Per target and ``n`` in ``--sizes``: fresh ``torch.randn`` inputs in the target's dtype
   (bench/variants.py's ``inputs``); M = N = K = n, except batched_gemm: L = 8, M = N = K = n/2
   (the same 2n^3 FLOPs as a GEMM at n).  Old, new and the peer (bench/variants.py's cuBLAS
   composition: torch.matmul / torch.bmm / 2 x matmul + add / matmul + sum) each write their own
   NaN-filled outputs once; that one launch is compared in float64 with the float32 PyTorch
   reference (``cypressc.tuner.verdicts.compare``: no NaN, no element off by > 5% of the
   reference RMS, ``||out - ref|| / ||ref||`` under bench/variants.py's TOL: 1e-3 f16, 5e-3 bf16).
3. Those that pass are timed by bench/gemm.py's method (``interleaved``: ``--rounds`` rounds,
   each timing ``--reps`` calls of peer, old and new in turn behind a GPU sleep; the median),
   the order reversed every other round.  TFLOP/s are from the median call; each ratio is the
   median over the rounds of that round's ratio (new/old also shows its range, [lo-hi]).  The
   noise to read a change against (old and new the same .cu, H100, 20 rounds, bench/NOTES.md):
   new/old 0.998-1.002 at n = 4096 and 0.991-1.007 at n = 8192, where power-limited clocks
   move single rounds by up to 10%.

Printed last: a markdown table (target, n, old / new / peer TFLOP/s, new/old, new/peer,
old/peer, rel. errors old/new).  JSON (``$OUT/old_new.json`` when OUT is set) is rewritten after
every case.  A kernel that does not finish within ``--deadline`` seconds of a case stops the run
(the GPU stream is stuck behind it) after printing what was measured.  Exit status 1 when a
make, a load or a check failed; generation failures from old_kernels.sh are only reported.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import fnmatch
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gemm import interleaved  # noqa: E402 - bench/gemm.py's timing method
from gpu_check import make_target, ptxas_summary  # noqa: E402
from variants import TOL, flops, inputs, out_tensors, peers_for  # noqa: E402

OUT = os.environ.get("OUT")
SIDES = ("old", "new")
PEER = {
    "gemm": "cuBLAS",
    "gemm_bt": "cuBLAS",
    "batched_gemm": "torch.bmm",
    "dual_gemm": "2xcuBLAS+add",
    "gemm_reduction": "cuBLAS+sum",
}
"""bench/variants.py's name of each program's cuBLAS composition (its first peer)."""


def shape(program: str, n: int) -> dict:
    """The sizes timed for ``program`` at ``n``: M = N = K = n; batched_gemm L = 8 at n/2."""
    if program == "batched_gemm":
        return dict(L=8, M=n // 2, N=n // 2, K=n // 2)
    return dict(M=n, N=n, K=n)


# --------------------------------------------------------------------------------------------
# Targets (bench/old_kernels.sh's output) and building
# --------------------------------------------------------------------------------------------


def read_side(root: Path, side: str) -> dict[str, dict]:
    """``{label: row}`` from ``<root>/<side>/targets.tsv`` (old_kernels.sh); each row gets
    ``dir`` and ``name`` (the kernel, from its ``<name>.json``; None when nothing was built).
    Exits with a message when the file is missing."""
    f = root / side / "targets.tsv"
    if not f.exists():
        raise SystemExit(
            f"{f} not found: run `bash bench/old_kernels.sh [REV]` first (and carry {root / side})"
        )
    rows = {}
    with f.open() as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            d = root / side / row["label"]
            js = sorted(d.glob("*.json"))
            name = js[0].stem if row["rc"] == "0" and js else None
            row.update(dir=d, rc=int(row["rc"]), name=name)
            rows[row["label"]] = row
    return rows


def discover(root: Path, patterns: list[str]) -> tuple[list[dict], dict[str, str]]:
    """The targets built on both sides (``{label, program, dtype, old, new}``) and
    ``{label: why}`` for those matching ``patterns`` that one side's compiler did not build."""
    sides = {s: read_side(root, s) for s in SIDES}
    labels = list(dict.fromkeys([*sides["old"], *sides["new"]]))
    if patterns:
        labels = [lb for lb in labels if any(fnmatch.fnmatchcase(lb, p) for p in patterns)]
    both, skipped = [], {}
    for lb in labels:
        rows = {s: sides[s].get(lb) for s in SIDES}
        missing = [
            f"{s}: " + ("not in targets.tsv" if r is None else f"cypressc rc={r['rc']}")
            for s, r in rows.items()
            if r is None or r["name"] is None
        ]
        if missing:
            skipped[lb] = "not built (" + "; ".join(missing) + ")"
            continue
        program = rows["old"]["program"]
        if program not in PEER:
            skipped[lb] = f"no peer for program {program!r}"
            continue
        both.append({"label": lb, "program": program, "dtype": rows["old"]["dtype"], **rows})
    return both, skipped


def same_cu(t: dict) -> bool:
    """Whether both compilers generated the same kernel source (then any gap is noise)."""
    a, b = (t[s]["dir"] / f"{t[s]['name']}.cu" for s in SIDES)
    return a.read_bytes() == b.read_bytes()


def make_all(targets: list[dict], root: Path, jobs: int) -> dict[tuple[str, str], dict]:
    """``make lib<name>.so`` for every (target, side), ``jobs`` at a time, each against its
    side's runtime header; ``{(label, side): {rc, secs, ptxas, log}}``.  The library is
    deleted first, so a carried one is never used."""

    def one(t: dict, side: str) -> dict:
        # make does not track the runtime header, and a carried library may come from another
        # nvcc: always compile here
        d, name = t[side]["dir"], t[side]["name"]
        (d / f"lib{name}.so").unlink(missing_ok=True)
        extra = f"-I{(root / side / 'runtime').resolve()} -Xptxas -v"
        rc, log, secs = make_target(d, name, f"lib{name}.so", extra)
        return {
            "rc": rc,
            "secs": round(secs, 1),
            "ptxas": ptxas_summary(log),
            "log": log[-3000:] if rc else "",
        }

    with cf.ThreadPoolExecutor(max(1, jobs)) as ex:
        futs = {(t["label"], s): ex.submit(one, t, s) for t in targets for s in SIDES}
        return {k: f.result() for k, f in futs.items()}


def side_loader(root: Path, side: str):
    """The side's own ``cypressc/runtime.py``, which old_kernels.sh copies to
    ``<root>/<side>/runtime/loader.py`` (the kernel info format may differ between the two
    trees); the working tree's ``cypressc.runtime`` where there is none.

    The copy is loaded as the module ``loader`` of a package ``cypressc_runtime_<side>`` rooted
    at that ``runtime/`` directory: a runtime.py that imports its parts relatively (``from
    .abi.info import ...``, trees since the runtime was split) finds the copy of
    ``cypressc/abi`` old_kernels.sh put beside it, not the installed cypressc's."""
    import importlib.machinery
    import importlib.util

    from cypressc import runtime

    d = root / side / "runtime"
    f = d / "loader.py"
    if not f.is_file():
        return runtime
    pkg = f"cypressc_runtime_{side}"
    parent = importlib.util.module_from_spec(
        importlib.machinery.ModuleSpec(pkg, None, is_package=True)
    )
    parent.__path__ = [str(d)]
    sys.modules[pkg] = parent
    spec = importlib.util.spec_from_file_location(f"{pkg}.loader", f)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


def load_all(targets: list[dict], made: dict, root: Path) -> dict[str, dict]:
    """``{label: {side: Kernel}}`` for every library that was made; a load failure is
    recorded in ``made`` (``rc`` 1, ``what`` "load")."""
    loaders = {s: side_loader(root, s) for s in SIDES}
    kernels: dict[str, dict] = {}
    for t in targets:
        kernels[t["label"]] = {}
        for s in SIDES:
            m = made[(t["label"], s)]
            regs = "; ".join(
                f"{v.get('regs', '?')} regs, spill {v.get('spill_st', '?')}/"
                f"{v.get('spill_ld', '?')}"
                for v in m["ptxas"].values()
            )
            print(f"[make] {t['label']} {s}: rc={m['rc']} {m['secs']}s {regs}", flush=True)
            if m["rc"]:
                print(m["log"][-1500:], flush=True)
                continue
            try:
                kernels[t["label"]][s] = loaders[s].load(t[s]["dir"], t[s]["name"])
            except Exception as e:
                m.update(rc=1, what="load", log=f"{type(e).__name__}: {e}")
                print(f"[load] {t['label']} {s}: {m['log']}", flush=True)
    return kernels


# --------------------------------------------------------------------------------------------
# One case: check and time
# --------------------------------------------------------------------------------------------


class Watchdog:
    """Calls ``on_fire(what)`` from a timer thread when a case runs past its deadline: a hung
    kernel blocks the stream for good, so the only way on is to report and exit."""

    def __init__(self, on_fire) -> None:
        self.on_fire, self.timer = on_fire, None

    def arm(self, what: str, seconds: float) -> None:
        self.disarm()
        self.timer = threading.Timer(seconds, self.on_fire, args=(what,))
        self.timer.daemon = True
        self.timer.start()

    def disarm(self) -> None:
        if self.timer:
            self.timer.cancel()


def time_rounds(torch, live: dict, rounds: int, reps: int) -> tuple[dict, list[dict]]:
    """bench/gemm.py's ``interleaved`` one round at a time, the order reversed every other
    round; returns every call's milliseconds per name and each round's medians."""
    # identical kernels timed in one fixed order differed by up to 6% at n = 8192 on an H100,
    # even at 10x20 calls (bench/NOTES.md)
    names = list(live)
    samples: dict[str, list[float]] = {k: [] for k in names}
    medians = []
    for i in range(rounds):
        order = names if i % 2 == 0 else names[::-1]
        got = interleaved(torch, {k: live[k] for k in order}, 1, reps)
        for k in names:
            samples[k] += got[k]
        medians.append({k: statistics.median(got[k]) for k in names})
    return samples, medians


def bench_case(torch, t: dict, n: int, kerns: dict, args) -> dict:
    """Check and time old, new and the peer for target ``t`` at ``n``; returns
    ``{"peers": {who: {ok, rel, nan, wrong, [where, first], ms, tflops}|{error}}, ...}``."""
    from cypressc.tuner.verdicts import compare

    program, dtype = t["program"], t["dtype"]
    s = shape(program, n)
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    tin, ref = inputs(torch, program, s, dt)
    peer = PEER[program]
    outs = out_tensors(torch, program, s, dt, [peer, *kerns])
    for o in outs.values():
        for x in o.values():
            x.fill_(float("nan"))  # an element no launch writes stays NaN
    fns = peers_for(torch, program, tin, outs, {}, None)
    res: dict = {
        "label": t["label"],
        "program": program,
        "dtype": dtype,
        "n": n,
        "sizes": s,
        "peer": peer,
        "peers": {},
    }
    for side, k in kerns.items():  # by parameter name: the new emitter may reorder them
        try:
            fns[side] = k.bind(
                *[outs[side][q.name] if q.writes else tin[q.name] for q in k.info.params]
            )
        except Exception as e:
            res["peers"][side] = {"error": f"bind: {type(e).__name__}: {e}"[:500]}
    live = {}
    for who, fn in fns.items():
        try:
            fn()  # one launch on NaN outputs is what gets checked
            torch.cuda.synchronize()
            c = compare(torch, outs[who], ref, tol=TOL[dtype])
            keep = ("ok", "rel", "nan", "wrong", "where", "first")
            res["peers"][who] = {k: c[k] for k in keep if k in c}
            if c["ok"]:
                live[who] = fn
        except Exception as e:
            res["peers"][who] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
    for fn in live.values():  # warm-up
        fn()
        fn()
    samples, medians = time_rounds(torch, live, args.rounds, args.reps)
    f = flops(program, s)
    for who in live:
        ms = statistics.median(samples[who])
        res["peers"][who].update(
            ms=ms, tflops=f / ms / 1e9, min_ms=min(samples[who]), n_calls=len(samples[who])
        )
    res["round_ms"] = medians
    # a ratio pairs the two medians of each round (taken next to each other, so slow clock
    # drift cancels) and takes the median over the rounds: with old == new this stayed within
    # 0.99-1.01, the ratio of the overall medians within 0.96-1.02 (bench/NOTES.md)
    res["ratios"] = {}
    for x, y in (("new", "old"), ("new", peer), ("old", peer)):
        if x in live and y in live:
            per = [m[y] / m[x] for m in medians]  # TFLOP/s of x over y's
            res["ratios"][f"{x}/{'peer' if y == peer else y}"] = [
                statistics.median(per),
                min(per),
                max(per),
            ]
    return res


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def ok(r: dict | None) -> bool:
    return bool(r) and r.get("ok", False) and "error" not in r


def case_line(r: dict) -> str:
    """One progress line: each peer's TFLOP/s (or FAIL), relative error and error."""
    parts = []
    for who, p in r["peers"].items():
        s = f"{who} " + (f"{p['tflops']:.1f}" if "tflops" in p else "FAIL")
        s += f" rel={p['rel']:.1e}" if "rel" in p else ""
        s += f" nan={p['nan']} wrong={p['wrong']}" if p.get("wrong") else ""
        parts.append(s + (f" {p['error']}" if "error" in p else ""))
    return " | ".join(parts) or r.get("error", "")


def table(results: list[dict], skipped: dict, made: dict, dev: str, args, secs: float) -> list[str]:
    """The markdown summary: one row per (target, n), then what was not measured and why."""

    def tf(r):
        return "-" if not r else f"{r['tflops']:.1f}" if ok(r) and "tflops" in r else "FAIL"

    def ratio(r, key, spread=False):  # [median, lo, hi] over the rounds
        q = r.get("ratios", {}).get(key)
        return "-" if not q else f"{q[0]:.3f}" + (f" [{q[1]:.3f}-{q[2]:.3f}]" if spread else "")

    def rel(r):
        if not r or "rel" not in r:
            return "-"
        if ok(r):
            return f"{r['rel']:.1e}"
        where = f" {r['where']}" if "where" in r else ""
        return f"{r['rel']:.1e}! (nan {r.get('nan', 0)}, wrong {r.get('wrong', 0)}{where})"

    lines = [
        f"## old vs new kernels, TFLOP/s; {dev}, median of {args.rounds}x{args.reps} calls, "
        f"{secs:.0f}s",
        "| target | n | old TFLOP/s | new TFLOP/s | new/old | peer TFLOP/s | new/peer | "
        "old/peer | rel err old/new |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        p = r["peers"]
        o, nw, pr = p.get("old"), p.get("new"), p.get(r["peer"])
        err = f" {r['error']}" if r.get("error") else ""
        lines.append(
            f"| {r['label']} | {r['n']} | {tf(o)} | {tf(nw)} | "
            f"{ratio(r, 'new/old', True)} | {tf(pr)} ({r['peer']}) | "
            f"{ratio(r, 'new/peer')} | {ratio(r, 'old/peer')} | "
            f"{rel(o)} / {rel(nw)}{err} |"
        )
    for lb, why in skipped.items():
        lines.append(f"\n{lb}: {why}")
    for (lb, side), m in made.items():
        if m.get("rc"):
            last = (m["log"].strip().splitlines() or [""])[-1]
            lines.append(f"\n{lb} {side}: {m.get('what', 'make')} failed: {last[:300]}")
    return lines


def dry_run(targets: list[dict], sizes: list[int], root: Path, args) -> None:
    """Print the make commands and the cases that a real run would do."""
    print(f"\nwould make {2 * len(targets)} libraries ({args.jobs} at a time), e.g.:")
    for t in targets[:1]:
        for s in SIDES:
            print(
                f"  make -C {t[s]['dir']} lib{t[s]['name']}.so "
                f"EXTRA_NVCCFLAGS='-I{root / s / 'runtime'} -Xptxas -v'"
            )
    print(
        f"would time {len(targets) * len(sizes)} cases ({args.rounds} rounds x {args.reps} "
        f"calls of peer, old, new):"
    )
    for t in targets:
        for n in sizes:
            s = shape(t["program"], n)
            dims = " ".join(f"{k}={v}" for k, v in s.items())
            print(
                f"  {t['label']:28s} n={n:<5d} {dims:28s} "
                f"{flops(t['program'], s) / 1e9:8.1f} GFLOP  vs {PEER[t['program']]}"
            )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--root", default=str(ROOT / "build"), help="holds old/ and new/ (bench/old_kernels.sh)"
    )
    ap.add_argument(
        "--targets",
        default="",
        help="comma-separated fnmatch patterns on the labels (default: all)",
    )
    ap.add_argument("--sizes", default="4096,8192", help="comma-separated n")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="parallel make jobs")
    ap.add_argument(
        "--deadline",
        type=float,
        default=120.0,
        help="seconds one (target, n) case may take before the run stops",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="list what would be made and timed; no GPU, no nvcc"
    )
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    root = Path(args.root).resolve()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    targets, skipped = discover(root, [p for p in args.targets.split(",") if p])
    srcs = {}
    for s in SIDES:
        f = root / s / "SOURCE"
        srcs[s] = f.read_text().strip().replace("\n", "; ") if f.exists() else "?"
    print(f"[old] {srcs['old']}\n[new] {srcs['new']}", flush=True)
    for t in targets:
        same = "same .cu" if same_cu(t) else ".cu differs"
        print(
            f"[target] {t['label']}: {t['program']} {t['dtype']}, kernel {t['new']['name']}, "
            f"peer {PEER[t['program']]}, {same}",
            flush=True,
        )
    for lb, why in skipped.items():
        print(f"[skip] {lb}: {why}", flush=True)
    if args.dry_run:
        dry_run(targets, sizes, root, args)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("bench/old_new.py needs a CUDA GPU (use --dry-run to list the work)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_name()
    print(f"[env] {dev} | torch {torch.__version__}", flush=True)
    t0 = time.time()
    made = make_all(targets, root, args.jobs)
    print(f"[make] {len(made)} libraries in {time.time() - t0:.0f}s", flush=True)
    kernels = load_all(targets, made, root)
    results: list[dict] = []

    def write_json() -> None:
        if OUT:
            Path(OUT).mkdir(parents=True, exist_ok=True)
            (Path(OUT) / "old_new.json").write_text(
                json.dumps(
                    {
                        "device": dev,
                        "sources": srcs,
                        "skipped": skipped,
                        "results": results,
                        "make": {f"{lb} {s}": m for (lb, s), m in made.items()},
                        "same_cu": {t["label"]: same_cu(t) for t in targets},
                    },
                    indent=1,
                    default=str,
                )
            )

    def hung(what: str) -> None:
        results.append(
            {"label": what, "n": 0, "peer": "-", "peers": {}, "error": "HUNG: the run stopped here"}
        )
        write_json()
        print(f"\n[hang] {what} did not finish within {args.deadline:.0f}s; stopping", flush=True)
        print("\n".join(table(results, skipped, made, dev, args, time.time() - t0)), flush=True)
        os._exit(3)

    dog = Watchdog(hung)
    for t in targets:
        for n in sizes:
            t1 = time.time()
            dog.arm(f"{t['label']} n={n}", args.deadline)
            try:
                r = bench_case(torch, t, n, kernels[t["label"]], args)
            except Exception as e:
                r = {
                    "label": t["label"],
                    "program": t["program"],
                    "dtype": t["dtype"],
                    "n": n,
                    "peer": PEER[t["program"]],
                    "peers": {},
                    "error": f"{type(e).__name__}: {e}"[:500],
                }
            dog.disarm()
            results.append(r)
            torch.cuda.empty_cache()
            write_json()
            print(f"[{t['label']} n={n}] {case_line(r)} ({time.time() - t1:.0f}s)", flush=True)
    print()
    print("\n".join(table(results, skipped, made, dev, args, time.time() - t0)))
    failed = any(m["rc"] for m in made.values()) or any(
        "error" in r or len(r["peers"]) < 3 or not all(ok(p) for p in r["peers"].values())
        for r in results
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
