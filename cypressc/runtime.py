"""Call kernels built by ``cypressc build`` from Python: ctypes + PyTorch CUDA tensors.

``cypressc build PROGRAM -m MAPPING -o OUTDIR`` followed by ``make -C OUTDIR`` leaves
``OUTDIR/<name>.json`` (the kernel's ABI, see :class:`KernelInfo`) and
``OUTDIR/lib<name>.so`` (the ``extern "C"`` launcher).  :func:`load` reads both::

    import torch
    from cypressc import runtime

    gemm = runtime.load("build/gemm")          # KernelInfo from gemm.json, libgemm.so via ctypes
    A = torch.randn(M, K, dtype=torch.float16, device="cuda")
    B = torch.randn(K, N, dtype=torch.float16, device="cuda")
    C = torch.empty(M, N, dtype=torch.float16, device="cuda")
    gemm(C, A, B)                               # tensors in the order of gemm.json's "params"

The call checks every tensor (dtype, rank, device, contiguity, 16-byte alignment), infers
the run-time sizes from the shapes (every dimension that shares a size name must agree),
checks the kernel's ``requires`` conditions, and launches on the current CUDA stream of the
tensors' device.  A kernel with ``float`` entry parameters (``"floats"`` in its info, e.g. an
attention's ``scale: float``) takes each by keyword: ``attn(O, Q, K, V, scale=0.125)``.
Argument problems raise :class:`KernelError` (a ``ValueError``) naming the parameter; a
non-zero return from the launcher raises :class:`LaunchError` with the CUDA error name.
Nothing is written to any tensor when an error is raised before the launch.

PyTorch is optional for the package: it is imported the first time a kernel is called,
and everything else (the info schema, size inference, the evaluator of the expression trees
the compiler wrote for ``requires`` and ``flops``) is plain Python that the harness writer,
the tuner and tests use too.  It lives in :mod:`cypressc.abi` and is re-exported here, this
module's own part being the ctypes launcher and the PyTorch side (:class:`Kernel`,
:func:`load`, :func:`describe`).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# relative: a copy of this file next to a copy of cypressc/abi loads on its own (cypressc.abi)
from .abi.args import TensorDesc, arg_label, infer_sizes, split_keywords, validate
from .abi.dtypes import DTYPES, DType
from .abi.errors import KernelError, LaunchError, cuda_error_name
from .abi.exprs import eval_expr, expr_names
from .abi.info import KernelInfo, Param, Requirement

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

__all__ = [
    "DTYPES",
    "DType",
    "Param",
    "KernelInfo",
    "KernelError",
    "LaunchError",
    "TensorDesc",
    "Kernel",
    "load",
    "infer_sizes",
    "split_keywords",
    "validate",
    "eval_expr",
    "expr_names",
    "Requirement",
    "cuda_error_name",
]

# --------------------------------------------------------------------------------------------
# PyTorch side
# --------------------------------------------------------------------------------------------


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "cypressc.runtime needs PyTorch (a CUDA build) to call kernels on "
            "tensors: pip install torch"
        ) from e
    return torch


def describe(t: Any) -> TensorDesc:
    """A :class:`TensorDesc` of a ``torch.Tensor`` (raises :class:`KernelError` otherwise)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise KernelError(f"expected a torch.Tensor, got {type(t).__name__}")
    by_torch = {getattr(torch, d.torch): d.name for d in DTYPES.values()}
    return TensorDesc(
        dtype=by_torch.get(t.dtype),
        dtype_str=str(t.dtype).removeprefix("torch."),
        shape=tuple(t.shape),
        device=(t.device.type, t.device.index),
        contiguous=t.is_contiguous(),
        ptr=t.data_ptr(),
        numel=t.numel(),
    )


