#!/usr/bin/env python3
"""FlashAttention backward (issue #38): tests/programs/flash_attention_bwd.cyp (three kernels
behind one launcher) against cuDNN and Flash SDPA's backward, in one process, on the same
tensors.

    PYTHONUNBUFFERED=1 python3 bench/attention_bwd.py --build DIR [--build DIR ...]
        [--seqs 1024,2048,4096,8192,16384] [--tokens 16384] [--causal both|0|1] [--rounds 5] [--reps 10]
    PYTHONUNBUFFERED=1 python3 bench/attention_bwd.py --op [--dtypes f16,bf16] [--dims 64,128] ...
    (bench/attention.py --backward ... runs this script)

Each ``--build`` is a ``cypressc build tests/programs/flash_attention_bwd.cyp -m … [--dtype
T=bf16]`` directory (``make`` runs here; a no-op when built); D is the mapping's E
(128, else 64 when the build refuses 128).  Per (build, seq): B = tokens // seq, H = 2048 / D,
Q, K, V, dO ~ randn in the build's T, scale = 1/sqrt(D), causal 0 and/or 1 (top-left).  O and
LSE come from torch in float32 (the forward's), dQ, dK, dV are checked against float32 autograd
of softmax(Q Kᵀ · scale) V (rel = ||x - ref|| / ||ref|| < 1e-2 for each, NaN-poisoned first); a
wrong build is not timed.

Rows timed, interleaved (cypressc.tuner.timing.interleaved, the median per call):
* ``cypressc``: the build's launcher (preprocess, main kernel, postprocess; scratch Dsum
  and dQacc allocated once outside the timing, as FlashAttention's Python side does);
* ``cudnn`` / ``flash``: ``torch.autograd.grad`` of ``F.scaled_dot_product_attention`` under
  ``sdpa_kernel(CUDNN_ATTENTION / FLASH_ATTENTION)`` on a graph built once (the backward alone;
  retain_graph).
TFLOP/s counts the backward's 2.5 × the forward's 4·B·H·seq²·D, halved when causal
(FlashAttention's convention);
the ratio is peer ms / cypressc ms (> 1: cypressc faster).

``--op`` adds, per dtype, head dimension, seq and causal, the trainable op
``cypressc.torch.flash_attention`` (the forward and backward builds it picks itself) against
SDPA's cuDNN and Flash backends on the same Q, K, V, dO: its gradients checked against float32
autograd first (as above), then ``<peer> bwd`` (``torch.autograd.grad`` on a graph built once)
and ``<peer> fwd+bwd`` (the forward and ``torch.autograd.grad`` each call; 3.5 × the forward's
FLOPs).  A markdown table prints last;
JSON to $OUT/attention_bwd.json when OUT is set.  Exit 1 when a build is wrong, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gemm import make  # noqa: E402

from cypressc.tuner.timing import interleaved  # noqa: E402

TOL = 1e-2


def _rel(torch, x, ref) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def reference(torch, q, k, v, do, sc: float, causal: int):
    """(O in q's dtype, LSE f32, float32 autograd's (dQ, dK, dV)) of softmax(Q Kᵀ·sc) V with
    K, V of the same heads as Q, in chunks of heads (about 1 GiB of f32 scores each)."""
    B, H, seq, d = q.shape
    dt = q.dtype
    lse = torch.empty(B, H, seq, device="cuda", dtype=torch.float32)
    o = torch.empty_like(q)
    ref = tuple(torch.empty(B, H, seq, d, device="cuda", dtype=torch.float32) for _ in range(3))
    step = max(1, (1 << 28) // (seq * seq))  # heads per chunk: about 1 GiB of f32 scores
    for b in range(B):
        for h in range(0, H, step):
            sl = (b, slice(h, h + step))
            qf, kf, vf = (x[sl].float().requires_grad_() for x in (q, k, v))
            s = qf @ kf.transpose(-1, -2) * sc
            if causal:
                s = s.masked_fill(
                    torch.ones(seq, seq, dtype=torch.bool, device="cuda").triu(1), float("-inf")
                )
            lse[sl] = torch.logsumexp(s.detach(), dim=-1)
            of = torch.softmax(s, dim=-1) @ vf
            for r, x in zip(ref, torch.autograd.grad(of, (qf, kf, vf), do[sl].float())):
                r[sl] = x
            o[sl] = of.detach().to(dt)
            del s, of, qf, kf, vf
    return o, lse, ref


def run_seq(torch, kern, d: int, seq: int, causal: int, args) -> dict:
    """Check the build at one sequence length, then time it and the SDPA backends."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dt = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[kern.info.params[0].dtype])
    B, H = max(1, args.tokens // seq), 2048 // d
    g = torch.Generator(device="cuda").manual_seed(seq * 1000 + d)
    q, k, v, do = (
        torch.randn(B, H, seq, d, device="cuda", dtype=dt, generator=g) for _ in range(4)
    )
    sc = d**-0.5
    o, lse, ref = reference(torch, q, k, v, do, sc, causal)
    dq, dk, dv = (torch.full_like(x, float("nan")) for x in (q, k, v))
    dsum = torch.empty(B, H, seq, device="cuda", dtype=torch.float32)
    dqacc = torch.empty(B, H, seq, d, device="cuda", dtype=torch.float32)
    call = kern.bind(dq, dk, dv, dsum, dqacc, q, k, v, o, do, lse, scale=sc, causal=causal)
    call()
    torch.cuda.synchronize()
    rels = {n: _rel(torch, x, r) for n, x, r in zip(("dQ", "dK", "dV"), (dq, dk, dv), ref)}
    row: dict = {"seq": seq, "B": B, "H": H, "d": d, "causal": causal, "rel": rels}
    row["ok"] = all(r < TOL for r in rels.values())
    del ref
    if args.repeat:  # bitwise reproducibility: how many later runs differ from the first
        first = [x.clone() for x in (dq, dk, dv)]
        row["differ"] = 0
        for _ in range(args.repeat):
            for x in (dq, dk, dv):
                x.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            row["differ"] += any(
                not torch.equal(a.view(torch.int16), b.view(torch.int16))
                for a, b in zip(first, (dq, dk, dv))
            )
    fns = {"cypressc": call} if row["ok"] else {}
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):
        try:
            qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(qq, kk, vv, scale=sc, is_causal=bool(causal))

            def bwd(out=out, qq=qq, kk=kk, vv=vv):
                return torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)

            g2 = bwd()
            row[f"{name}_rel"] = _rel(torch, g2[0], dq.float())  # vs ours, a sanity number
            fns[name] = bwd
        except Exception as e:  # noqa: BLE001 - a peer that cannot run is n/a
            row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:300]
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = interleaved(torch, fns, args.rounds, args.reps)
    flop = 2.5 * 4.0 * B * H * seq * seq * d / (2 if causal else 1)
    for name, smp in samples.items():
        ms = statistics.median(smp)
        row[name] = {"ms": ms, "tflops": flop / ms / 1e9}
    for name in ("cudnn", "flash"):
        if name in row and "cypressc" in row:
            row[f"vs_{name}"] = row[name]["ms"] / row["cypressc"]["ms"]
    return row


