"""Checking a call's tensors against the kernel info and inferring the launcher's sizes from
their shapes, in plain Python: each tensor is first described (:class:`TensorDesc`), so no
PyTorch is needed here.  A call's keyword arguments are sizes and the values of the kernel's
``float`` parameters (:func:`split_keywords`)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .dtypes import DTYPES
from .errors import KernelError
from .info import KernelInfo

__all__ = [
    "TensorDesc",
    "arg_label",
    "infer_sizes",
    "split_keywords",
    "validate",
    "resolve_aliases",
]


@dataclass(frozen=True, slots=True)
class TensorDesc:
    """What the checks need to know of one tensor argument (see :func:`cypressc.runtime.describe`).

    ``dtype`` is cypressc's name (``None`` if the tensor's type has none), ``dtype_str``
    what to print; ``device`` is ``(type, index)`` like ``("cuda", 0)``."""

    dtype: str | None
    dtype_str: str
    shape: tuple[int, ...]
    device: tuple[str, int | None]
    contiguous: bool
    ptr: int
    numel: int


def arg_label(info: KernelInfo, i: int) -> str:
    """``<kernel>: argument <i> (<name>, <dtype>[<dims>])``: how messages name argument ``i``."""
    p = info.params[i]
    return f"{info.name}: argument {i} ({p.name!r}, {p.shape_str})"


def split_keywords(
    info: KernelInfo, kwargs: Mapping[str, Any], *, require_floats: bool = True
) -> tuple[dict[str, Any], dict[str, float]]:
    """Split a call's keyword arguments into sizes (checked later by :func:`infer_sizes`) and
    the values of ``info.floats``, returned in ``info.floats`` order as Python floats.

    A float parameter's value is any real number but a bool (an int, a float, a NumPy
    scalar); NaN and infinities are passed on as they are.  Raises :class:`KernelError` for
    a value that is not a number and, with ``require_floats``, for a float parameter
    missing from ``kwargs``; without it (:meth:`Kernel.sizes_of`) missing ones are left out."""
    sizes = {k: v for k, v in kwargs.items() if k not in info.floats}
    floats: dict[str, float] = {}
    for f in info.floats:
        if f not in kwargs:
            if require_floats:
                raise KernelError(
                    f"{info.name}: missing the float parameter {f}; pass {f}=... (a number)"
                )
            continue
        v = kwargs[f]
        try:
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError
            floats[f] = float(v)
        except (TypeError, OverflowError):
            raise KernelError(
                f"{info.name}: float parameter {f} must be a number (int or float), "
                f"got {type(v).__name__} {repr(v)[:60]}"
            ) from None
    return sizes, floats


def resolve_aliases(given: Mapping[str, Any], aliases: Mapping[str, str]) -> dict[str, Any]:
    """``given`` (sizes by name) with each alias (``C_d0``, another name of size ``M``:
    :attr:`KernelInfo.aliases`) replaced by its size; other names are kept as they are.
    Raises ``ValueError`` when two names of one size are given different values."""
    out: dict[str, Any] = {}
    said: dict[str, str] = {}
    for k, v in given.items():
        s = aliases.get(k, k)
        if s in out and out[s] != v:
            raise ValueError(
                f"{said[s]}={out[s]} and {k}={v} name one size, {s}: give it one value"
            )
        out.setdefault(s, v)
        said.setdefault(s, k)
    return out


def infer_sizes(
    info: KernelInfo, shapes: Sequence[Sequence[int]], given: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Infer the launcher's sizes from the tensors' shapes (``shapes[i]`` for
    ``info.params[i]``), in ``info.sizes`` order.

    Every dimension named by the same size must agree; fixed (int) dims must match
    exactly; a size no shape determines must be in ``given``.  Raises :class:`KernelError`
    naming the parameter, the dimension and where the conflicting value came from."""
    if len(shapes) != len(info.params):
        raise KernelError(
            f"{info.name}: expected {len(info.params)} tensors "
            f"({', '.join(p.name for p in info.params)}), got {len(shapes)}"
        )
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    try:
        given = resolve_aliases(given or {}, info.aliases)
    except ValueError as e:
        raise KernelError(f"{info.name}: {e}") from None
    for k, v in given.items():
        if k not in info.sizes:
            raise KernelError(
                f"{info.name}: unknown size {k!r} (sizes: {', '.join(info.sizes)}"
                + (f"; also named {', '.join(info.aliases)}" if info.aliases else "")
                + ")"
            )
        if isinstance(v, bool) or not isinstance(v, int):
            raise KernelError(f"{info.name}: size {k} must be an int, got {v!r}")
        sizes[k], origin[k] = v, "the keyword argument"
    for i, (p, shape) in enumerate(zip(info.params, shapes)):
        shape = tuple(int(x) for x in shape)
        if len(shape) != len(p.dims):
            raise KernelError(
                f"{arg_label(info, i)}: expected a rank-{len(p.dims)} tensor, got shape "
                f"{list(shape)} (rank {len(shape)})"
            )
        for axis, (d, extent) in enumerate(zip(p.dims, shape)):
            if isinstance(d, int):
                if extent != d:
                    raise KernelError(
                        f"{arg_label(info, i)}: dimension {axis} must be {d}, got {extent}"
                    )
            elif d in sizes:
                if sizes[d] != extent:
                    raise KernelError(
                        f"{arg_label(info, i)}: dimension {axis} ({d}) is {extent}, but "
                        f"{d} = {sizes[d]} from {origin[d]}"
                    )
            else:
                sizes[d], origin[d] = extent, f"{p.name}.shape[{axis}]"
    missing = [s for s in info.sizes if s not in sizes]
    if missing:
        raise KernelError(
            f"{info.name}: size(s) {', '.join(missing)} appear in no tensor's shape; "
            f"pass them as keyword arguments ({missing[0]}=...)"
        )
    return {s: sizes[s] for s in info.sizes}


