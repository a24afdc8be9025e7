#!/usr/bin/env python3
"""FlashAttention forward (issues #11, #12): programs/flash_attention2.cyp and flash_attention3.cyp
against torch SDPA and Triton.

    PYTHONUNBUFFERED=1 python3 bench/attention.py --build DIR[:D] [--build DIR[:D] ...]
        [--program flash_attention2|flash_attention3] [--mapping h100_d64,h100_d128] [--mapping-dtypes f16,bf16] [--seqs 512,1024,2048,4096,8192,16384]
        [--tokens 16384] [--causal both|0|1] [--gqa G] [--scale S] [--rounds 5] [--reps 10] [--no-triton]
    PYTHONUNBUFFERED=1 python3 bench/attention.py --backward [--op] [--build DIR] ...: the
        backward and forward + backward (bench/attention_bwd.py's arguments)

Each ``--build`` is a directory made by ``cypressc build programs/flash_attention2.cyp -m
mappings/flash_attention2/<m>.yaml [--dtype T=bf16] -o DIR`` (``make`` is run on it here, a
no-op when built), or the same for flash_attention3 (one interface); ``--mapping`` names are built
that way from ``--program`` (default flash_attention2) into build/bench/<program>-<m>[-<dtype>], once
per ``--mapping-dtypes`` entry.  The head dimension D is not in the kernel
info: ``DIR:128`` gives it; without it D = 128 when ``info.failed_requires`` accepts D = 128
(the mapping's E is at least 128), else 64 when it accepts 64, else the build is reported and
skipped.  T (f16/bf16) is the info's dtype of Q.

Shapes, per (build, seq): Q, O [B, H, seq, D], K, V [B, HK, seq, D], LSE [B, H, seq] f32 with
H = 16 for D = 128 and 32 for D = 64 (2048 / D otherwise: H·D = 2048), B = tokens // seq (at
least 1: B·seq = 16K tokens by default), HK = H / G (``--gqa G``, default 1: no grouping),
scale = ``--scale`` or 1/sqrt(D), ``causal`` 0 and/or 1 (``--causal``; top-left aligned).
One set of inputs per (D, T, seq): torch.randn from a generator seeded by (D, seq), the same
for every build of that D and T and for every peer.  Builds of one (D, T) are timed together.

Checked first, on NaN-poisoned outputs, against a float32 reference (TF32 off): O from torch's
scaled_dot_product_attention in float32 (is_causal, scale), LSE from torch.logsumexp of the
masked, scaled float32 scores, both computed a few heads at a time (about 1 GiB of scores per
chunk, so seq 16384 fits).  Pass: rel = ||O - O_ref|| / ||O_ref|| < 1e-2, max |LSE - LSE_ref|
< 1e-2, no NaN.  A wrong or refused build is reported and not timed (exit status 1 at the end).
The rows timed, all on the same tensors:

* ``cypressc``: ``kern.bind(O, LSE, Q, K, V, scale=, causal=)``;
* ``flash`` / ``cudnn``: ``F.scaled_dot_product_attention(q, k, v, is_causal=, scale=)`` under
  ``sdpa_kernel(SDPBackend.FLASH_ATTENTION / CUDNN_ATTENTION)`` (O checked; no LSE is
  returned); with GQA ``enable_gqa=True`` where this torch has it and the backend takes it,
  else K and V repeated to H heads before timing;
* ``triton``: bench/triton_attention.py (autotuned on its first call, then poisoned and run
  again for the check: O and LSE).

A peer that raises or is wrong is n/a in the table, not a crash.  Timing is bench/gemm.py's
(cypressc.tuner.timing.interleaved): 3 warm-up calls, then ``--rounds`` rounds in which each
row runs ``--reps`` calls, each between its own CUDA events behind a GPU sleep; the median per
call.  TFLOP/s counts FlashAttention's 4·B·H·seq²·D, halved when causal; the speed ratios are
peer ms / cypressc ms (> 1: cypressc is faster).  A line prints per (build, seq, causal) as it
finishes, a markdown table (``## attention``) last; JSON goes to $OUT/attention.json when OUT
is set.  Exit status 1 when a cypressc build fails to make, load or infer D, refuses a shape
or is wrong; 2 without a CUDA GPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gemm import build_mapping, make  # noqa: E402

from cypressc.tuner.timing import interleaved  # noqa: E402

OUT = os.environ.get("OUT")
TOL_O = 1e-2  # ||O - ref|| / ||ref||
TOL_LSE = 1e-2  # max |LSE - ref|, natural log units
DEVICE = "cuda"  # tests run the checking logic on "cpu" with stand-in kernels
REF_CHUNK = 1 << 28  # float32 scores per reference chunk (1 GiB)
PARAMS = ["O", "LSE", "Q", "K", "V"]
TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16"}
PEERS = ("flash", "cudnn", "triton")


@dataclass
class Build:
    """One flash_attention2 / flash_attention3 build: its head dimension ``d`` (``d_from`` "given" or "inferred")
    and element type ``dtype`` (f16/bf16)."""

    label: str
    path: Path
    kern: Any
    d: int
    dtype: str
    d_from: str


def heads_for(d: int) -> int:
    """Query heads at head dimension ``d``: 16 at 128, 32 at 64 (H·D = 2048)."""
    return max(1, 2048 // d)


def parse_build_spec(spec: str) -> tuple[str, int | None]:
    """``DIR`` or ``DIR:D`` -> (DIR, D or None)."""
    m = re.fullmatch(r"(.+):(\d+)", spec)
    return (m.group(1), int(m.group(2))) if m else (spec, None)


def sizes_at(info, B: int, H: int, HK: int, S: int, d: int, causal: int) -> dict[str, int]:
    """The info's sizes for one call (M = N = S)."""
    known = {"B": B, "H": H, "HK": HK, "M": S, "N": S, "D": d, "causal": causal}
    missing = [s for s in info.sizes if s not in known]
    if missing:
        raise ValueError(f"kernel sizes {list(info.sizes)}: {missing} unknown to this bench")
    return {s: known[s] for s in info.sizes}


