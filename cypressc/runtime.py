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
tensors' device.  Argument problems raise :class:`KernelError` (a ``ValueError``) naming the
parameter; a non-zero return from the launcher raises :class:`LaunchError` with the CUDA
error name.  Nothing is written to any tensor when an error is raised before the launch.

PyTorch is optional for the package: it is imported the first time a kernel is called,
and everything else here (the info schema, size inference, the evaluator of the expression
trees the compiler wrote for ``requires`` and ``flops``) is plain Python that the harness
writer, the tuner and tests use too.
"""

from __future__ import annotations

import ctypes
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DTYPES", "DType", "Param", "KernelInfo", "KernelError", "LaunchError", "TensorDesc",
    "Kernel", "load", "infer_sizes", "validate", "eval_expr", "expr_names", "Requirement",
    "cuda_error_name",
]

# --------------------------------------------------------------------------------------------
# Element types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DType:
    """One element type of a kernel parameter (tensors are row-major and contiguous)."""

    name: str        # cypressc's name: f16, bf16, f32, i32
    itemsize: int    # bytes per element
    ctype: str       # the CUDA C++ type
    npy: str         # the NumPy descr the harness's --dump writes (bf16: raw bits, '<u2')
    torch: str       # the attribute of the torch module (torch.float16, ...)
    floating: bool


DTYPES: dict[str, DType] = {
    "f16": DType("f16", 2, "__half", "<f2", "float16", True),
    "bf16": DType("bf16", 2, "__nv_bfloat16", "<u2", "bfloat16", True),
    "f32": DType("f32", 4, "float", "<f4", "float32", True),
    "i32": DType("i32", 4, "int32_t", "<i4", "int32", False),
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class KernelError(ValueError):
    """A kernel was called with arguments it cannot take (wrong dtype, rank, device,
    layout, inconsistent sizes, a failed ``requires`` condition).  Raised before launching:
    no tensor has been written."""


class LaunchError(RuntimeError):
    """The launcher returned a non-zero ``cudaError_t``.

    Attributes: ``code`` (the integer), ``cuda_name`` (e.g. ``"cudaErrorInvalidValue"``),
    ``kernel`` (the kernel's name) and ``sizes`` (the inferred sizes)."""

    def __init__(self, message: str, code: int, cuda_name: str, kernel: str,
                 sizes: Mapping[str, int]) -> None:
        super().__init__(message)
        self.code, self.cuda_name, self.kernel, self.sizes = code, cuda_name, kernel, dict(sizes)


# cudaError_t values (CUDA 13 driver_types.h) that a launcher can plausibly return.
_CUDA_ERRORS = {
    0: "cudaSuccess", 1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError", 4: "cudaErrorCudartUnloading",
    9: "cudaErrorInvalidConfiguration", 17: "cudaErrorInvalidDevicePointer",
    34: "cudaErrorStubLibrary", 35: "cudaErrorInsufficientDriver",
    36: "cudaErrorCallRequiresNewerDriver", 46: "cudaErrorDevicesUnavailable",
    52: "cudaErrorMissingConfiguration", 53: "cudaErrorPriorLaunchFailure",
    98: "cudaErrorInvalidDeviceFunction", 100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice",
    200: "cudaErrorInvalidKernelImage", 201: "cudaErrorDeviceUninitialized",
    209: "cudaErrorNoKernelImageForDevice", 218: "cudaErrorInvalidPtx",
    222: "cudaErrorUnsupportedPtxVersion", 400: "cudaErrorInvalidResourceHandle",
    401: "cudaErrorIllegalState", 500: "cudaErrorSymbolNotFound", 600: "cudaErrorNotReady",
    700: "cudaErrorIllegalAddress", 701: "cudaErrorLaunchOutOfResources",
    702: "cudaErrorLaunchTimeout", 709: "cudaErrorContextIsDestroyed", 710: "cudaErrorAssert",
    715: "cudaErrorIllegalInstruction", 716: "cudaErrorMisalignedAddress",
    717: "cudaErrorInvalidAddressSpace", 718: "cudaErrorInvalidPc", 719: "cudaErrorLaunchFailure",
    720: "cudaErrorCooperativeLaunchTooLarge", 800: "cudaErrorNotPermitted",
    801: "cudaErrorNotSupported", 900: "cudaErrorStreamCaptureUnsupported",
    901: "cudaErrorStreamCaptureInvalidated", 912: "cudaErrorInvalidClusterSize",
    999: "cudaErrorUnknown",
}


def cuda_error_name(code: int) -> str:
    """The ``cudaError_t`` enumerator name for ``code`` (``"cudaError <n>"`` if unknown).

    Uses a built-in table of the errors a launcher returns; otherwise asks the CUDA runtime
    that is already loaded in this process (PyTorch's ``libcudart``), if any."""
    if code in _CUDA_ERRORS:
        return _CUDA_ERRORS[code]
    for soname in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            fn = ctypes.CDLL(soname).cudaGetErrorName
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_int]
        name = fn(code)
        if name and name.startswith(b"cuda"):
            return name.decode()
        break
    return f"cudaError {code}"


