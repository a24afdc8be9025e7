#!/usr/bin/env python3
"""Build, check and time bench/proto/gemm_target.cu variants on one GPU (one device call).

    PYTHONUNBUFFERED=1 python3 bench/proto/check.py [--variants a,b] [--no-sanitizer]

Each variant is a compile-time configuration of the same kernel. For each one, a child process
(timeout: a hung kernel costs one variant, not the run) checks correctness against
torch.matmul in float32 on fresh random data with a NaN-poisoned output, then times it against
torch.matmul (cuBLAS) with CUDA events, interleaved, median. Tables are printed last.
"""

import argparse
import concurrent.futures as cf
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CYP_BUILD", "/tmp/cyp_build")
OUT = os.environ.get("OUT", "/tmp/cyp_out")

# name -> extra nvcc flags on top of gemm_target.cu's defaults.
BASE = "-DCYP_PERSISTENT=0 -DCYP_EPI_TMA=0 -DCYP_STAGES=4"  # the brief's first shape
VARIANTS = {
    "default": "",  # persistent, 128x256, 3 stages, smem + TMA-store epilogue
    "default_r2": "",  # same build, second process: run-to-run spread
    "tma": "-DCYP_PERSISTENT=0",  # one block per tile, TMA-store epilogue
    "G8": "-DCYP_GROUP_M=8",
    "G32": "-DCYP_GROUP_M=32",
    "base": BASE,  # one block per tile, 4 stages, direct 4-byte stores
    "default_bf16": "-DCYP_BF16",
    "tma_bf16": "-DCYP_BF16 -DCYP_PERSISTENT=0",
}
NVCC_FLAGS = "-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a"

# (M, N, K): tile multiples, ragged M/N/K, tiny, K == 0; (129, 257, 72) must be refused (N % 8).
CHECK_SIZES = [
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (1000, 1000, 1000),
    (129, 264, 72),
    (300, 520, 1000),
    (1, 8, 8),
    (2056, 8, 4104),
    (777, 1304, 64),
    (3000, 4104, 4040),
    (64, 64, 0),
]
BAD_SIZES = [(129, 257, 72), (128, 256, 60)]
TIME_SIZES = [4096, 8192, 16384]


def cutlass_include():
    for c in [os.environ.get("CUTLASS_INC", ""), "/tmp/site/cutlass_library/source/include"]:
        if c and os.path.isdir(c):
            return c
    import cutlass_library

    return os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include")


def nvcc(out, srcs, flags, shared=True):
    cmd = (
        f"nvcc {NVCC_FLAGS} -I{ROOT}/cypressc/backend/runtime -I{cutlass_include()} {flags} "
        + ("-Xcompiler -fPIC -shared " if shared else "")
        + f"-Xptxas -v -o {out} "
        + " ".join(srcs)
    )
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def build_all(names):
    os.makedirs(BUILD, exist_ok=True)
    jobs = {n: (f"{BUILD}/lib{n}.so", [f"{HERE}/gemm_target.cu"], VARIANTS[n], True) for n in names}
    jobs["main_default"] = (
        f"{BUILD}/gemm_main_default",
        [f"{HERE}/main.cu", f"{HERE}/gemm_target.cu"],
        "",
        False,
    )
    jobs["main_base"] = (
        f"{BUILD}/gemm_main_base",
        [f"{HERE}/main.cu", f"{HERE}/gemm_target.cu"],
        BASE,
        False,
    )
    res = {}
    with cf.ThreadPoolExecutor(16) as ex:
        futs = {ex.submit(nvcc, *j): n for n, j in jobs.items()}
        for f in cf.as_completed(futs):
            n = futs[f]
            rc, log = f.result()
            regs = [l.strip() for l in log.splitlines() if "registers" in l or "spill" in l]
            warns = [l.strip() for l in log.splitlines() if "warn" in l.lower()]
            res[n] = {
                "rc": rc,
                "regs": " | ".join(regs),
                "warnings": warns,
                "log": log if rc else "",
            }
            print(f"[build] {n}: rc={rc} {res[n]['regs']} warnings={len(warns)}", flush=True)
            if rc:
                print(log[-3000:], flush=True)
    return res


def sass_summary(so):
    try:
        s = subprocess.run(
            f"cuobjdump -sass {so}", shell=True, capture_output=True, text=True, timeout=60
        ).stdout
    except Exception as e:
        return f"cuobjdump failed: {e}"
    count = lambda op: sum(1 for l in s.splitlines() if op in l)
    return f"HGMMA={count('HGMMA')} LDL={count('LDL')} STL={count('STL')} UTMALDG={count('UTMALDG')} UTMASTG={count('UTMASTG')} SYNCS={count('SYNCS')}"


