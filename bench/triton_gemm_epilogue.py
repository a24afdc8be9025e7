"""A fused Triton peer of programs/gemm_epilogue.cyp: C = act(A @ B + bias[None, :]), one kernel.

A plain (non-persistent) tiled GEMM, one program per C tile in grouped tile order (GROUP
tile-rows walked together so concurrent programs share A rows and B columns in L2), a K-loop
of ``tl.dot`` into a float32 accumulator, then the epilogue in registers on that float32
accumulator: + bias (read in its own dtype, widened to f32), then GELU (tanh approximation)
or SiLU, rounded to C's dtype once and stored.  Autotuned per (M, N, K, ACT) over five
Hopper-sized configs.  Any M, N, K >= 0 (ragged edges masked: A rows and B columns past the
edge are clamped in-bounds on load and masked on store, K past the edge masked to zero).

    from triton_gemm_epilogue import make_gemm_epilogue
    f = make_gemm_epilogue()
    f(A, B, bias, C, "bias_gelu")     # A [M, K], B [K, N], bias [N], C [M, N]; CUDA, row-major

Triton is imported inside :func:`make_gemm_epilogue`, so importing this module needs neither
Triton nor a GPU.
"""

from __future__ import annotations

ACTS = {"bias_gelu": 0, "bias_silu": 1}  # the ACT binding of gemm_epilogue -> the kernel's ACT


def make_gemm_epilogue(configs=None):
    """The autotuned fused kernel as ``f(A, B, bias, C, act) -> C``.

    A: [M, K], B: [K, N], C: [M, N], all of one 16-bit dtype (or f32); bias: [N] of any float
    dtype; every tensor on one CUDA device, with unit stride in its last dimension.  ``act`` is
    ``"bias_gelu"`` or ``"bias_silu"``.  ``f.best(M, N, K, act)`` names the config autotuning
    chose.  Raises ``ImportError`` without Triton and ``ValueError`` for bad shapes or ``act``.
    """
    import triton
    import triton.language as tl

    configs = configs or [
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP": 8}, num_stages=4, num_warps=8),
        triton.Config({"BM": 256, "BN": 128, "BK": 64, "GROUP": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP": 8}, num_stages=4, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP": 8}, num_stages=3, num_warps=8),
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K", "ACT"])
    @triton.heuristics({"EVEN_K": lambda meta: meta["K"] % meta["BK"] == 0})
    @triton.jit
    def _kernel(
        a,
        b,
        bias,
        c,
        M,
        N,
        K,
        sam,
        sak,
        sbk,
        sbn,
        scm,
        scn,
        ACT: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        GROUP: tl.constexpr,
        EVEN_K: tl.constexpr,
    ):
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        m0 = (pid // per_group) * GROUP
        rows = tl.minimum(tiles_m - m0, GROUP)
        tm = m0 + (pid % per_group) % rows
        tn = (pid % per_group) // rows
        om = tm * BM + tl.arange(0, BM)
        on = tn * BN + tl.arange(0, BN)
        # rows/columns past the edge read a valid row/column (their results are never
        # stored), so the main loop needs no M/N masks.  No contiguity hints: at a ragged
        # edge the wrapped indices are not contiguous (the compiler's own analysis of % keeps
        # 16-element runs when M and N are multiples of 16, enough for 16-byte loads)
        rm = om % M
        rn = on % N
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * sam + rk[None, :] * sak
        pb = b + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            if EVEN_K:
                x = tl.load(pa)
                y = tl.load(pb)
            else:
                left = K - k * BK
                x = tl.load(pa, mask=rk[None, :] < left, other=0.0)
                y = tl.load(pb, mask=rk[:, None] < left, other=0.0)
            acc = tl.dot(x, y, acc)
            pa += BK * sak
            pb += BK * sbk
        # the epilogue on the f32 accumulator, in registers
        v = acc + tl.load(bias + rn).to(tl.float32)[None, :]
        if ACT == 0:
            # GELU, tanh form: 0.5 v (1 + tanh(z)) = v * sigmoid(2 z), z = sqrt(2/pi) (v + 0.044715 v^3)
            s = tl.sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v))
        else:
            s = tl.sigmoid(v)
        out = (v * s).to(c.dtype.element_ty)
        mask = (om[:, None] < M) & (on[None, :] < N)
        tl.store(c + om[:, None] * scm + on[None, :] * scn, out, mask=mask)

    def gemm_epilogue(A, B, bias, C, act: str = "bias_gelu"):
        if act not in ACTS:
            raise ValueError(f"act must be one of {sorted(ACTS)}, got {act!r}")
        M, K = A.shape
        K2, N = B.shape
        if K2 != K or tuple(C.shape) != (M, N) or tuple(bias.shape) != (N,):
            raise ValueError(
                f"shapes: A {tuple(A.shape)}, B {tuple(B.shape)}, bias {tuple(bias.shape)}, "
                f"C {tuple(C.shape)}; want A [M, K], B [K, N], bias [N], C [M, N]"
            )
        if bias.stride(0) != 1:
            raise ValueError("bias must be contiguous")
        if M == 0 or N == 0:
            return C
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
        _kernel[grid](
            A,
            B,
            bias,
            C,
            M,
            N,
            K,
            A.stride(0),
            A.stride(1),
            B.stride(0),
            B.stride(1),
            C.stride(0),
            C.stride(1),
            ACT=ACTS[act],
        )
        return C

    def best(M, N, K, act="bias_gelu"):
        """The config autotuning chose for this shape and act ("" if none yet)."""
        cfg = None
        for key, v in getattr(_kernel, "cache", {}).items():
            if tuple(key[:4]) == (M, N, K, ACTS.get(act)):
                cfg = v
        if cfg is None:
            return ""
        kw = cfg.kwargs
        return f"{kw['BM']}x{kw['BN']}x{kw['BK']} s{cfg.num_stages} w{cfg.num_warps}"

    gemm_epilogue.best = best
    return gemm_epilogue