# --------------------------------------------------------------------------------------------
# Size expressions (``requires`` and ``flops`` in the info dict): trees the compiler wrote
# --------------------------------------------------------------------------------------------

_ARITH = ("+", "-", "*", "/", "%", "cdiv", "min", "max")
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}


def _node(tree: Any) -> tuple:
    """One node of an expression tree, checked: ``("const", v)``, ``("var", name)`` or
    ``(op, a, b)``."""
    if isinstance(tree, Mapping):
        keys = set(tree)
        v = tree.get("const")
        if keys == {"const"} and isinstance(v, (int, float)) and not isinstance(v, bool):
            return "const", v
        if keys == {"var"} and isinstance(tree["var"], str):
            return "var", tree["var"]
        if keys == {"op", "a", "b"}:
            if tree["op"] in _ARITH or tree["op"] in _COMPARE:
                return tree["op"], tree["a"], tree["b"]
            raise ValueError(f"unknown operator {tree['op']!r} in an expression tree (known: "
                             f"{' '.join([*_ARITH, *_COMPARE])})")
    raise ValueError(f"malformed expression tree node {tree!r}: expected {{\"const\": number}}, "
                     "{\"var\": name} or {\"op\": ..., \"a\": tree, \"b\": tree}")


def _div(a: int | float, b: int | float) -> int | float:
    """C's ``/``: two integers truncate toward zero; a double operand divides exactly."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("integer division by zero in a size expression")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def eval_expr(tree: Mapping[str, Any], env: Mapping[str, int | float]) -> int | float:
    """Evaluate an expression tree of the kernel info (``{"const": 8}``, ``{"var": "N"}``,
    ``{"op": "%", "a": tree, "b": tree}``) over the sizes ``env`` with the semantics of the
    launcher's C on ``int64_t`` and ``double``: integer ``/`` truncates toward zero and ``%``
    takes the dividend's sign (``-7 / 2 == -3``, ``-7 % 2 == -1``), ``cdiv(a, b)`` is
    ``(a + b - 1) / b``, a comparison gives 0 or 1, a double operand makes an operation
    floating.  Python ints do not overflow where ``int64_t`` would.  Raises ``ValueError``
    for a malformed node, an unknown operator, a name not in ``env`` or ``%`` on a double,
    ``ZeroDivisionError`` for an integer division by zero."""
    kind, *args = _node(tree)
    if kind == "const":
        return args[0]
    if kind == "var":
        if args[0] not in env:
            raise ValueError(f"expression uses {args[0]!r}, which is not a size (sizes: "
                             f"{', '.join(env) or 'none'})")
        return env[args[0]]
    a, b = eval_expr(args[0], env), eval_expr(args[1], env)
    if kind in _COMPARE:
        return int(_COMPARE[kind](a, b))
    if kind == "/":
        return _div(a, b)
    if kind == "%":
        if not (isinstance(a, int) and isinstance(b, int)):
            raise ValueError("'%' on a double in a size expression")
        return a - b * _div(a, b)
    if kind == "cdiv":
        return _div(a + b - 1, b)
    if kind in ("min", "max"):  # C's common type: a double operand makes the result a double
        r = min(a, b) if kind == "min" else max(a, b)
        return float(r) if isinstance(a, float) or isinstance(b, float) else r
    return a + b if kind == "+" else a - b if kind == "-" else a * b


def expr_names(tree: Mapping[str, Any]) -> list[str]:
    """The sizes an expression tree reads, in order; raises ``ValueError`` if it is not a
    tree :func:`eval_expr` can evaluate."""
    kind, *args = _node(tree)
    if kind == "const":
        return []
    if kind == "var":
        return [args[0]]
    return expr_names(args[0]) + expr_names(args[1])


# --------------------------------------------------------------------------------------------
# The kernel's ABI: <name>.json
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Param:
    """One tensor parameter of the launcher.  ``dims`` are size names (or fixed ints),
    outermost first; the tensor is row-major and contiguous."""

    name: str
    dtype: str
    dims: tuple[str | int, ...]
    reads: bool
    writes: bool

    @property
    def shape_str(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.dims)}]"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``requires`` condition of the launcher: ``c`` as the launcher's C tests it (and as
    messages show it), ``tree`` the same condition as an expression tree (:func:`eval_expr`)
    and ``why`` what a caller is told when it fails."""

    c: str
    tree: Mapping[str, Any]
    why: str