def run_op_seq(torch, dt, d: int, seq: int, causal: int, args) -> dict:
    """``--op``: cypressc.torch.flash_attention (forward + backward ops) checked against float32
    autograd, then timed against SDPA's cuDNN and Flash backends: the backward alone (a graph
    built once, ``retain_graph``) and forward + backward (a fresh graph per call)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cypressc.torch import flash_attention

    B, H = max(1, args.tokens // seq), 2048 // d
    g = torch.Generator(device="cuda").manual_seed(seq * 1000 + d + 7)
    q, k, v, do = (
        torch.randn(B, H, seq, d, device="cuda", dtype=dt, generator=g) for _ in range(4)
    )
    sc = d**-0.5
    _, _, ref = reference(torch, q, k, v, do, sc, causal)
    row: dict = {"seq": seq, "B": B, "H": H, "d": d, "causal": causal}
    peers = {
        "cypressc": lambda a, b, c: flash_attention(a, b, c, causal=bool(causal), scale=sc),
    }
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):

        def sdpa(a, b, c, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(a, b, c, scale=sc, is_causal=bool(causal))

        peers[name] = sdpa
    fns = {}
    for name, attn in peers.items():
        try:
            qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))
            out = attn(qq, kk, vv)

            def bwd(out=out, qq=qq, kk=kk, vv=vv):
                return torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)

            def fwd_bwd(attn=attn, qq=qq, kk=kk, vv=vv):
                return torch.autograd.grad(attn(qq, kk, vv), (qq, kk, vv), do)

            grads = fwd_bwd()
            torch.cuda.synchronize()
            rels = {n: _rel(torch, x, r) for n, x, r in zip(("dQ", "dK", "dV"), grads, ref)}
            row[f"{name}_rel"] = rels
            if name == "cypressc":
                row["rel"], row["ok"] = rels, all(r < TOL for r in rels.values())
                if not row["ok"]:
                    continue
            fns[f"{name} bwd"], fns[f"{name} fwd+bwd"] = bwd, fwd_bwd
        except Exception as e:  # noqa: BLE001 - a peer that cannot run is n/a
            row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:300]
    del ref
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = interleaved(torch, fns, args.rounds, args.reps)
    fwd_flop = 4.0 * B * H * seq * seq * d / (2 if causal else 1)
    for name, smp in samples.items():
        ms = statistics.median(smp)
        flop = fwd_flop * (2.5 if name.endswith(" bwd") and "+" not in name else 3.5)
        row[name] = {"ms": ms, "tflops": flop / ms / 1e9}
    for part in ("bwd", "fwd+bwd"):
        for peer in ("cudnn", "flash"):
            a, b = f"{peer} {part}", f"cypressc {part}"
            if a in row and b in row:
                row[f"{part} vs_{peer}"] = row[a]["ms"] / row[b]["ms"]
    return row


def op_table(rows: list[dict]) -> list[str]:
    """The markdown table of ``--op`` rows."""
    out = [
        "| T | d | seq | causal | bwd TFLOP/s | cuDNN | vs cuDNN | vs Flash | fwd+bwd TFLOP/s | "
        "cuDNN | vs cuDNN | vs Flash | rel dQ/dK/dV |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tf = lambda n: f"{r[n]['tflops']:.0f}" if n in r else "n/a"  # noqa: E731
        ratio = lambda n: f"{r[n]:.2f}" if n in r else "n/a"  # noqa: E731
        rel = "/".join(f"{v:.1e}" for v in r.get("rel", {}).values()) or "n/a"
        out.append(
            f"| {r['dtype']} | {r['d']} | {r['seq']} | {r['causal']} | {tf('cypressc bwd')} | "
            f"{tf('cudnn bwd')} | {ratio('bwd vs_cudnn')} | {ratio('bwd vs_flash')} | "
            f"{tf('cypressc fwd+bwd')} | {tf('cudnn fwd+bwd')} | {ratio('fwd+bwd vs_cudnn')} | "
            f"{ratio('fwd+bwd vs_flash')} | {rel} |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", default=[])
    ap.add_argument(
        "--op",
        action="store_true",
        help="also time cypressc.torch.flash_attention: backward alone and forward + backward",
    )
    ap.add_argument("--dtypes", default="f16,bf16", help="--op: the dtypes")
    ap.add_argument("--dims", default="64,128", help="--op: the head dimensions")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--causal", choices=("both", "0", "1"), default="both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="run each build N more times on the same inputs and count the runs whose dQ, dK "
        "or dV differ bit for bit from the first (deterministic: true makes it 0)",
    )
    args = ap.parse_args()
    if not args.build and not args.op:
        ap.error("give --build DIR (one or more) or --op")
    import torch

    if not torch.cuda.is_available():
        print("attention_bwd: no CUDA GPU", file=sys.stderr)
        return 2
    from cypressc.runtime import load

    out, bad = [], 0
    for b in args.build:
        make(Path(b))
        kern = load(b)
        d = 128 if not kern.info.failed_requires(_sizes(kern, 128)) else 64
        causals = (0, 1) if args.causal == "both" else (int(args.causal),)
        for seq, causal in ((int(x), c) for x in args.seqs.split(",") for c in causals):
            r = run_seq(torch, kern, d, seq, causal, args)
            r["build"], r["dtype"] = b, kern.info.params[0].dtype
            bad += not r["ok"]
            out.append(r)
            print(json.dumps(r), flush=True)
    ops = []
    if args.op:
        causals = (0, 1) if args.causal == "both" else (int(args.causal),)
        for t in args.dtypes.split(","):
            dt = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[t])
            for d in (int(x) for x in args.dims.split(",")):
                for seq, causal in ((int(x), c) for x in args.seqs.split(",") for c in causals):
                    r = run_op_seq(torch, dt, d, seq, causal, args)
                    r["dtype"] = t
                    bad += not r["ok"]
                    ops.append(r)
                    print(json.dumps(r), flush=True)
    print("\n## attention backward")
    print(
        "| build | T | d | seq | causal | cypressc TFLOP/s | cuDNN | Flash | vs cuDNN | vs Flash | "
        "rel dQ/dK/dV | runs ≠ first |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out:
        tf = lambda n: f"{r[n]['tflops']:.0f}" if n in r else "n/a"  # noqa: E731
        ratio = lambda n: f"{r[f'vs_{n}']:.2f}" if f"vs_{n}" in r else "n/a"  # noqa: E731
        rel = "/".join(f"{v:.1e}" for v in r["rel"].values())
        print(
            f"| {Path(r['build']).name} | {r['dtype']} | {r['d']} | {r['seq']} | {r['causal']} | "
            f"{tf('cypressc')} | "
            f"{tf('cudnn')} | {tf('flash')} | {ratio('cudnn')} | {ratio('flash')} | {rel} | "
            + (f"{r['differ']}/{args.repeat} |" if "differ" in r else "n/a |")
        )
    if ops:
        print("\n## cypressc.torch.flash_attention: backward alone and forward + backward")
        print("\n".join(op_table(ops)))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "attention_bwd.json").write_text(json.dumps(out + ops, indent=1))
    return 1 if bad else 0


def _sizes(kern, d: int) -> dict:
    return {"B": 1, "H": 1, "HK": 1, "M": 128, "N": 128, "D": d, "causal": 0}


if __name__ == "__main__":
    sys.exit(main())