def sanitizer():
    rows = []
    for exe in ["gemm_main_default", "gemm_main_base"]:
        for tool in ["memcheck", "racecheck", "synccheck"]:
            cmd = f"compute-sanitizer --tool {tool} --error-exitcode 99 {BUILD}/{exe} 256 256 256"
            t0 = time.time()
            try:
                p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=45)
                out = (p.stdout + p.stderr).strip().splitlines()
                summary = [
                    l
                    for l in out
                    if "ERROR SUMMARY" in l or "RACECHECK SUMMARY" in l or "error" in l.lower()
                ]
                rows.append(
                    (
                        exe,
                        tool,
                        p.returncode,
                        (summary[-1] if summary else (out[-1] if out else ""))[:110],
                        round(time.time() - t0, 1),
                    )
                )
                with open(f"{OUT}/sanitizer.txt", "a") as f:
                    f.write(f"==== {exe} {tool} rc={p.returncode}\n" + "\n".join(out[-150:]) + "\n")
            except subprocess.TimeoutExpired:
                rows.append((exe, tool, "timeout", "", 45))
            print(f"[sanitizer] {rows[-1]}", flush=True)
    return rows


# ---------------------------------------------------------------- child: one variant
def one(name):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bf16 = "BF16" in VARIANTS[name]
    dt = torch.bfloat16 if bf16 else torch.float16
    lib = ctypes.CDLL(f"{BUILD}/lib{name}.so")
    lib.gemm_launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
    lib.gemm_launch.restype = ctypes.c_int
    lib.gemm_config.restype = ctypes.c_char_p
    stream = torch.cuda.current_stream().cuda_stream

    def launch(A, B, C, M, N, K):
        return lib.gemm_launch(A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, stream)

    res = {"name": name, "config": lib.gemm_config().decode(), "check": [], "time": []}
    for M, N, K in CHECK_SIZES:
        A = torch.randn(M, K, device="cuda", dtype=dt)
        B = torch.randn(K, N, device="cuda", dtype=dt)
        C = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        rc = launch(A, B, C, M, N, K)
        torch.cuda.synchronize()
        ref = A.float() @ B.float()
        out = C.float()
        nan = int(torch.isnan(out).sum())
        rel = (
            float((out - ref).double().norm() / ref.double().norm().clamp_min(1e-30))
            if M * N
            else 0.0
        )
        if K == 0:
            rel = float(out.abs().max()) if M * N else 0.0
        C2 = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        launch(A, B, C2, M, N, K)
        torch.cuda.synchronize()
        det = bool(torch.equal(C, C2))
        ok = rc == 0 and nan == 0 and rel < 1e-2 and det
        res["check"].append(
            {"M": M, "N": N, "K": K, "rc": rc, "nan": nan, "rel": rel, "det": det, "ok": ok}
        )
        A = B = C = C2 = ref = out = None  # free the GPU memory before the next sizes
    for M, N, K in BAD_SIZES:
        A = torch.randn(M, K, device="cuda", dtype=dt)
        B = torch.randn(K, N, device="cuda", dtype=dt)
        C = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        rc = launch(A, B, C, M, N, K)
        torch.cuda.synchronize()
        res["check"].append(
            {
                "M": M,
                "N": N,
                "K": K,
                "rc": rc,
                "nan": -1,
                "rel": -1,
                "det": True,
                "ok": rc == 1 and bool(torch.isnan(C.float()).all()),
            }
        )  # 1 = cudaErrorInvalidValue
    torch.cuda.empty_cache()

    for n in TIME_SIZES:
        A = torch.randn(n, n, device="cuda", dtype=dt)
        B = torch.randn(n, n, device="cuda", dtype=dt)
        C = torch.empty(n, n, device="cuda", dtype=dt)
        C_ref = torch.empty(n, n, device="cuda", dtype=dt)

        def ours():
            assert launch(A, B, C, n, n, n) == 0

        def cublas():
            torch.matmul(A, B, out=C_ref)

        def timed(fn, reps):
            ev = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(reps)
            ]
            for e0, e1 in ev:
                e0.record()
                fn()
                e1.record()
            torch.cuda.synchronize()
            return [e0.elapsed_time(e1) for e0, e1 in ev]

        for fn in (cublas, ours, cublas, ours):
            timed(fn, 5)  # warm-up (module load, handles, clocks)
        t_ours, t_cub = [], []
        for _ in range(5):  # interleave: drift hits both alike
            t_cub += timed(cublas, 10)
            t_ours += timed(ours, 10)
        rel = float((C.float() - C_ref.float()).norm() / C_ref.float().norm())
        mo, mc = statistics.median(t_ours), statistics.median(t_cub)
        fl = 2.0 * n**3
        res["time"].append(
            {
                "n": n,
                "ours_ms": mo,
                "cublas_ms": mc,
                "ours_tflops": fl / mo / 1e9,
                "cublas_tflops": fl / mc / 1e9,
                "ratio": mc / mo,
                "rel_vs_cublas": rel,
                "ours_spread": (min(t_ours), max(t_ours)),
            }
        )
        A = B = C = C_ref = None  # free the GPU memory before the next size
        torch.cuda.empty_cache()
    print("RESULT " + json.dumps(res), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--no-sanitizer", action="store_true")
    a = ap.parse_args()
    if a.one:
        return one(a.one)
    os.makedirs(OUT, exist_ok=True)
    names = a.variants.split(",")
    subprocess.run(
        "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv",
        shell=True,
    )
    t0 = time.time()
    builds = build_all(names)
    print(f"[build] {time.time() - t0:.1f}s", flush=True)
    sass = {
        n: sass_summary(f"{BUILD}/lib{n}.so") for n in names[:1] + [n for n in names if n == "base"]
    }
    results = {}
    for n in names:
        if builds[n]["rc"]:
            continue
        t1 = time.time()
        try:
            p = subprocess.run(
                [sys.executable, __file__, "--one", n], capture_output=True, text=True, timeout=100
            )
            lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if lines:
                results[n] = json.loads(lines[-1][7:])
            else:
                print(
                    f"[{n}] failed rc={p.returncode}\n{(p.stdout + p.stderr)[-2500:]}", flush=True
                )
        except subprocess.TimeoutExpired:
            print(f"[{n}] TIMEOUT (hang?)", flush=True)
        print(f"[{n}] done in {time.time() - t1:.1f}s", flush=True)
    with open(f"{OUT}/check.json", "w") as f:
        json.dump({"builds": builds, "sass": sass, "results": results}, f, indent=1)
    import io
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tables(names, builds, sass, [], results)
    open(f"{OUT}/tables.txt", "w").write(buf.getvalue())
    san = [] if a.no_sanitizer else sanitizer()
    tables(names, builds, sass, san, results)


def tables(names, builds, sass, san, results):
    # ------------------------------------------------------------ tables (last, so the tail shows them)
    print("\n== build (ptxas) / SASS")
    for n in names:
        b = builds[n]
        print(f"{n:12s} rc={b['rc']} {b['regs'][:120]} warn={b['warnings'][:2]}")
    for n, s in sass.items():
        print(f"SASS {n}: {s}")
    if san:
        print("\n== compute-sanitizer (256x256x256)")
        for r in san:
            print(f"{r[0]:15s} {r[1]:9s} rc={r[2]} {r[3]} ({r[4]}s)")
    print(
        "\n== correctness: rel = ||out-ref||/||ref|| vs torch f32 matmul; det = two runs bitwise equal"
    )
    print(
        f"{'variant':12s} "
        + " ".join(f"{f'{M}x{N}x{K}':>15s}" for (M, N, K) in CHECK_SIZES + BAD_SIZES)
    )
    for n, r in results.items():
        cells = []
        for c in r["check"]:
            if c["rel"] == -1:
                cells.append(f"{'refused' if c['ok'] else 'NOT REFUSED'}:{c['rc']}")
            else:
                cells.append(
                    ("ok " if c["ok"] else "BAD ")
                    + f"{c['rel']:.1e}"
                    + ("" if c["nan"] == 0 else f" nan{c['nan']}")
                    + ("" if c["det"] else " nondet")
                    + ("" if c["rc"] == 0 else f" rc{c['rc']}")
                )
        print(f"{n:12s} " + " ".join(f"{x:>15s}" for x in cells))
    print(
        "\n== timing: M=N=K=n, median of 50 (CUDA events), interleaved with torch.matmul (cuBLAS)"
    )
    print(
        f"{'variant':12s} {'config':68s} {'n':>6s} {'ours ms':>9s} {'TFLOP/s':>8s} {'cuBLAS':>8s} {'ratio':>6s}"
    )
    for n, r in results.items():
        for t in r["time"]:
            print(
                f"{n:12s} {r['config'][:68]:68s} {t['n']:6d} {t['ours_ms']:9.3f} {t['ours_tflops']:8.1f} "
                f"{t['cublas_tflops']:8.1f} {t['ratio']:6.3f}"
            )


if __name__ == "__main__":
    main()