_OLD_INFO = ("; an info with C text only was written by an older cypressc: rebuild the kernel "
             "with `cypressc build` to get the expression trees")


def _expr_field(v: Any, what: str, sizes: Sequence[str]) -> tuple[str, Mapping[str, Any]]:
    """``{"c": C text, "tree": expression tree}`` of the info, checked against the sizes."""
    if not (isinstance(v, Mapping) and isinstance(v.get("c"), str) and "tree" in v):
        raise ValueError(f"kernel info: {what} must be an object with 'c' (C text) and 'tree' (an "
                         f"expression tree), got {v!r}" + (_OLD_INFO if isinstance(v, (str, list)) else ""))
    try:
        used = expr_names(v["tree"])
    except ValueError as e:
        raise ValueError(f"kernel info: {what} ({v['c']!r}): {e}") from None
    if bad := [n for n in dict.fromkeys(used) if n not in sizes]:
        raise ValueError(f"kernel info: expression {v['c']!r} uses {', '.join(bad)}, not among the "
                         f"sizes ({', '.join(sizes)})")
    return v["c"], v["tree"]


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """The ABI of a built kernel, as written to ``<name>.json`` by ``cypressc build``.

    The launcher is ``extern "C" int <name>_launch(<one pointer per param: void* if written,
    const void* if read-only>, <one int64_t per size>, cudaStream_t)`` and returns a
    ``cudaError_t`` (``cudaErrorInvalidValue`` when a ``requires`` condition fails).
    ``flops`` (floating-point operations of one launch) is C text, ``flops_tree`` the same
    expression as a tree; in the JSON both are ``"flops": {"c": ..., "tree": ...}`` and each
    ``requires`` entry is ``{"c": ..., "tree": ..., "why": ...}``."""

    name: str
    params: tuple[Param, ...]
    sizes: tuple[str, ...]
    flops: str
    flops_tree: Mapping[str, Any]
    requires: tuple[Requirement, ...]
    runtime_include: str
    cuda_arch: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KernelInfo:
        """Validate and convert the info dict; raises ``ValueError`` naming the bad field."""
        def need(key: str, typ: type) -> Any:
            if key not in d:
                raise ValueError(f"kernel info: missing {key!r}")
            if not isinstance(d[key], typ):
                raise ValueError(f"kernel info: {key!r} must be a {typ.__name__}, got {d[key]!r}")
            return d[key]

        name = need("name", str)
        if not _IDENT.match(name):
            raise ValueError(f"kernel info: name {name!r} is not a C identifier")
        sizes = tuple(need("sizes", list))
        for s in sizes:
            if not isinstance(s, str) or not _IDENT.match(s) or s.startswith("cyp_"):
                raise ValueError(f"kernel info: size {s!r} is not a C identifier (or uses the "
                                 "reserved prefix cyp_)")
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"kernel info: duplicate size names in {list(sizes)}")
        params = []
        for i, p in enumerate(need("params", list)):
            if not isinstance(p, Mapping):
                raise ValueError(f"kernel info: params[{i}] must be an object")
            pn = p.get("name")
            if not isinstance(pn, str) or not _IDENT.match(pn) or pn.startswith("cyp_"):
                raise ValueError(f"kernel info: params[{i}].name {pn!r} is not a C identifier")
            if p.get("dtype") not in DTYPES:
                raise ValueError(f"kernel info: param {pn!r} has dtype {p.get('dtype')!r}; "
                                 f"expected one of {', '.join(DTYPES)}")
            dims = p.get("dims")
            if not isinstance(dims, list) or not dims:
                raise ValueError(f"kernel info: param {pn!r} needs a non-empty list 'dims'")
            for dim in dims:
                if isinstance(dim, bool) or not (
                        (isinstance(dim, int) and dim >= 0) or (isinstance(dim, str) and dim in sizes)):
                    raise ValueError(f"kernel info: param {pn!r} dim {dim!r} is neither a size "
                                     f"({', '.join(sizes)}) nor a non-negative int")
            reads, writes = p.get("reads"), p.get("writes")
            if not isinstance(reads, bool) or not isinstance(writes, bool) or not (reads or writes):
                raise ValueError(f"kernel info: param {pn!r} needs booleans 'reads'/'writes', "
                                 "at least one true")
            params.append(Param(pn, p["dtype"], tuple(dims), reads, writes))
        names = [p.name for p in params]
        if len(set(names)) != len(names) or set(names) & set(sizes):
            raise ValueError(f"kernel info: param and size names must be distinct: {names} {list(sizes)}")
        if "flops" not in d:
            raise ValueError("kernel info: missing 'flops'")
        flops, flops_tree = _expr_field(d["flops"], "'flops'", sizes)
        if not isinstance(d.get("requires", []), list):
            raise ValueError(f"kernel info: 'requires' must be a list, got {d['requires']!r}")
        requires = []
        for i, r in enumerate(d.get("requires", [])):
            if not (isinstance(r, Mapping) and isinstance(r.get("why"), str)):
                raise ValueError(f"kernel info: requires[{i}] must be an object with 'c', 'tree' and "
                                 f"'why' (the message), got {r!r}" + (_OLD_INFO if isinstance(r, list) else ""))
            requires.append(Requirement(*_expr_field(r, f"requires[{i}]", sizes), r["why"]))
        return cls(name, tuple(params), sizes, flops, flops_tree, tuple(requires),
                   str(d.get("runtime_include", "")), str(d.get("cuda_arch", "90a")))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name,
                "params": [{"name": p.name, "dtype": p.dtype, "dims": list(p.dims), "reads": p.reads,
                            "writes": p.writes} for p in self.params],
                "sizes": list(self.sizes), "flops": {"c": self.flops, "tree": self.flops_tree},
                "requires": [{"c": r.c, "tree": r.tree, "why": r.why} for r in self.requires],
                "runtime_include": self.runtime_include, "cuda_arch": self.cuda_arch}

    @classmethod
    def load_json(cls, path: str | Path) -> KernelInfo:
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ---- size arithmetic (pure Python) ----
    def shape(self, param: Param | str, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape of ``param`` at the given sizes."""
        p = param if isinstance(param, Param) else self.param(param)
        return tuple(d if isinstance(d, int) else int(sizes[d]) for d in p.dims)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}")

    def flops_at(self, sizes: Mapping[str, int]) -> float:
        """The ``flops`` expression evaluated (C semantics) at the given sizes."""
        return float(eval_expr(self.flops_tree, sizes))

    def failed_requires(self, sizes: Mapping[str, int]) -> list[str]:
        """Messages (``why``) of the ``requires`` conditions that do not hold at ``sizes``."""
        return [r.why for r in self.requires if not eval_expr(r.tree, sizes)]


# --------------------------------------------------------------------------------------------
# Argument checking and size inference (pure Python; PyTorch tensors are described first)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorDesc:
    """What the checks need to know of one tensor argument (see :func:`describe`).

    ``dtype`` is cypressc's name (``None`` if the tensor's type has none), ``dtype_str``
    what to print; ``device`` is ``(type, index)`` like ``("cuda", 0)``."""

    dtype: str | None
    dtype_str: str
    shape: tuple[int, ...]
    device: tuple[str, int | None]
    contiguous: bool
    ptr: int
    numel: int


def _arg(info: KernelInfo, i: int) -> str:
    p = info.params[i]
    return f"{info.name}: argument {i} ({p.name!r}, {p.shape_str})"


def infer_sizes(info: KernelInfo, shapes: Sequence[Sequence[int]],
                given: Mapping[str, int] | None = None) -> dict[str, int]:
    """Infer the launcher's sizes from the tensors' shapes (``shapes[i]`` for
    ``info.params[i]``), in ``info.sizes`` order.

    Every dimension named by the same size must agree; fixed (int) dims must match
    exactly; a size no shape determines must be in ``given``.  Raises :class:`KernelError`
    naming the parameter, the dimension and where the conflicting value came from."""
    if len(shapes) != len(info.params):
        raise KernelError(f"{info.name}: expected {len(info.params)} tensors "
                          f"({', '.join(p.name for p in info.params)}), got {len(shapes)}")
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    for k, v in (given or {}).items():
        if k not in info.sizes:
            raise KernelError(f"{info.name}: unknown size {k!r} (sizes: {', '.join(info.sizes)})")
        if isinstance(v, bool) or not isinstance(v, int):
            raise KernelError(f"{info.name}: size {k} must be an int, got {v!r}")
        sizes[k], origin[k] = v, "the keyword argument"
    for i, (p, shape) in enumerate(zip(info.params, shapes)):
        shape = tuple(int(x) for x in shape)
        if len(shape) != len(p.dims):
            raise KernelError(f"{_arg(info, i)}: expected a rank-{len(p.dims)} tensor, got shape "
                              f"{list(shape)} (rank {len(shape)})")
        for axis, (d, extent) in enumerate(zip(p.dims, shape)):
            if isinstance(d, int):
                if extent != d:
                    raise KernelError(f"{_arg(info, i)}: dimension {axis} must be {d}, got {extent}")
            elif d in sizes:
                if sizes[d] != extent:
                    raise KernelError(f"{_arg(info, i)}: dimension {axis} ({d}) is {extent}, but "
                                      f"{d} = {sizes[d]} from {origin[d]}")
            else:
                sizes[d], origin[d] = extent, f"{p.name}.shape[{axis}]"
    missing = [s for s in info.sizes if s not in sizes]
    if missing:
        raise KernelError(f"{info.name}: size(s) {', '.join(missing)} appear in no tensor's shape; "
                          f"pass them as keyword arguments ({missing[0]}=...)")
    return {s: sizes[s] for s in info.sizes}


def validate(info: KernelInfo, descs: Sequence[TensorDesc], given: Mapping[str, int] | None = None,
             *, check_requires: bool = True, align: int = 16) -> dict[str, int]:
    """Check the described tensors against ``info`` and return the inferred sizes.

    Checks, in order: the number of tensors; every dtype; the shapes (ranks, fixed dims,
    agreement of shared sizes: :func:`infer_sizes`); that every tensor is on one CUDA
    device; contiguous (row-major) and ``align``-byte aligned data (TMA needs 16); then, if
    ``check_requires``, the kernel's ``requires`` conditions.  Raises :class:`KernelError`
    naming the first offending argument."""
    if len(descs) != len(info.params):
        raise KernelError(f"{info.name}: expected {len(info.params)} tensors "
                          f"({', '.join(p.name for p in info.params)}), got {len(descs)}")
    for i, (p, t) in enumerate(zip(info.params, descs)):
        if t.dtype != p.dtype:
            want = DTYPES[p.dtype].torch
            raise KernelError(f"{_arg(info, i)}: expected dtype {want} ({p.dtype}), got {t.dtype_str}")
    sizes = infer_sizes(info, [t.shape for t in descs], given)
    device = None
    for i, t in enumerate(descs):
        if t.device[0] != "cuda":
            raise KernelError(f"{_arg(info, i)}: is on {t.device[0]}; the kernel needs CUDA tensors "
                              "(move it with .cuda())")
        if device is None:
            device = (t.device, i)
        elif t.device != device[0]:
            raise KernelError(f"{_arg(info, i)}: is on cuda:{t.device[1]} but argument {device[1]} "
                              f"({info.params[device[1]].name!r}) is on cuda:{device[0][1]}; all "
                              "tensors must be on one device")
    for i, t in enumerate(descs):
        if not t.contiguous:
            raise KernelError(f"{_arg(info, i)}: is not contiguous (row-major); pass .contiguous()")
        if t.numel and align and t.ptr % align:
            raise KernelError(f"{_arg(info, i)}: data pointer 0x{t.ptr:x} is not {align}-byte "
                              "aligned (TMA needs it; a sliced view can cause this: pass a copy)")
    if check_requires:
        failed = info.failed_requires(sizes)
        if failed:
            at = ", ".join(f"{k}={v}" for k, v in sizes.items())
            raise KernelError(f"{info.name}: the kernel does not support these sizes ({at}): "
                              + "; ".join(failed))
    return sizes


# --------------------------------------------------------------------------------------------
# PyTorch side
# --------------------------------------------------------------------------------------------


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("cypressc.runtime needs PyTorch (a CUDA build) to call kernels on "
                          "tensors: pip install torch") from e
    return torch


def describe(t: Any) -> TensorDesc:
    """A :class:`TensorDesc` of a ``torch.Tensor`` (raises :class:`KernelError` otherwise)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise KernelError(f"expected a torch.Tensor, got {type(t).__name__}")
    by_torch = {getattr(torch, d.torch): d.name for d in DTYPES.values()}
    return TensorDesc(dtype=by_torch.get(t.dtype), dtype_str=str(t.dtype).removeprefix("torch."),
                      shape=tuple(t.shape), device=(t.device.type, t.device.index),
                      contiguous=t.is_contiguous(), ptr=t.data_ptr(), numel=t.numel())


