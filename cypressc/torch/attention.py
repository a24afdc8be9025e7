"""``cypressc.torch.flash_attention``: trainable attention from the bundled programs (issue #38).

One function, :func:`flash_attention`, computes ``softmax(q·kᵀ·scale)·v`` with PyTorch's
``F.scaled_dot_product_attention`` conventions (``[B, H, M, D]`` queries, ``[B, HK, N, D]``
keys and values, ``is_causal`` top-left aligned) and has a backward: two ``torch.library``
custom ops, ``torch.ops.cypressc.flash_attention_forward`` (programs/flash_attention3.cyp;
returns O and the log-sum-exp of each query row, which it saves) and
``torch.ops.cypressc.flash_attention_backward`` (tests/programs/flash_attention_bwd.cyp:
three kernels behind one launcher), joined by ``register_autograd``.  Both have fake (meta)
implementations, so ``torch.compile(fullgraph=True)`` traces through forward and backward
without a graph break; both launch on the current stream and allocate through PyTorch's
caching allocator, so a CUDA graph captures them (after one call outside the capture has
built the kernels).

The kernels are built on first use for the head dimension's bucket (D ≤ 64: the d64
mappings, else D ≤ 128: the d128 ones) and the dtype (f16, bf16), through
:func:`cypressc.compile` and its cache (``$CYPRESSC_CACHE_DIR``), and kept for the process.
The programs and mappings are read from the repository checkout cypressc runs from
(``programs/``, ``mappings/`` and, for the backward until it moves to ``programs/``,
``tests/programs/``, ``tests/mappings/``: an editable install); :data:`KERNELS` names them.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import torch

from cypressc.runtime import Kernel, KernelError

__all__ = ["flash_attention", "KERNELS", "head_bucket"]

ROOT = Path(__file__).resolve().parents[2]

# (pass, head-dimension bucket) -> (program, mapping), relative to the repository root: the
# fastest correct mappings bench/NOTES.md records for each
KERNELS: dict[tuple[str, int], tuple[str, str]] = {
    ("forward", 64): (
        "programs/flash_attention3.cyp",
        "mappings/flash_attention3/h100_d64_wg3_staged_persistent.yaml",
    ),
    ("forward", 128): (
        "programs/flash_attention3.cyp",
        "mappings/flash_attention3/h100_d128_staged_persistent.yaml",
    ),
    ("backward", 64): (
        "tests/programs/flash_attention_bwd.cyp",
        "tests/mappings/flash_attention_bwd/h100_d64_tma.yaml",
    ),
    ("backward", 128): (
        "tests/programs/flash_attention_bwd.cyp",
        "tests/mappings/flash_attention_bwd/h100_d128_tma.yaml",
    ),
    # deterministic=True: the key blocks add into each dQ tile in their order (the mappings'
    # `deterministic: true`), so the gradients are the same bits on every run
    ("deterministic backward", 64): (
        "tests/programs/flash_attention_bwd.cyp",
        "tests/mappings/flash_attention_bwd/h100_d64_det.yaml",
    ),
    ("deterministic backward", 128): (
        "tests/programs/flash_attention_bwd.cyp",
        "tests/mappings/flash_attention_bwd/h100_d128_det.yaml",
    ),
}
_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_BUILT: dict[tuple[str, int, str], Kernel] = {}
_LOCK = threading.Lock()
# (pass, each tensor's dtype / shape / device, scale, causal) -> the kernel's launcher checked
# for them (Kernel.launcher): a training step calls the ops on a few shapes, and the full
# argument checks cost a sizable share of a short sequence's kernel time
_LAUNCHERS: OrderedDict[tuple, Callable[..., None]] = OrderedDict()
_MAX_LAUNCHERS = 64


def head_bucket(d: int) -> int:
    """The head dimension the kernels for ``d`` are built for: 64 for ``d`` ≤ 64, 128 for
    ``d`` ≤ 128.  Raises :class:`~cypressc.runtime.KernelError` (a ``ValueError``) above 128
    or below 1."""
    if 1 <= d <= 64:
        return 64
    if 64 < d <= 128:
        return 128
    raise KernelError(
        f"flash_attention: head dimension {d} is not supported (1 to 128; the bundled "
        "mappings are built for 64 and 128)"
    )


def _kernel(which: str, d: int, dtype: torch.dtype) -> Kernel:
    """The built kernel for (``which`` pass, ``d``'s bucket, dtype), compiling it (or taking it
    from cypressc's cache) on first use."""
    key = (which, head_bucket(d), _DTYPES[dtype])
    hit = _BUILT.get(key)
    if hit is not None:
        return hit
    with _LOCK:
        if key not in _BUILT:
            import cypressc

            program, mapping = (ROOT / p for p in KERNELS[key[:2]])
            if not program.is_file() or not mapping.is_file():
                raise FileNotFoundError(
                    f"flash_attention needs {program} and {mapping}: cypressc reads its "
                    "bundled programs from the repository checkout (pip install -e)"
                )
            _BUILT[key] = cypressc.compile(program, mapping, dtype=key[2])
    return _BUILT[key]


def _launch(which: str, tensors: tuple[torch.Tensor, ...], scale: float, causal: bool) -> None:
    """Launch the ``which`` kernel on ``tensors`` (in its parameter order; Q is the forward's
    third and the backward's sixth) through a launcher checked once per signature."""
    q = tensors[2] if which == "forward" else tensors[5]
    kern = _kernel(which, q.shape[3], q.dtype)
    sig = tuple((t.dtype, tuple(t.shape), t.device) for t in tensors)
    key = (str(kern.library), sig, scale, causal)
    run = _LAUNCHERS.get(key)
    if run is None:
        run = kern.launcher(*tensors, scale=scale, causal=int(causal))
        _LAUNCHERS[key] = run
        if len(_LAUNCHERS) > _MAX_LAUNCHERS:
            _LAUNCHERS.popitem(last=False)  # the least recently used
    else:
        _LAUNCHERS.move_to_end(key)
    run(*tensors)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, on_gpu: bool = False) -> None:
    """The argument checks both implementations make, as :class:`KernelError`; ``on_gpu``
    (the CUDA implementations): the tensors must be on a CUDA device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise KernelError(f"flash_attention: {name} must be [B, H, S, D], got {list(t.shape)}")
        if t.dtype not in _DTYPES:
            raise KernelError(f"flash_attention: {name} must be float16 or bfloat16, got {t.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise KernelError(
            f"flash_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})"
        )
    if not q.device == k.device == v.device:
        raise KernelError(f"flash_attention: q, k, v are on {q.device}, {k.device}, {v.device}")
    B, H, _, D = q.shape
    torch._check_with(
        KernelError,
        k.shape[0] == B and v.shape[0] == B,
        lambda: "flash_attention: q, k, v batch sizes differ",
    )
    torch._check_with(
        KernelError,
        k.shape == v.shape,
        lambda: f"flash_attention: k {list(k.shape)} and v {list(v.shape)} differ",
    )
    torch._check_with(
        KernelError,
        k.shape[3] == D,
        lambda: f"flash_attention: k's head dimension {k.shape[3]} is not q's {D}",
    )
    torch._check_with(
        KernelError,
        k.shape[1] >= 1 and H % k.shape[1] == 0,
        lambda: (
            f"flash_attention: {H} query heads are not a multiple of {k.shape[1]} key/value heads"
        ),
    )
    head_bucket(int(D))
    if on_gpu and q.device.type != "cuda":
        raise KernelError(f"flash_attention runs on CUDA tensors only (got {q.device})")


@torch.library.custom_op("cypressc::flash_attention_forward", mutates_args=())
def _forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    # deterministic picks the backward's kernel (it travels to it through the autograd
    # context); the forward's result is the same bits either way
    _check(q, k, v, on_gpu=True)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, M, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, M), dtype=torch.float32, device=q.device)
    _launch("forward", (o, lse, q, k, v), scale, causal)
    return o, lse


@_forward.register_fake
def _forward_fake(q, k, v, causal, scale, deterministic):
    _check(q, k, v)
    B, H, M, _ = q.shape
    return torch.empty_like(q), q.new_empty((B, H, M), dtype=torch.float32)


@torch.library.custom_op("cypressc::flash_attention_backward", mutates_args=())
def _backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    scale: float,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check(q, k, v, on_gpu=True)
    do, q, k, v, o = (t.contiguous() for t in (do, q, k, v, o))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # scratch the preprocess kernel fills (rowsum(dO ∘ O) and the zeroed f32 dQ sums)
    dsum = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    dq_acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    tensors = (dq, dk, dv, dsum, dq_acc, q, k, v, o, do, lse.contiguous())
    _launch("deterministic backward" if deterministic else "backward", tensors, scale, causal)
    return dq, dk, dv


@_backward.register_fake
def _backward_fake(do, q, k, v, o, lse, causal, scale, deterministic):
    _check(q, k, v)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, causal, scale, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.deterministic = causal, scale, deterministic
    ctx.mark_non_differentiable(lse)


def _grad(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _backward(do, q, k, v, o, lse, ctx.causal, ctx.scale, ctx.deterministic)
    return dq, dk, dv, None, None, None


_forward.register_autograd(_grad, setup_context=_setup_context)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    deterministic: bool = False,
) -> torch.Tensor:
    """``softmax(q·kᵀ·scale)·v`` per (batch, head), differentiable in q, k and v.

    ``q``: ``[B, H, M, D]``; ``k``, ``v``: ``[B, HK, N, D]`` with ``H`` a multiple of ``HK``
    (query head ``h`` attends with key/value head ``h // (H // HK)``, as SDPA's
    ``enable_gqa``); float16 or bfloat16, one CUDA device; any ``M``, ``N``; ``D`` ≤ 128.
    ``causal``: the top-left aligned mask of SDPA's ``is_causal`` (query ``i`` sees keys
    ``j ≤ i``).  ``scale`` defaults to ``1 / sqrt(D)``.  ``deterministic``: the backward adds
    each key block's share of dQ in the order of the key blocks (FlashAttention-3's
    deterministic mode; its own mappings, a little slower), so the gradients are the same
    bits on every run; by default the blocks add in whatever order they finish, so dQ's
    last bits may differ from run to run.  Returns O, ``[B, H, M, D]`` in q's
    dtype.  The forward kernel is FlashAttention-3's (programs/flash_attention3.cyp), the
    backward FlashAttention-2/3's algorithm (tests/programs/flash_attention_bwd.cyp): dQ, dK and
    dV, dK and dV summed over the query heads of each key/value head.

    Raises :class:`~cypressc.runtime.KernelError` (a ``ValueError``) for wrong ranks,
    dtypes, shapes or devices (under ``torch.compile`` and on fake tensors too) and for
    tensors not on a CUDA device when run; ``FileNotFoundError`` when the bundled programs
    are not there; the compiler's errors and :class:`~cypressc.tuner.build.BuildError` when
    building a kernel on first use fails."""
    d = q.shape[-1] if q.dim() == 4 else 0
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else 1.0
    o, _ = _forward(q, k, v, bool(causal), float(scale), bool(deterministic))
    return o
