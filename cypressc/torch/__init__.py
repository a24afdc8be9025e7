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

Both implementations check the arguments alike and raise the same
:class:`~cypressc.runtime.KernelError` (a ``ValueError``) with the same message for a wrong
dtype or rank, tensors on different devices (a meta tensor beside a CPU one, two GPUs) and
sizes that disagree, so what fails under ``torch.compile`` or ``FakeTensorMode`` fails the
same way on the GPU.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from cypressc.abi.errors import brief
from cypressc.runtime import DTYPES, Kernel, KernelError, KernelInfo, Param

__all__ = ["register", "op_signature", "flash_attention"]

_LIBS: dict[str, torch.library.Library] = {}
_REGISTERED: dict[str, str] = {}  # qualified op name -> the kernel identity it runs

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # what torch's schema parser takes as a name
# PyTorch's own op namespaces and its companion libraries': an op defined there would sit
# among theirs (torch.library accepts "aten"); every "_"-prefixed namespace is refused too
RESERVED_NAMESPACES = frozenset(
    {
        "aten",
        "prim",
        "prims",
        "c10d",
        "debug_mode_ops",
        "debugprims",
        "export",
        "higher_order",
        "inductor",
        "inductor_prims",
        "mkl",
        "mkldnn",
        "mkldnn_prepacked",
        "onednn",
        "onnx",
        "profiler",
        "quantization",
        "quantized",
        "rngprims",
        "sparse",
        "static_runtime",
        "symm_mem",
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "fbgemm",
        "triton",
    }
)
# attributes of torch.ops.<namespace> that getattr would return instead of an op ("name")
_NAMESPACE_ATTRS = frozenset(dir(torch._ops._OpNamespace)) | frozenset(
    vars(torch._ops._OpNamespace("_probe"))
)


def _check_names(name: Any, namespace: Any) -> None:
    """``TypeError`` for a name or namespace that is not a string, ``ValueError`` for one that
    torch's schema parser or ``torch.ops`` would trip over, or a reserved namespace."""
    for what, v in (("name", name), ("namespace", namespace)):
        if not isinstance(v, str):
            raise TypeError(f"register: {what} must be a str, got {type(v).__name__} {brief(v)}")
        if not _NAME.match(v):
            raise ValueError(
                f"register: {what} {brief(v)} is not an identifier (letters, digits and "
                "_, not starting with a digit): torch.ops.<namespace>.<name> must spell it"
            )
        if keyword.iskeyword(v):
            raise ValueError(
                f"register: {what} {v!r} is a keyword, which torch's schema parser refuses"
            )
    taken = vars(torch.ops).get(namespace)  # loaded_libraries, higher_order: not op namespaces
    if (
        namespace in RESERVED_NAMESPACES
        or namespace.startswith("_")
        or hasattr(type(torch.ops), namespace)
        or (taken is not None and not isinstance(taken, torch._ops._OpNamespace))
    ):
        raise ValueError(
            f"register: namespace {namespace!r} is reserved by PyTorch; use your own "
            "(the default is 'cypressc')"
        )
    if name.startswith("__") or name in _NAMESPACE_ATTRS:
        raise ValueError(
            f"register: name {name!r} is taken by torch.ops.{namespace} itself; pick another"
        )


def op_signature(info: KernelInfo) -> tuple[list[Param], list[Param], list[str]]:
    """(argument tensors, returned tensors, trailing int sizes) of the op for ``info``."""
    args = [p for p in info.params if p.reads]
    outs = [p for p in info.params if p.writes]
    fixed = {d for p in args for d in p.dims if isinstance(d, str)}
    extra = [s for s in info.sizes if s not in fixed]
    return args, outs, extra


def _schema(name: str, info: KernelInfo) -> str:
    args, outs, extra = op_signature(info)
    params = (
        [f"Tensor {p.name}" for p in args]
        + [f"SymInt {s}" for s in extra]
        + [f"float {f}" for f in info.floats]
    )
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"{name}({', '.join(params)}) -> {ret}"