class Kernel:
    """A built kernel, callable on PyTorch CUDA tensors.  Make one with :func:`load`.

    ``kernel(*tensors, stream=None, **sizes)`` takes one tensor per entry of
    ``kernel.info.params``, in that order (written tensors are outputs and are
    overwritten), checks them (:func:`validate`), and launches on ``stream`` (a
    ``torch.cuda.Stream``, a raw ``cudaStream_t`` int, or ``None`` for the current stream
    of the tensors' device).  Sizes that no tensor's shape fixes are passed by keyword.
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
            raise OSError(f"{self.library} has no symbol {info.name}_launch; was it built from "
                          f"{info.name}.cu by the generated Makefile?") from None
        fn.argtypes = ([ctypes.c_void_p] * len(info.params) + [ctypes.c_int64] * len(info.sizes)
                       + [ctypes.c_void_p])
        fn.restype = ctypes.c_int
        self._fn = fn

    @property
    def name(self) -> str:
        return self.info.name

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.shape_str}" for p in self.info.params)
        return f"<cypressc kernel {self.name}({args}) from {self.library}>"

    def _prepare(self, tensors: Sequence[Any], stream: Any, sizes: Mapping[str, int],
                 check_requires: bool) -> tuple[list[int], dict[str, int], int]:
        torch = _torch()
        descs = []
        for i, t in enumerate(tensors):
            try:
                descs.append(describe(t))
            except KernelError as e:
                if i < len(self.info.params):
                    raise KernelError(f"{_arg(self.info, i)}: {e}") from None
                raise
        got = validate(self.info, descs, sizes, check_requires=check_requires)
        dev = descs[0].device[1] if descs else None
        if dev is None:
            dev = torch.cuda.current_device()
        if stream is None:
            handle = torch.cuda.current_stream(dev).cuda_stream
        elif isinstance(stream, int):
            handle = stream
        else:
            sdev = getattr(stream, "device", None)
            if sdev is not None and getattr(sdev, "index", dev) not in (None, dev):
                raise KernelError(f"{self.name}: stream is on {sdev} but the tensors are on cuda:{dev}")
            handle = stream.cuda_stream
        return [d.ptr for d in descs], got, handle

    def _raise(self, rc: int, sizes: Mapping[str, int]) -> None:
        cname = cuda_error_name(rc)
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())
        msg = f"{self.name}_launch({at}) returned {rc} ({cname})"
        if rc == 1:
            failed = self.info.failed_requires(sizes)
            msg += ": the launcher refused its arguments" + (
                f" ({'; '.join(failed)})" if failed else
                " although every `requires` condition of the kernel info holds: the launcher "
                "checks something the info does not list (sizes within int32? an empty tensor?)")
        raise LaunchError(msg, rc, cname, self.name, sizes)

    def launch(self, *tensors: Any, stream: Any = None, check_requires: bool = True,
               **sizes: int) -> int:
        """Check and launch like ``__call__`` but return the launcher's ``cudaError_t``
        instead of raising on a non-zero one.  With ``check_requires=False`` the
        ``requires`` conditions are left to the launcher (used to test its refusals)."""
        ptrs, got, handle = self._prepare(tensors, stream, sizes, check_requires)
        with _torch().cuda.device(self._device_of(tensors)):
            return int(self._fn(*ptrs, *got.values(), handle))

    @staticmethod
    def _device_of(tensors: Sequence[Any]) -> int:
        for t in tensors:
            if t.device.index is not None:
                return t.device.index
        return _torch().cuda.current_device()

    def __call__(self, *tensors: Any, stream: Any = None, **sizes: int) -> None:
        ptrs, got, handle = self._prepare(tensors, stream, sizes, True)
        with _torch().cuda.device(self._device_of(tensors)):
            rc = int(self._fn(*ptrs, *got.values(), handle))
        if rc:
            self._raise(rc, got)

    def bind(self, *tensors: Any, stream: Any = None, **sizes: int) -> Callable[[], None]:
        """Check the arguments once and return a no-argument function that launches on
        them (for timing loops: no per-call checks).  The returned function raises
        :class:`LaunchError` on a non-zero return.  Keep the tensors alive while using it."""
        ptrs, got, handle = self._prepare(tensors, stream, sizes, True)
        args = (*ptrs, *got.values(), handle)
        fn, raise_ = self._fn, self._raise

        def run() -> None:
            rc = fn(*args)
            if rc:
                raise_(rc, got)
        run.sizes = got  # type: ignore[attr-defined]
        return run

    def sizes_of(self, *tensors: Any, **sizes: int) -> dict[str, int]:
        """The sizes the kernel would infer from these tensors (all checks except requires)."""
        return self._prepare(tensors, 0, sizes, False)[1]

    def flops(self, sizes: Mapping[str, int]) -> float:
        """Floating-point operations of one launch at ``sizes`` (the info's ``flops``)."""
        return self.info.flops_at(sizes)


def load(outdir: str | Path, name: str | None = None) -> Kernel:
    """Load the kernel built in ``outdir``: ``<name>.json`` and ``lib<name>.so``.

    ``name`` may be omitted when ``outdir`` holds exactly one ``<name>.json`` with a
    ``lib<name>.so`` (or one ``.json`` at all).  Raises ``FileNotFoundError`` with what to
    run when a file is missing, ``ValueError`` for a malformed info file."""
    outdir = Path(outdir)
    if name is None:
        cands = sorted(p.stem for p in outdir.glob("*.json"))
        if not cands:
            raise FileNotFoundError(f"no <name>.json in {outdir}; run `cypressc build PROGRAM -m "
                                    f"MAPPING -o {outdir}` first")
        built = [c for c in cands if (outdir / f"lib{c}.so").exists()]
        pick = built if len(built) == 1 else cands
        if len(pick) != 1:
            raise ValueError(f"{outdir} holds several kernels ({', '.join(cands)}); pass name=")
        name = pick[0]
    info_path = outdir / f"{name}.json"
    if not info_path.exists():
        raise FileNotFoundError(f"{info_path} not found; run `cypressc build` into {outdir}")
    info = KernelInfo.load_json(info_path)
    lib = outdir / f"lib{info.name}.so"
    if not lib.exists():
        raise FileNotFoundError(f"{lib} not found; run `make -C {outdir}` (needs nvcc)")
    return Kernel(info, lib)
