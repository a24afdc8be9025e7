"""Built kernels as PyTorch operators: ``torch.compile`` and CUDA graphs accept them.

:func:`register` turns a :class:`~cypressc.runtime.Kernel` into a ``torch.library`` custom
op with a functional signature: the tensors the kernel only reads are the op's arguments
(in the kernel's parameter order), the tensors it writes are allocated by the op and
returned (one tensor, or a tuple in parameter order); a tensor it reads and writes is
copied first, so the op never mutates its arguments.  Sizes that no argument's shape fixes
are trailing ``int`` arguments, followed by one ``float`` argument per ``float`` parameter of
the kernel (``info.floats``).  For ``programs/gemm.cyp``::

    import cypressc, cypressc.torch
    kern = cypressc.compile("programs/gemm.cyp", "mappings/gemm/h100.yaml", dtype="f16")
    gemm = cypressc.torch.register(kern)       # torch.ops.cypressc.gemm: (A, B) -> C
    C = gemm(A, B)

The op's fake (meta) implementation computes the output shapes and dtypes from the
kernel's shape rules (its ``<name>.json``) and checks the arguments' ranks, dtypes and
shared sizes, so ``torch.compile(fullgraph=True)`` traces a module that calls it without a
graph break and without a GPU.  The CUDA implementation launches on the current stream
(CUDA-graph capturable: it allocates through PyTorch's caching allocator and makes no
synchronizing call).  PyTorch is optional for cypressc: import this module only where it
is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from cypressc.runtime import DTYPES, Kernel, KernelError, KernelInfo, Param

__all__ = ["register", "op_signature"]

_LIBS: dict[str, torch.library.Library] = {}
_REGISTERED: dict[str, str] = {}        # qualified op name -> the kernel identity it runs


def op_signature(info: KernelInfo) -> tuple[list[Param], list[Param], list[str]]:
    """(argument tensors, returned tensors, trailing int sizes) of the op for ``info``."""
    args = [p for p in info.params if p.reads]
    outs = [p for p in info.params if p.writes]
    fixed = {d for p in args for d in p.dims if isinstance(d, str)}
    extra = [s for s in info.sizes if s not in fixed]
    return args, outs, extra


def _schema(name: str, info: KernelInfo) -> str:
    args, outs, extra = op_signature(info)
    params = [f"Tensor {p.name}" for p in args] + [f"SymInt {s}" for s in extra] \
        + [f"float {f}" for f in info.floats]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"{name}({', '.join(params)}) -> {ret}"


def _sizes(info: KernelInfo, tensors: Sequence[Any], ints: Sequence[Any]) -> dict[str, Any]:
    """Sizes from the argument shapes (checking ranks, dtypes and agreement) and the ints."""
    args, _, extra = op_signature(info)
    sizes: dict[str, Any] = dict(zip(extra, ints))
    for p, t in zip(args, tensors):
        want = getattr(torch, DTYPES[p.dtype].torch)
        if t.dtype != want:
            raise KernelError(f"{info.name}: {p.name} must be {want}, got {t.dtype}")
        if t.dim() != len(p.dims):
            raise KernelError(f"{info.name}: {p.name} must have rank {len(p.dims)} ({p.shape_str}), "
                              f"got shape {list(t.shape)}")
        for axis, (d, n) in enumerate(zip(p.dims, t.shape)):
            if isinstance(d, int):
                torch._check(n == d, lambda: f"{info.name}: {p.name}.shape[{axis}] must be {d}")
            elif d in sizes:
                torch._check(n == sizes[d], lambda: f"{info.name}: {p.name}.shape[{axis}] ({d}) disagrees "
                             "with an earlier argument")
            else:
                sizes[d] = n
    return sizes


def _shape(p: Param, sizes: dict[str, Any]) -> list[Any]:
    return [d if isinstance(d, int) else sizes[d] for d in p.dims]


def register(kernel: Kernel | KernelInfo, name: str | None = None, namespace: str = "cypressc"):
    """Register ``kernel`` as the custom op ``torch.ops.<namespace>.<name>`` (default name:
    the kernel's) and return it.

    A :class:`~cypressc.runtime.KernelInfo` alone registers the op with its fake
    implementation only (tracing and shape propagation work; a call on real tensors raises
    ``NotImplementedError``).  Registering the same name again for the same kernel returns
    the existing op; for a different kernel it raises ``ValueError`` (pick another name).
    Calls on tensors that are not on a CUDA device raise :class:`~cypressc.runtime.KernelError`."""
    info = kernel.info if isinstance(kernel, Kernel) else kernel
    name = name or info.name
    qual = f"{namespace}::{name}"
    ident = str(getattr(kernel, "library", "")) + repr(info.to_dict())
    if qual in _REGISTERED:
        if _REGISTERED[qual] != ident:
            raise ValueError(f"torch.ops.{namespace}.{name} is registered for another kernel; "
                             "pass name= to register this one under another name")
        return getattr(getattr(torch.ops, namespace), name)
    lib = _LIBS.get(namespace)
    if lib is None:
        lib = _LIBS[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib.define(_schema(name, info))
    args, outs, extra = op_signature(info)

    def fake(*call: Any):
        tensors, ints = call[:len(args)], call[len(args):len(args) + len(extra)]
        sizes = _sizes(info, tensors, ints)
        dev = tensors[0].device if tensors else None
        res = [torch.empty(_shape(p, sizes), dtype=getattr(torch, DTYPES[p.dtype].torch), device=dev)
               for p in outs]
        return res[0] if len(res) == 1 else tuple(res)

    def cuda(*call: Any):
        if not isinstance(kernel, Kernel):
            raise NotImplementedError(f"{qual} was registered from kernel info only; register the "
                                      "loaded Kernel (cypressc.compile or cypressc.runtime.load) to run it")
        tensors, ints = call[:len(args)], call[len(args):len(args) + len(extra)]
        floats = dict(zip(info.floats, call[len(args) + len(extra):]))
        sizes = _sizes(info, tensors, ints)
        dev = tensors[0].device if tensors else torch.device("cuda")
        by_name = {p.name: t for p, t in zip(args, tensors)}
        launch = []
        for p in info.params:
            if p.writes:
                t = (by_name[p.name].contiguous().clone() if p.reads else
                     torch.empty(_shape(p, sizes), dtype=getattr(torch, DTYPES[p.dtype].torch), device=dev))
                by_name[p.name] = t
            launch.append(by_name[p.name].contiguous())
        kernel(*launch, **{s: int(sizes[s]) for s in extra}, **floats)
        res = [by_name[p.name] for p in outs]
        return res[0] if len(res) == 1 else tuple(res)

    def other(*call: Any):
        raise KernelError(f"{qual} runs on CUDA tensors only (the arguments are on "
                          f"{call[0].device if call else 'no device'})")

    lib.impl(name, cuda, "CUDA")
    lib.impl(name, other, "CPU")
    torch.library.register_fake(qual, fake, lib=lib)
    _REGISTERED[qual] = ident
    return getattr(getattr(torch.ops, namespace), name)