def _check(cond: Any, message: Callable[[], str]) -> None:
    """``torch._check`` raising :class:`KernelError`: on a symbolic size (``torch.compile``
    with dynamic shapes) a guard, on a concrete one a test."""
    torch._check_with(KernelError, cond, message)


def _sizes(info: KernelInfo, tensors: Sequence[Any], ints: Sequence[Any]) -> dict[str, Any]:
    """Sizes from the argument shapes and the ints, checking the arguments: dtypes, ranks, one
    device, fixed dimensions, agreement of shared sizes, non-negative ints.  The fake and the
    CUDA implementation both call it, so both raise the same :class:`KernelError`."""
    args, _, extra = op_signature(info)
    sizes: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for s, v in zip(extra, ints):
        _check(v >= 0, lambda: f"{info.name}: size {s} must be non-negative, got {v}")
        sizes[s], origin[s] = v, f"the argument {s}"
    first: tuple[Param, Any] | None = None
    for p, t in zip(args, tensors):
        want = getattr(torch, DTYPES[p.dtype].torch)
        if t.dtype != want:
            raise KernelError(f"{info.name}: {p.name} must be {want}, got {t.dtype}")
        if t.dim() != len(p.dims):
            raise KernelError(
                f"{info.name}: {p.name} must have rank {len(p.dims)} ({p.shape_str}), "
                f"got shape {list(t.shape)}"
            )
        if first is None:
            first = (p, t.device)
        elif t.device != first[1]:
            raise KernelError(
                f"{info.name}: {p.name} is on {t.device} but {first[0].name} is on "
                f"{first[1]}; all tensors must be on one device"
            )
        for axis, (d, n) in enumerate(zip(p.dims, t.shape)):
            if isinstance(d, int):
                _check(n == d, lambda: f"{info.name}: {p.name}.shape[{axis}] must be {d}, got {n}")
            elif d in sizes:
                _check(
                    n == sizes[d],
                    lambda: (
                        f"{info.name}: {p.name}.shape[{axis}] ({d}) is {n}, but "
                        f"{d} = {sizes[d]} from {origin[d]}"
                    ),
                )
            else:
                sizes[d], origin[d] = n, f"{p.name}.shape[{axis}]"
    return sizes


def _shape(p: Param, sizes: dict[str, Any]) -> list[Any]:
    return [d if isinstance(d, int) else sizes[d] for d in p.dims]


def _implementations(kernel: Kernel | KernelInfo, info: KernelInfo, qual: str):
    """The op's (fake, CUDA, CPU) implementations.  The first two check the arguments with
    the same :func:`_sizes`, so they refuse a call with the same :class:`KernelError`."""
    args, outs, extra = op_signature(info)

    def fake(*call: Any):
        tensors, ints = call[: len(args)], call[len(args) : len(args) + len(extra)]
        sizes = _sizes(info, tensors, ints)
        dev = tensors[0].device if tensors else None
        res = [
            torch.empty(_shape(p, sizes), dtype=getattr(torch, DTYPES[p.dtype].torch), device=dev)
            for p in outs
        ]
        return res[0] if len(res) == 1 else tuple(res)

    def cuda(*call: Any):
        if not isinstance(kernel, Kernel):
            raise NotImplementedError(
                f"{qual} was registered from kernel info only; register the "
                "loaded Kernel (cypressc.compile or cypressc.runtime.load) to run it"
            )
        tensors, ints = call[: len(args)], call[len(args) : len(args) + len(extra)]
        floats = dict(zip(info.floats, call[len(args) + len(extra) :]))
        sizes = _sizes(info, tensors, ints)
        dev = tensors[0].device if tensors else torch.device("cuda")
        by_name = {p.name: t for p, t in zip(args, tensors)}
        launch = []
        for p in info.params:
            if p.writes:
                t = (
                    by_name[p.name].contiguous().clone()
                    if p.reads
                    else torch.empty(
                        _shape(p, sizes), dtype=getattr(torch, DTYPES[p.dtype].torch), device=dev
                    )
                )
                by_name[p.name] = t
            launch.append(by_name[p.name].contiguous())
        kernel(*launch, **{s: int(sizes[s]) for s in extra}, **floats)
        res = [by_name[p.name] for p in outs]
        return res[0] if len(res) == 1 else tuple(res)

    def other(*call: Any):
        raise KernelError(
            f"{qual} runs on CUDA tensors only (the arguments are on "
            f"{call[0].device if call else 'no device'})"
        )

    return fake, cuda, other