def validate(
    info: KernelInfo,
    descs: Sequence[TensorDesc],
    given: Mapping[str, int] | None = None,
    *,
    check_requires: bool = True,
    align: int = 16,
) -> dict[str, int]:
    """Check the described tensors against ``info`` and return the inferred sizes.

    Checks, in order: the number of tensors; every dtype; the shapes (ranks, fixed dims,
    agreement of shared sizes: :func:`infer_sizes`); that every tensor is on one CUDA
    device; contiguous (row-major) and ``align``-byte aligned data (TMA needs 16); then, if
    ``check_requires``, the kernel's ``requires`` conditions.  Raises :class:`KernelError`
    naming the first offending argument."""
    if len(descs) != len(info.params):
        raise KernelError(
            f"{info.name}: expected {len(info.params)} tensors "
            f"({', '.join(p.name for p in info.params)}), got {len(descs)}"
        )
    for i, (p, t) in enumerate(zip(info.params, descs)):
        if t.dtype != p.dtype:
            want = DTYPES[p.dtype].torch
            raise KernelError(
                f"{arg_label(info, i)}: expected dtype {want} ({p.dtype}), got {t.dtype_str}"
            )
    sizes = infer_sizes(info, [t.shape for t in descs], given)
    device = None
    for i, t in enumerate(descs):
        if t.device[0] != "cuda":
            raise KernelError(
                f"{arg_label(info, i)}: is on {t.device[0]}; the kernel needs CUDA tensors "
                "(move it with .cuda())"
            )
        if device is None:
            device = (t.device, i)
        elif t.device != device[0]:
            raise KernelError(
                f"{arg_label(info, i)}: is on cuda:{t.device[1]} but argument {device[1]} "
                f"({info.params[device[1]].name!r}) is on cuda:{device[0][1]}; all "
                "tensors must be on one device"
            )
    for i, t in enumerate(descs):
        if not t.contiguous:
            raise KernelError(
                f"{arg_label(info, i)}: is not contiguous (row-major); pass .contiguous()"
            )
        if t.numel and align and t.ptr % align:
            raise KernelError(
                f"{arg_label(info, i)}: data pointer 0x{t.ptr:x} is not {align}-byte "
                "aligned (TMA needs it; a sliced view can cause this: pass a copy)"
            )
    if check_requires:
        failed = info.failed_requires(sizes)
        if failed:
            at = ", ".join(f"{k}={v}" for k, v in sizes.items())
            raise KernelError(
                f"{info.name}: the kernel does not support these sizes ({at}): " + "; ".join(failed)
            )
    return sizes