def infer_d(info) -> int:
    """128 when the kernel's ``requires`` accept D = 128 (at H = 16, seq 512), else 64 when they
    accept D = 64; ``ValueError`` with the refusals otherwise."""
    why = {}
    for d in (128, 64):
        failed = info.failed_requires(sizes_at(info, 1, heads_for(d), heads_for(d), 512, d, 0))
        if not failed:
            return d
        why[d] = "; ".join(failed)
    raise ValueError(
        "refuses both D = 128 and D = 64: " + " | ".join(f"D={d}: {w}" for d, w in why.items())
    )


def check_build(kern) -> str:
    """T of a loaded flash_attention2 / flash_attention3 kernel; ``ValueError`` when it is not one."""
    info = kern.info
    names = [p.name for p in info.params]
    if names != PARAMS or "scale" not in info.floats or "causal" not in info.sizes:
        raise ValueError(
            f"params {names}, floats {list(info.floats)}, sizes {list(info.sizes)}: expected "
            f"{PARAMS} with a float 'scale' and an int 'causal' (flash_attention2): {kern!r}"
        )
    dts = {info.param(n).dtype for n in ("O", "Q", "K", "V")}
    if len(dts) != 1 or not dts <= set(TORCH_DTYPES) or info.param("LSE").dtype != "f32":
        raise ValueError(
            f"O, Q, K, V must share one dtype of {sorted(TORCH_DTYPES)} and LSE be f32: {kern!r}"
        )
    return dts.pop()


def load_builds(
    specs: list[str],
    mappings: list[str],
    dtypes: list[str],
    outroot: Path,
    program: str = "flash_attention2",
):
    """Build (``--mapping``), make and load every build; (builds, {label: error})."""
    from cypressc import runtime

    todo: list[tuple[str, Callable[[], Path], int | None]] = []
    for m in mappings:
        for dt in dtypes:
            label = f"{program}-{Path(m).stem}" + ("" if dt == "f16" else f"-{dt}")
            todo.append((label, lambda m=m, dt=dt: build_mapping(m, outroot, program, dt), None))
    labels = {t[0] for t in todo}
    for spec in specs:
        d, given = parse_build_spec(spec)
        p = Path(d).resolve()
        label = p.name if p.name not in labels else f"{p.parent.name}/{p.name}"
        labels.add(label)
        todo.append((label, lambda p=p: p, given))
    builds, errors = [], {}
    for label, get, given in todo:
        t0 = time.time()
        try:
            p = get()
            make(p)
            kern = runtime.load(p)
            dtype = check_build(kern)
            d = given if given is not None else infer_d(kern.info)
            builds.append(
                Build(label, p, kern, d, dtype, "given" if given is not None else "inferred")
            )
            print(
                f"[build] {label}: D={d} ({builds[-1].d_from}), T={dtype} ({time.time() - t0:.0f}s)",
                flush=True,
            )
        except Exception as e:
            errors[label] = f"{type(e).__name__}: {e}"
            print(f"[build] {label}: FAILED: {errors[label][-1500:]}", flush=True)
    return builds, errors