def register(kernel: Kernel | KernelInfo, name: str | None = None, namespace: str = "cypressc"):
    """Register ``kernel`` as the custom op ``torch.ops.<namespace>.<name>`` (default name:
    the kernel's) and return it.

    A :class:`~cypressc.runtime.KernelInfo` alone registers the op with its fake
    implementation only (tracing and shape propagation work; a call on real tensors raises
    ``NotImplementedError``).  Registering the same name again for the same kernel returns
    the existing op.  Raises, before anything is registered:

    * ``TypeError`` when ``kernel`` is not a :class:`~cypressc.runtime.Kernel` or
      :class:`~cypressc.runtime.KernelInfo` (a program's name or path is not one: pass
      ``cypressc.compile(...)`` or ``cypressc.runtime.load(DIR)``), or ``name`` or
      ``namespace`` is not a string;
    * ``ValueError`` when ``name`` or ``namespace`` is not an identifier or is a keyword
      (``"a-b"``, ``"a.b"``, ``"def"``), the namespace is PyTorch's (:data:`RESERVED_NAMESPACES`,
      any starting with ``_``), the name is an attribute of ``torch.ops.<namespace>`` itself
      (``"name"``), or the op exists already for a different kernel (pick another name) or
      from another library.

    Calls on tensors that are not on a CUDA device raise :class:`~cypressc.runtime.KernelError`;
    so do, on every device and in the fake implementation alike, arguments of the wrong
    dtype or rank, on different devices, or whose sizes disagree."""
    if isinstance(kernel, Kernel):
        info = kernel.info
    elif isinstance(kernel, KernelInfo):
        info = kernel
    else:
        hint = (
            ": a kernel's name or path is not one; pass cypressc.compile(PROGRAM, MAPPING) or "
            "cypressc.runtime.load(BUILD_DIR)"
            if isinstance(kernel, (str, bytes)) or hasattr(kernel, "__fspath__")
            else ""
        )
        raise TypeError(
            f"register takes a cypressc.runtime.Kernel or KernelInfo, got "
            f"{type(kernel).__name__} {brief(kernel)}{hint}"
        )
    name = info.name if name is None else name
    _check_names(name, namespace)
    qual = f"{namespace}::{name}"
    ident = str(getattr(kernel, "library", "")) + repr(info.to_dict())
    if qual in _REGISTERED:
        if _REGISTERED[qual] != ident:
            raise ValueError(
                f"torch.ops.{namespace}.{name} is registered for another kernel; "
                "pass name= to register this one under another name"
            )
        return getattr(getattr(torch.ops, namespace), name)
    lib = _LIBS.get(namespace)
    if lib is None:
        lib = _LIBS[namespace] = torch.library.Library(namespace, "FRAGMENT")
    try:
        lib.define(_schema(name, info))
    except RuntimeError as e:  # defined already, by another library in this process
        raise ValueError(
            f"cannot define torch.ops.{namespace}.{name}: {str(e).splitlines()[0]}"
        ) from None
    fake, cuda, other = _implementations(kernel, info, qual)
    lib.impl(name, cuda, "CUDA")
    lib.impl(name, other, "CPU")
    torch.library.register_fake(qual, fake, lib=lib)
    _REGISTERED[qual] = ident
    return getattr(getattr(torch.ops, namespace), name)


# the trainable attention op: its module defines the custom ops when imported
from cypressc.torch.attention import flash_attention  # noqa: E402
