"""A Triton FlashAttention-2 forward: the peer of programs/flash_attention2.cyp in bench/attention.py.

O = softmax(Q Kᵀ · scale) V per (batch, head) and LSE, the natural log-sum-exp of each softmax
row (float32), for Q [B, H, M, D] and K, V [B, HK, N, D] (grouped-query attention: query head h
reads key/value head h // (H / HK)), all contiguous f16 or bf16 on one CUDA device, D in
{64, 128}.  One program per (BLOCK_M query rows, batch x head); it keeps its Q block in
registers and walks BLOCK_N-row tiles of K and V with the online softmax in the exp2 domain:
s = scale·log2(e) is folded into the scores once, so m (the running row max), alpha = 2^(m_old -
m) and P = 2^(S·s - m) need no further multiply, and LSE = (m + log2(l))·ln(2) at the end.
``causal`` masks key j for query i when j > i (top-left aligned, torch's ``is_causal``); the
key loop stops at the block's diagonal.  The loop is split in two: the tiles every row of the
block sees whole (no mask, no bounds: below the diagonal and before N) and the rest (the
diagonal tiles and the ragged last tile, masked).  Keys past N and rows past M are masked;
with causal, query blocks are launched longest-first so the short ones fill the tail.
Autotuned per (M, N, D, causal) over six Hopper-sized (BLOCK_M, BLOCK_N, warps, stages)
configs (BLOCK_N divides BLOCK_M, which the split needs).

    from triton_attention import attention
    o, lse = attention(q, k, v, scale=0.125, causal=True)

Triton is imported on the first call (:func:`make_attention`), so importing this module needs
neither Triton nor torch nor a GPU.
"""

from __future__ import annotations

__all__ = ["attention", "best", "make_attention", "LOG2E", "HEAD_DIMS", "CONFIGS"]

LOG2E = 1.4426950408889634
HEAD_DIMS = (64, 128)
# (BLOCK_M, BLOCK_N, num_warps, num_stages); every BLOCK_N divides its BLOCK_M
CONFIGS = [
    (128, 64, 4, 3),
    (128, 64, 8, 3),
    (128, 128, 8, 3),
    (128, 64, 8, 4),
    (64, 64, 4, 3),
    (128, 128, 8, 2),
]

_KERNEL = None
_attn_tile = None  # the jitted tile step, set by make_attention