class Kernel:
    """A built kernel, callable on PyTorch CUDA tensors.  Make one with :func:`load`.

    ``kernel(*tensors, stream=None, **keywords)`` takes one tensor per entry of
    ``kernel.info.params``, in that order (written tensors are outputs and are
    overwritten), checks them (:func:`validate`), and launches on ``stream`` (a
    ``torch.cuda.Stream``, a raw ``cudaStream_t`` int, or ``None`` for the current stream
    of the tensors' device).  The keywords are the value of every ``float`` parameter
    (``kernel.info.floats``, required, a number: ``scale=0.125``) and the sizes that no
    tensor's shape fixes (:func:`split_keywords`).
    Returns ``None``; raises :class:`KernelError` before launching, :class:`LaunchError`
    when the launcher returns an error.  The launch is asynchronous like any CUDA launch."""

    def __init__(self, info: KernelInfo, library: str | Path) -> None:
        self.info = info
        self.library = Path(library)
        try:
            self._lib = ctypes.CDLL(str(self.library))
        except OSError as e:
            raise OSError(f"cannot load {self.library}: {e}") from e
        try:
            fn = getattr(self._lib, f"{info.name}_launch")
        except AttributeError:
            raise OSError(
                f"{self.library} has no symbol {info.name}_launch; was it built from "
                f"{info.name}.cu by the generated Makefile?"
            ) from None
        fn.argtypes = (
            [ctypes.c_void_p] * len(info.params)
            + [ctypes.c_int64] * len(info.sizes)
            + [ctypes.c_float] * len(info.floats)
            + [ctypes.c_void_p]
        )
        fn.restype = ctypes.c_int
        self._fn = fn

    @property
    def name(self) -> str:
        return self.info.name

    def __repr__(self) -> str:
        args = ", ".join(
            [f"{p.name}: {p.shape_str}" for p in self.info.params]
            + [f"{f}: float" for f in self.info.floats]
        )
        return f"<cypressc kernel {self.name}({args}) from {self.library}>"

    def _prepare(
        self,
        tensors: Sequence[Any],
        stream: Any,
        keywords: Mapping[str, Any],
        check_requires: bool,
        require_floats: bool = True,
    ) -> tuple[list[int], dict[str, int], dict[str, float], int]:
        """Check a call: (data pointers, inferred sizes, float values, stream handle)."""
        sizes, floats = split_keywords(self.info, keywords, require_floats=require_floats)
        torch = _torch()
        descs = []
        for i, t in enumerate(tensors):
            try:
                descs.append(describe(t))
            except KernelError as e:
                if i < len(self.info.params):
                    raise KernelError(f"{arg_label(self.info, i)}: {e}") from None
                raise
        got = validate(self.info, descs, sizes, check_requires=check_requires)
        dev = descs[0].device[1] if descs else None
        if dev is None:
            dev = torch.cuda.current_device()
        return [d.ptr for d in descs], got, floats, self._stream_handle(stream, dev)

    def _stream_handle(self, stream: Any, dev: int) -> int:
        """The ``cudaStream_t`` of ``stream`` (None: device ``dev``'s current stream; an int:
        itself); :class:`KernelError` for a stream on another device."""
        if stream is None:
            return _torch().cuda.current_stream(dev).cuda_stream
        if isinstance(stream, int):
            return stream
        sdev = getattr(stream, "device", None)
        if sdev is not None and getattr(sdev, "index", dev) not in (None, dev):
            raise KernelError(f"{self.name}: stream is on {sdev} but the tensors are on cuda:{dev}")
        return stream.cuda_stream

    def _raise(self, rc: int, sizes: Mapping[str, int]) -> None:
        cname = cuda_error_name(rc)
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())
        msg = f"{self.name}_launch({at}) returned {rc} ({cname})"
        if rc == 1:
            failed = self.info.failed_requires(sizes)
            msg += ": the launcher refused its arguments" + (
                f" ({'; '.join(failed)})"
                if failed
                else " although every `requires` condition of the kernel info holds: the launcher "
                "checks something the info does not list (sizes within int32? an empty tensor?)"
            )
        raise LaunchError(msg, rc, cname, self.name, sizes)

    def launch(
        self, *tensors: Any, stream: Any = None, check_requires: bool = True, **keywords: Any
    ) -> int:
        """Check and launch like ``__call__`` but return the launcher's ``cudaError_t``
        instead of raising on a non-zero one.  With ``check_requires=False`` the
        ``requires`` conditions are left to the launcher (used to test its refusals)."""
        ptrs, got, floats, handle = self._prepare(tensors, stream, keywords, check_requires)
        with _torch().cuda.device(self._device_of(tensors)):
            return int(self._fn(*ptrs, *got.values(), *floats.values(), handle))

    @staticmethod
    def _device_of(tensors: Sequence[Any]) -> int:
        for t in tensors:
            if t.device.index is not None:
                return t.device.index
        return _torch().cuda.current_device()

    def __call__(self, *tensors: Any, stream: Any = None, **keywords: Any) -> None:
        ptrs, got, floats, handle = self._prepare(tensors, stream, keywords, True)
        with _torch().cuda.device(self._device_of(tensors)):
            rc = int(self._fn(*ptrs, *got.values(), *floats.values(), handle))
        if rc:
            self._raise(rc, got)

    def bind(self, *tensors: Any, stream: Any = None, **keywords: Any) -> Callable[[], None]:
        """Check the arguments once and return a no-argument function that launches on
        them (for timing loops: no per-call checks).  The returned function raises
        :class:`LaunchError` on a non-zero return.  Keep the tensors alive while using it."""
        ptrs, got, floats, handle = self._prepare(tensors, stream, keywords, True)
        args = (*ptrs, *got.values(), *floats.values(), handle)
        fn, raise_ = self._fn, self._raise

        def run() -> None:
            rc = fn(*args)
            if rc:
                raise_(rc, got)

        run.sizes = got  # type: ignore[attr-defined]
        return run

    def launcher(self, *tensors: Any, **keywords: Any) -> Callable[..., None]:
        """Check the arguments once, as ``__call__`` does (without launching), and return
        ``run(*tensors, stream=None)``: it launches on other tensors of the same dtypes,
        shapes and device (fresh outputs each call, as an op allocates them) with the same
        keywords, checking only that signature, contiguity and 16-byte alignment (a few
        microseconds instead of the full checks), on ``stream`` or the device's current
        stream at each call (CUDA-graph capturable).  ``run`` raises :class:`KernelError` for
        tensors that differ from the first ones in any of those, :class:`LaunchError` as
        ``__call__`` does."""
        _, got, floats, _ = self._prepare(tensors, 0, keywords, True)
        sig = [(t.dtype, tuple(t.shape), t.device) for t in tensors]
        dev = self._device_of(tensors)
        tail = (*got.values(), *floats.values())
        fn, raise_, torch = self._fn, self._raise, _torch()

        def run(*ts: Any, stream: Any = None) -> None:
            if len(ts) != len(sig):
                raise KernelError(f"{self.name}: expected {len(sig)} tensors, got {len(ts)}")
            ptrs = []
            for i, (t, s) in enumerate(zip(ts, sig)):
                if (t.dtype, tuple(t.shape), t.device) != s:
                    raise KernelError(
                        f"{arg_label(self.info, i)}: {t.dtype} {list(t.shape)} on {t.device}, but "
                        f"this launcher was checked for {s[0]} {list(s[1])} on {s[2]}"
                    )
                ptr = t.data_ptr()
                if ptr % 16 or not t.is_contiguous():
                    raise KernelError(
                        f"{arg_label(self.info, i)}: must be contiguous and 16-byte aligned"
                    )
                ptrs.append(ptr)
            handle = self._stream_handle(stream, dev)
            if torch.cuda.current_device() == dev:
                rc = fn(*ptrs, *tail, handle)
            else:
                with torch.cuda.device(dev):
                    rc = fn(*ptrs, *tail, handle)
            if rc:
                raise_(rc, got)

        run.sizes = got  # type: ignore[attr-defined]
        return run

    def sizes_of(self, *tensors: Any, **keywords: Any) -> dict[str, int]:
        """The sizes the kernel would infer from these tensors (all checks except requires;
        float parameters may be passed, and are checked, but need not be)."""
        return self._prepare(tensors, 0, keywords, False, require_floats=False)[1]

    def flops(self, sizes: Mapping[str, int]) -> float:
        """Floating-point operations of one launch at ``sizes`` (the info's ``flops``).
        Raises :class:`KernelError` for a size the expression reads that is missing or not an
        int (:meth:`KernelInfo.flops_at`)."""
        return self.info.flops_at(sizes)