def make_data(torch, B: int, H: int, HK: int, S: int, d: int, dt: str) -> dict:
    """Q [B, H, S, d], K, V [B, HK, S, d] of torch.randn in T, seeded by (d, S)."""
    T = getattr(torch, TORCH_DTYPES[dt])
    g = torch.Generator(device=DEVICE).manual_seed(1100 + 7 * d + S)
    q = torch.randn(B, H, S, d, dtype=T, device=DEVICE, generator=g)
    k = torch.randn(B, HK, S, d, dtype=T, device=DEVICE, generator=g)
    v = torch.randn(B, HK, S, d, dtype=T, device=DEVICE, generator=g)
    return {"q": q, "k": k, "v": v}


def reference(torch, q, k, v, scale: float, causal: bool):
    """(O, LSE) in float32 for q [B, H, M, D], k, v [B, HK, N, D]: O by float32 SDPA, LSE by
    logsumexp of the masked scaled scores, over chunks of about REF_CHUNK scores (query head h
    reads key/value head h // (H / HK))."""
    import torch.nn.functional as F

    B, H, M, D = q.shape
    HK, N = k.shape[1], k.shape[2]
    G = H // HK
    qf, kf, vf = q.reshape(B * H, M, D), k.reshape(B * HK, N, D), v.reshape(B * HK, N, D)
    o = torch.empty(B * H, M, D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B * H, M, dtype=torch.float32, device=q.device)
    above = torch.ones(M, N, dtype=torch.bool, device=q.device).triu(1) if causal else None
    step = max(1, REF_CHUNK // max(1, M * N))
    for i in range(0, B * H, step):
        rows = torch.arange(i, min(i + step, B * H), device=q.device)
        kv = (rows // H) * HK + (rows % H) // G
        qc, kc, vc = qf[rows].float(), kf[kv].float(), vf[kv].float()
        o[rows] = F.scaled_dot_product_attention(qc, kc, vc, is_causal=bool(causal), scale=scale)
        s = torch.matmul(qc, kc.transpose(-1, -2)).mul_(scale)
        if above is not None:
            s.masked_fill_(above, float("-inf"))
        lse[rows] = torch.logsumexp(s, dim=-1)
        del s, qc, kc, vc
    return o.view(B, H, M, D), lse.view(B, H, M)


def compare(torch, o, lse, ref_o, ref_lse) -> dict:
    """rel (O), lse_err (max abs; None without an LSE), nan and ok."""
    den = float(ref_o.double().norm())
    rel = float((o.double() - ref_o.double()).norm()) / (den or 1.0)
    nan = int(torch.isnan(o).sum()) + (int(torch.isnan(lse).sum()) if lse is not None else 0)
    lse_err = float((lse.float() - ref_lse).abs().max()) if lse is not None else None
    ok = nan == 0 and rel < TOL_O and (lse_err is None or lse_err < TOL_LSE)
    return {"rel": rel, "lse_err": lse_err, "nan": nan, "ok": ok}


def say_failed(name: str, row: dict) -> None:
    """Print why a checked row is not timed (nothing when it passed)."""
    if row.get("ok"):
        return
    lse_txt = f", LSE err {row['lse_err']:.2e}" if row.get("lse_err") is not None else ""
    why = row.get("error") or f"rel {row['rel']:.2e}{lse_txt}, {row['nan']} NaN"
    print(f"  {name}: {'FAILED' if 'error' in row else 'WRONG'} ({why}), not timed", flush=True)


@functools.lru_cache(maxsize=None)
def has_enable_gqa(torch) -> bool:
    """Whether this torch's scaled_dot_product_attention takes ``enable_gqa`` (2.5 on)."""
    import torch.nn.functional as F

    try:
        x, y = torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 1, 8)
        F.scaled_dot_product_attention(x, y, y, enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


def sdpa_attempts(torch, backend, q, k, v, scale: float, causal: bool, gqa_ok: bool):
    """The ways to run one SDPA backend, first choice first: (note, fn)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    G = q.shape[1] // k.shape[1]

    def fn(kk, vv, **kw):
        def f():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q, kk, vv, is_causal=causal, scale=scale, **kw
                )

        return f

    if G == 1:
        return [("", fn(k, v))]
    out = [("enable_gqa", fn(k, v, enable_gqa=True))] if gqa_ok else []
    kr, vr = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)  # outside the timed calls
    return out + [("K/V repeated", fn(kr, vr))]


def run_group(torch, builds: list[Build], S: int, causal: int, data: dict, args, tri) -> dict:
    """Check every row of one (D, T, seq, causal) on ``data``, time the correct ones."""
    from torch.nn.attention import SDPBackend

    q, k, v = data["q"], data["k"], data["v"]
    B, H, _, d = q.shape
    HK = k.shape[1]
    scale = args.scale if args.scale is not None else d**-0.5
    nan = float("nan")
    ref_o, ref_lse = reference(torch, q, k, v, scale, bool(causal))
    rows: dict[str, dict] = {}
    live: dict[str, Callable[[], Any]] = {}

    def add(
        name: str,
        first: Callable[[], tuple],
        timed: Callable[[], Callable[[], Any]],
        what: str,
        report: bool = True,
    ) -> dict:
        """``first()`` runs the row once and returns (O, LSE or None); checked, then ``timed()``
        gives the callable to time.  A failure is printed when ``report``."""
        row = rows[name] = {"what": what}
        try:
            t0 = time.time()
            o, lse = first()
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.time() - t0, 2)
            row.update(compare(torch, o, lse, ref_o, ref_lse))
            if row["ok"]:
                live[name] = timed()
        except Exception as e:
            row.update(ok=False, error=f"{type(e).__name__}: {e}"[:600])
        if report:
            say_failed(name, row)
        return row

    for b in builds:
        O = torch.empty_like(q)
        L = torch.empty(B, H, S, dtype=torch.float32, device=DEVICE)
        add(
            f"cypressc {b.label}",
            lambda b=b, O=O, L=L: (
                O.fill_(nan),
                L.fill_(nan),
                b.kern(O, L, q, k, v, scale=scale, causal=causal),
                (O, L),
            )[-1],
            lambda b=b, O=O, L=L: b.kern.bind(O, L, q, k, v, scale=scale, causal=causal),
            f"kern(O, LSE, Q, K, V) from {b.path}",
        )
    gqa_ok = has_enable_gqa(torch)
    for name, backend in (
        ("flash", SDPBackend.FLASH_ATTENTION),
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ):
        errs = []
        for note, fn in sdpa_attempts(torch, backend, q, k, v, scale, bool(causal), gqa_ok):
            row = add(
                name,
                lambda fn=fn: (fn(), None),
                lambda fn=fn: fn,
                f"F.scaled_dot_product_attention under sdpa_kernel({backend})"
                + (f", {note}" if note else ""),
                report=False,
            )
            if "error" not in row:  # ran (right or wrong): no other way is tried
                break
            errs.append(f"{note}: {row['error']}" if note else row["error"])
        if errs and "error" not in row:
            row["tried_first"] = errs
        say_failed(name, row)
    if tri is not None:
        Ot = torch.empty_like(q)
        Lt = torch.empty(B, H, S, dtype=torch.float32, device=DEVICE)

        def tri_first():
            tri(q, k, v, scale, causal, out=Ot, lse=Lt)  # autotunes this shape
            Ot.fill_(nan)
            Lt.fill_(nan)
            return tri(q, k, v, scale, causal, out=Ot, lse=Lt)  # the chosen config alone

        add(
            "triton",
            tri_first,
            lambda: lambda: tri(q, k, v, scale, causal, out=Ot, lse=Lt),
            "bench/triton_attention.py (autotuned)",
        )
        if rows["triton"].get("ok") and hasattr(tri, "best"):
            rows["triton"]["config"] = tri.best(S, S, d, causal)
    ref_o = ref_lse = None  # freed before timing

    for fn in live.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = interleaved(torch, live, args.rounds, args.reps)  # drift hits every row alike
    flop = 4.0 * B * H * S * S * d / (2 if causal else 1)
    for name, s in samples.items():
        ms = statistics.median(s)
        rows[name].update(ms=ms, tflops=flop / ms / 1e9, min_ms=min(s), max_ms=max(s), n=len(s))
    return {
        "d": d,
        "dtype": builds[0].dtype if builds else None,
        "seq": S,
        "batch": B,
        "heads": H,
        "kv_heads": HK,
        "causal": causal,
        "scale": scale,
        "flop": flop,
        "rows": rows,
    }


def build_rows(g: dict, builds: list[Build]) -> list[dict]:
    """One record per build of a group: its numbers, each peer's, the speed ratios."""
    out = []
    for b in builds:
        r = g["rows"].get(f"cypressc {b.label}", {})
        rec = {"build": b.label, "cypressc": r, **{p: g["rows"].get(p, {}) for p in PEERS}}
        for p in PEERS:
            pm = g["rows"].get(p, {}).get("ms")
            rec[f"{p}/cypressc"] = pm / r["ms"] if pm and r.get("ms") else None
        out.append(rec)
    return out


def cell(r: dict, raised: str = "n/a") -> str:
    """``ms (TFLOP/s)``, WRONG, ``raised`` (it raised) or - (not run)."""
    if not r:
        return "-"
    if "ms" in r:
        return f"{r['ms']:.3f} ({r['tflops']:.0f})"
    return raised if "error" in r else "WRONG"


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def line(g: dict, rec: dict) -> str:
    head = (
        f"[{rec['build']} d{g['d']} {g['dtype']} seq {g['seq']} B{g['batch']} H{g['heads']}"
        + (f" HK{g['kv_heads']}" if g["kv_heads"] != g["heads"] else "")
        + f" causal {g['causal']}]"
    )
    parts = [f"cypressc {cell(rec['cypressc'], 'FAILED')}"] + [f"{n} {cell(rec[n])}" for n in PEERS]
    rats = [f"{p}/cyp {ratio(rec[f'{p}/cypressc'])}" for p in PEERS]
    cfg = rec["triton"].get("config")
    return (
        f"{head} " + " | ".join(parts) + "  " + " ".join(rats) + (f"  triton: {cfg}" if cfg else "")
    )


def table(results: list[dict], device: str, args) -> list[str]:
    L = [
        f"## attention: FlashAttention-2 forward, ms (TFLOP/s, 4·B·H·seq²·D, halved when causal); {device}, "
        f"median of {args.rounds}x{args.reps} calls; x/cyp = x ms / cypressc ms (> 1: cypressc faster)",
        "| build | d | dtype | seq | B | H | HK | causal | cypressc | flash | cudnn | triton "
        "| flash/cyp | cudnn/cyp | triton/cyp |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in results:
        for rec in g.get("builds", []):
            L.append(
                f"| {rec['build']} | {g['d']} | {g['dtype']} | {g['seq']} | {g['batch']} | {g['heads']} | "
                f"{g['kv_heads']} | {g['causal']} | {cell(rec['cypressc'], 'FAILED')} | "
                + " | ".join(cell(rec[n]) for n in PEERS)
                + " | "
                + " | ".join(ratio(rec[f"{p}/cypressc"]) for p in PEERS)
                + " |"
            )
    return L


def parse_ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="DIR[:D]",
        help="a programs/flash_attention2.cyp build directory, :D its head dimension; repeatable",
    )
    ap.add_argument(
        "--program",
        default="flash_attention2",
        choices=("flash_attention2", "flash_attention3"),
        help="the program --mapping builds",
    )
    ap.add_argument(
        "--mapping", default="", help="comma-separated mappings/<program>/<m>.yaml to build here"
    )
    ap.add_argument("--mapping-dtypes", default="f16", help="T of each --mapping build: f16,bf16")
    ap.add_argument(
        "--out", default=str(ROOT / "build" / "bench"), help="where --mapping builds go"
    )
    ap.add_argument(
        "--seqs", default="512,1024,2048,4096,8192,16384", help="sequence lengths (M = N)"
    )
    ap.add_argument("--tokens", type=int, default=16384, help="batch = tokens // seq (at least 1)")
    ap.add_argument("--causal", choices=("both", "0", "1"), default="both")
    ap.add_argument(
        "--gqa",
        type=int,
        default=1,
        metavar="G",
        help="query heads per key/value head (HK = H / G)",
    )
    ap.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(D))")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-triton", action="store_true", help="skip the Triton peer")
    args = ap.parse_args()
    if not args.build and not args.mapping:
        ap.error("give --build DIR[:D] and/or --mapping NAMES")
    seqs = parse_ints(args.seqs)
    causals = [0, 1] if args.causal == "both" else [int(args.causal)]

    import torch

    if not torch.cuda.is_available():
        print(
            "bench/attention.py needs a CUDA GPU (torch.cuda.is_available() is False)",
            file=sys.stderr,
        )
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.cuda.get_device_name()
    print(
        f"[env] {device} | torch {torch.__version__} (CUDA {torch.version.cuda}) | "
        f"cuDNN {torch.backends.cudnn.version()} | SDPA enable_gqa: {has_enable_gqa(torch)}",
        flush=True,
    )

    builds, errors = load_builds(
        args.build,
        [m for m in args.mapping.split(",") if m],
        [d for d in args.mapping_dtypes.split(",") if d],
        Path(args.out),
        args.program,
    )
    tri = None
    if not args.no_triton:
        try:
            import triton

            from triton_attention import make_attention

            tri = make_attention()
            print(f"[env] triton {triton.__version__}", flush=True)
        except Exception as e:
            print(f"[peer] triton: unavailable: {type(e).__name__}: {e}", flush=True)

    groups: dict[tuple[int, str], list[Build]] = {}
    for b in builds:
        groups.setdefault((b.d, b.dtype), []).append(b)
    results: list[dict] = []
    bad: list[str] = []
    t0 = time.time()
    for (d, dt), members in groups.items():
        H = heads_for(d)
        if args.gqa < 1 or H % args.gqa:
            bad += [f"{b.label}: --gqa {args.gqa} does not divide H = {H}" for b in members]
            continue
        for S in seqs:
            B = max(1, args.tokens // S)
            data = make_data(torch, B, H, H // args.gqa, S, d, dt)
            for causal in causals:
                t1 = time.time()
                try:
                    g = run_group(torch, members, S, causal, data, args, tri)
                    g["builds"] = build_rows(g, members)
                except Exception as e:
                    g = {
                        "d": d,
                        "dtype": dt,
                        "seq": S,
                        "batch": B,
                        "heads": H,
                        "kv_heads": H // args.gqa,
                        "causal": causal,
                        "rows": {},
                        "builds": [],
                        "error": f"{type(e).__name__}: {e}"[:600],
                    }
                    print(f"[d{d} {dt} seq {S} causal {causal}] FAILED: {g['error']}", flush=True)
                    bad += [
                        f"{b.label} at seq {S} causal {causal}: {g['error'][:200]}" for b in members
                    ]
                results.append(g)
                for rec in g["builds"]:
                    print(line(g, rec) + f"  ({time.time() - t1:.0f}s)", flush=True)
                    if "ms" not in rec["cypressc"]:
                        bad.append(f"{rec['build']} at seq {S} causal {causal}")
                if OUT:
                    Path(OUT).mkdir(parents=True, exist_ok=True)
                    (Path(OUT) / "attention.json").write_text(
                        json.dumps(
                            {
                                "device": device,
                                "torch": torch.__version__,
                                "errors": errors,
                                "results": results,
                            },
                            indent=1,
                            default=str,
                        )
                    )
            del data
            torch.cuda.empty_cache()

    print(f"\n({time.time() - t0:.0f}s)")
    for text in table(results, device, args):
        print(text)
    for n, e in errors.items():
        print(f"\n{n}: not measured: {e.splitlines()[0][:300] if e else e}")
    for b in bad:
        print(f"WRONG, REFUSED or FAILED build: {b}")
    return 1 if errors or bad else 0


if __name__ == "__main__":
    if "--backward" in sys.argv[1:]:  # the backward and forward + backward: attention_bwd.py
        import attention_bwd

        sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != "--backward"]
        sys.exit(attention_bwd.main())
    sys.exit(main())