def make_attention(configs=None):
    """The autotuned kernel as ``f(q, k, v, scale, causal, out=None, lse=None) -> (o, lse)``
    (see :func:`attention`); ``configs`` is a list of ``triton.Config`` (default: :data:`CONFIGS`).
    ``f.best(M, N, D, causal)`` names the config autotuning chose.  Raises ``ImportError``
    without Triton."""
    import torch
    import triton
    import triton.language as tl

    configs = configs or [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in CONFIGS
    ]

    # a module global, not a closure: Triton's interpreter and compilers before 3.3 look a
    # kernel's callees up among its module's globals only
    global _attn_tile

    @triton.jit
    def _attn_tile(
        acc,
        m_i,
        l_i,
        qb,
        k_base,
        v_base,
        skn,
        svn,
        start_n,
        offs_m,
        offs_n,
        offs_d,
        N,
        qk_scale,
        MASKED: tl.constexpr,
        CAUSAL: tl.constexpr,
    ):
        # one BLOCK_N tile of keys: S = Q Kᵀ·s, the online-softmax update, acc += P V
        cols = start_n + offs_n
        kp = k_base + cols[:, None] * skn + offs_d[None, :]
        vp = v_base + cols[:, None] * svn + offs_d[None, :]
        if MASKED:
            # keys past N read as zeros: a zero V row times a zero P is 0, never 0 * garbage
            kb = tl.load(kp, mask=cols[:, None] < N, other=0.0)
            vb = tl.load(vp, mask=cols[:, None] < N, other=0.0)
        else:
            kb = tl.load(kp)
            vb = tl.load(vp)
        s = tl.dot(qb, tl.trans(kb)) * qk_scale
        if MASKED:
            ok = cols[None, :] < N
            if CAUSAL:
                ok = ok & (cols[None, :] <= offs_m[:, None])
            s = tl.where(ok, s, float("-inf"))
        # every row sees key 0 in the block's first tile, so m is finite from then on and a row
        # whose keys in a later tile are all masked gets P = 2^-inf = 0, alpha = 1
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(vb.dtype), vb, acc)
        return acc, m_new, l_i

    @triton.autotune(configs=configs, key=["M", "N", "D", "CAUSAL"])
    @triton.jit
    def _fwd(
        q,
        k,
        v,
        o,
        lse,
        qk_scale,
        sqb,
        sqh,
        sqm,
        skb,
        skh,
        skn,
        svb,
        svh,
        svn,
        sob,
        soh,
        som,
        slb,
        slh,
        H,
        G,
        M,
        N,
        D: tl.constexpr,
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        # the config keys (BLOCK_M, BLOCK_N) stay last: older autotuners index the key
        # arguments by position among the arguments actually passed
        if CAUSAL:  # longest key loops first: the short blocks at the top fill the tail
            start_m = tl.num_programs(0) - 1 - tl.program_id(0)
        else:
            start_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = (bh // H).to(tl.int64)
        h = (bh % H).to(tl.int64)
        hk = h // G
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, D)
        q_base = q + b * sqb + h * sqh
        k_base = k + b * skb + hk * skh
        v_base = v + b * svb + hk * svh
        qb = tl.load(
            q_base + offs_m[:, None] * sqm + offs_d[None, :], mask=offs_m[:, None] < M, other=0.0
        )
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
        if CAUSAL:
            # keys below every row of the block (j < start_m·BLOCK_M <= i) need no causal mask
            full = tl.minimum(start_m * BLOCK_M, N) // BLOCK_N * BLOCK_N
            hi = tl.minimum((start_m + 1) * BLOCK_M, N)
        else:
            full = N // BLOCK_N * BLOCK_N
            hi = N
        for start_n in range(0, full, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, m_i, l_i = _attn_tile(
                acc,
                m_i,
                l_i,
                qb,
                k_base,
                v_base,
                skn,
                svn,
                start_n,
                offs_m,
                offs_n,
                offs_d,
                N,
                qk_scale,
                False,
                CAUSAL,
            )
        for start_n in range(full, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, m_i, l_i = _attn_tile(
                acc,
                m_i,
                l_i,
                qb,
                k_base,
                v_base,
                skn,
                svn,
                start_n,
                offs_m,
                offs_n,
                offs_d,
                N,
                qk_scale,
                True,
                CAUSAL,
            )
        out = acc / l_i[:, None]
        rows = offs_m < M
        o_base = o + b * sob + h * soh
        tl.store(
            o_base + offs_m[:, None] * som + offs_d[None, :],
            out.to(o.dtype.element_ty),
            mask=rows[:, None],
        )
        # natural log-sum-exp of the scaled scores: m is in log2 units of S·scale
        tl.store(
            lse + b * slb + h * slh + offs_m,
            (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
            mask=rows,
        )

    def attention_fwd(q, k, v, scale: float, causal, out=None, lse=None):
        if q.dim() != 4:
            raise ValueError(f"q must be [B, H, M, D], got shape {tuple(q.shape)}")
        B, H, M, D = q.shape
        if k.dim() != 4 or v.shape != k.shape or k.shape[0] != B or k.shape[3] != D:
            raise ValueError(
                f"shapes: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
                "want q [B, H, M, D], k and v [B, HK, N, D]"
            )
        HK, N = k.shape[1], k.shape[2]
        if HK == 0 or H % HK:
            raise ValueError(f"H = {H} must be a multiple of HK = {HK}")
        if D not in HEAD_DIMS:
            raise ValueError(f"head dimension {D}: the Triton peer takes D in {HEAD_DIMS}")
        if (
            q.dtype not in (torch.float16, torch.bfloat16)
            or k.dtype != q.dtype
            or v.dtype != q.dtype
        ):
            raise ValueError(
                f"q, k, v must share one dtype of f16/bf16, got {q.dtype}, {k.dtype}, {v.dtype}"
            )
        if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
            raise ValueError("q, k, v must be contiguous")
        if N == 0:
            raise ValueError("N = 0 keys: the softmax of an empty row is undefined")
        o = torch.empty_like(q) if out is None else out
        lse_ = torch.empty((B, H, M), device=q.device, dtype=torch.float32) if lse is None else lse
        if tuple(o.shape) != (B, H, M, D) or o.dtype != q.dtype or not o.is_contiguous():
            raise ValueError(f"out must be a contiguous {q.dtype} [B, H, M, D] tensor")
        if (
            tuple(lse_.shape) != (B, H, M)
            or lse_.dtype != torch.float32
            or not lse_.is_contiguous()
        ):
            raise ValueError("lse must be a contiguous float32 [B, H, M] tensor")
        if B * H * M == 0:
            return o, lse_
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), B * H)  # noqa: E731
        _fwd[grid](
            q,
            k,
            v,
            o,
            lse_,
            float(scale) * LOG2E,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            v.stride(0),
            v.stride(1),
            v.stride(2),
            o.stride(0),
            o.stride(1),
            o.stride(2),
            lse_.stride(0),
            lse_.stride(1),
            H,
            H // HK,
            M,
            N,
            D=D,
            CAUSAL=int(bool(causal)),
        )
        return o, lse_

    def best(M, N, D, causal):
        """The config autotuning chose for this shape ("" if none yet)."""
        cfg = None
        for key, val in getattr(_fwd, "cache", {}).items():
            if tuple(key[:4]) == (M, N, D, int(bool(causal))):
                cfg = val
        if cfg is None and len(configs) == 1:  # one config: the autotuner keeps no cache
            cfg = configs[0]
        if cfg is None:
            return ""
        kw = cfg.kwargs
        return f"{kw['BLOCK_M']}x{kw['BLOCK_N']} w{cfg.num_warps} s{cfg.num_stages}"

    attention_fwd.best = best
    return attention_fwd


def attention(q, k, v, scale: float | None = None, causal=False, out=None, lse=None):
    """FlashAttention-2 forward: ``(o, lse)`` for q [B, H, M, D], k and v [B, HK, N, D].

    q, k, v: contiguous CUDA tensors of one dtype (f16 or bf16), H a multiple of HK (query head h
    reads key/value head h // (H / HK)), D in {64, 128}, N >= 1.  ``scale`` defaults to
    1/sqrt(D); ``causal`` masks key j for query i when j > i (top-left aligned).  Returns o
    [B, H, M, D] in q's dtype and lse [B, H, M] float32 (natural log-sum-exp of each scaled,
    masked score row), written into ``out`` / ``lse`` when given (contiguous, those shapes).
    The first call of each (M, N, D, causal) autotunes (runs every config).  Raises
    ``ValueError`` for bad shapes or dtypes, ``ImportError`` without Triton."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = make_attention()
    return _KERNEL(
        q, k, v, q.shape[-1] ** -0.5 if scale is None else scale, causal, out=out, lse=lse
    )


def best(M: int, N: int, D: int, causal) -> str:
    """The config :func:`attention`'s autotuning chose for (M, N, D, causal) ("" if none yet)."""
    return _KERNEL.best(M, N, D, causal) if _KERNEL is not None else ""