def load(outdir: str | Path, name: str | None = None) -> Kernel:
    """Load the kernel built in ``outdir``: ``<name>.json`` and ``lib<name>.so``.

    ``name`` may be omitted when ``outdir`` holds exactly one ``<name>.json`` with a
    ``lib<name>.so`` (or one ``.json`` at all).  The info is read and validated in full
    (:meth:`KernelInfo.load_json`) before the library is looked for.  Raises:

    * ``TypeError`` when ``outdir`` is not a path (``str`` or ``os.PathLike``) or ``name`` is
      neither ``None`` nor a string;
    * ``FileNotFoundError``, with what to run, when ``<name>.json`` or ``lib<name>.so`` is
      missing; ``OSError`` when a file cannot be read or the library cannot be loaded;
    * ``ValueError`` naming the file and the bad field for a malformed info file (whatever
      it holds), for a ``name`` that is not a C identifier or differs from the info's own
      ``"name"``, and when ``name`` is omitted and ``outdir`` holds several kernels."""
    if isinstance(outdir, bool) or not isinstance(outdir, (str, os.PathLike)):
        raise TypeError(
            f"load: outdir must be a path (str or os.PathLike) of a `cypressc build` "
            f"output directory, got {type(outdir).__name__}"
        )
    if name is not None and not isinstance(name, str):
        raise TypeError(
            f"load: name must be a kernel name (str) or None, got {type(name).__name__}"
        )
    outdir = Path(outdir)
    if name is None:
        cands = sorted(p.stem for p in outdir.glob("*.json"))
        if not cands:
            raise FileNotFoundError(
                f"no <name>.json in {outdir}; run `cypressc build PROGRAM -m "
                f"MAPPING -o {outdir}` first"
            )
        built = [c for c in cands if (outdir / f"lib{c}.so").exists()]
        pick = built if len(built) == 1 else cands
        if len(pick) != 1:
            raise ValueError(f"{outdir} holds several kernels ({', '.join(cands)}); pass name=")
        name = pick[0]
    if not _IDENT.match(name):
        raise ValueError(f"load: name {name!r} is not a kernel name (a C identifier)")
    info_path = outdir / f"{name}.json"
    if not info_path.exists():
        raise FileNotFoundError(f"{info_path} not found; run `cypressc build` into {outdir}")
    info = KernelInfo.load_json(info_path)
    if info.name != name:
        raise ValueError(
            f"{info_path}: the kernel info names the kernel {info.name!r}, not {name!r}; "
            "a build writes <name>.json with its own name: rebuild, or load that name"
        )
    lib = outdir / f"lib{info.name}.so"
    if not lib.exists():
        raise FileNotFoundError(f"{lib} not found; run `make -C {outdir}` (needs nvcc)")
    return Kernel(info, lib)
