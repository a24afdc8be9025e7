"""Print the launcher of a :class:`~cypressc.backend.plan.KernelPlan`: the ``extern "C"``
function a caller links against (its declaration is the build's header), which checks the
shape requirements, builds the TMA descriptors, sets the dynamic shared-memory size and
launches the kernel (DESIGN §6)."""

from __future__ import annotations

from cypressc.abi.dtypes import DTYPES
from cypressc.backend import plan as P
from cypressc.backend.emit_base import CTYPE, c, dim
from cypressc.backend.names import sym
from cypressc.ir import nodes as N

__all__ = ["emit_launcher", "launcher_signature"]


def _param_decl(t: P.GlobalTensor) -> str:
    return f"{'const ' if not t.writes else ''}void* {sym(t.name)}"


def launcher_signature(p: P.KernelPlan, name: str | None = None) -> str:
    """The launcher's declaration, its program names marked (:func:`emit_header` and the
    ``.cu`` spell them); ``name``: a kernel's ``check`` or ``launch`` inside its namespace
    (a program of several kernels) instead of the ``extern "C"`` ``<name>_launch``."""
    args = (
        [_param_decl(t) for t in p.tensors]
        + [f"int64_t {sym(s)}" for s in p.sizes]
        + [f"float {sym(f)}" for f in p.floats]
        + ["cudaStream_t stream"]
    )
    if name is not None:
        return f"static cudaError_t {name}({', '.join(args)})"
    return f'extern "C" int {p.name}_launch({", ".join(args)})'


def launcher_args(p: P.KernelPlan) -> list[str]:
    """The launcher's parameters by name, in order, marked: the arguments the launcher of a
    program of several kernels passes on to each kernel's ``check`` and ``launch``."""
    return [sym(t.name) for t in p.tensors] + [sym(s) for s in p.sizes + p.floats] + ["stream"]


def emit_launcher(w, p: P.KernelPlan, paired: bool, namespaced: bool = False) -> None:
    """Print the ``extern "C"`` launcher of plan ``p`` with writer ``w``: the size checks and
    the requirements (``cudaErrorInvalidValue``), the TMA maps, the shared-memory attribute
    once per device, the grid and the launch (``paired``: the kernel is a template over the
    tile walk, instantiated for pairs of tiles and for one tile per block).  ``namespaced``
    (one kernel of several): the checks are a ``check`` of their own and the rest a
    ``launch``, so the program's launcher checks every kernel before it launches one."""
    w(f"{launcher_signature(p, 'check' if namespaced else None)} {{")
    w.ind += 1
    for s in p.sizes:
        w(f"if ({sym(s)} < 0 || {sym(s)} > INT32_MAX) return cudaErrorInvalidValue;")
    for r in p.requires:
        w(
            f"if (!({c(N.IBin(r.op, r.lhs, r.rhs), top=True)})) return cudaErrorInvalidValue;  // {r.why}"
        )
    ptrs = " | ".join(
        f"reinterpret_cast<uintptr_t>({sym(t.name)})"
        for t in p.tensors
        if t.name not in p.pointer_reads
    )
    w(f"if (({ptrs}) & 15) return cudaErrorInvalidValue;  // TMA needs 16-byte aligned tensors")
    for t in p.tensors:
        if t.name in p.pointer_reads:
            pairs = p.read_in_pairs(t.name)
            w(
                f"if (reinterpret_cast<uintptr_t>({sym(t.name)}) & {DTYPES[t.dtype].itemsize * (1 + pairs) - 1}) "
                f"return cudaErrorInvalidValue;  // {t.name} is read {'in pairs of elements' if pairs else 'element by element'}"
            )
    out = [t for t in p.tensors if t.writes]
    if namespaced:
        w("return cudaSuccess;")
        w.ind -= 1
        w("}")
        w(f"{launcher_signature(p, 'launch')} {{")
        w.ind += 1
    w(
        f"if ({' || '.join(f'{dim(d, p)} == 0' for t in out for d in t.dims)}) return cudaSuccess;  // nothing to write"
    )
    w("cudaError_t e;")
    for m in p.maps:
        t = next(x for x in p.tensors if x.name == m.tensor)
        dims = [dim(d, p) for d in t.dims]
        if len(m.box) == 1:  # a vector piece: the tensor flattened (lower_mem._load_vector)
            w(f"CUtensorMap {sym(m.name)};")
            w(
                f"if ((e = cypress::make_tma_map_1d(&{sym(m.name)}, {sym(t.name)}, "
                f"{' * '.join(dims)}, {m.box[0]}, {DTYPES[t.dtype].itemsize})) != cudaSuccess) return e;"
            )
            continue
        inner, outer = dims[-1], dims[-2]
        # the leading dimensions of a contiguous tensor fold into one TMA dimension (_batch)
        batch = " * ".join(f"{d}" for d in dims[:-2]) if len(dims) > 2 else "1"
        bf16 = "true" if t.dtype == "bf16" else "false"
        w(f"CUtensorMap {sym(m.name)};")
        sw = "" if m.swizzle == 128 else f", {m.swizzle}"  # 128: the runtime's default
        isz = DTYPES[t.dtype].itemsize
        if isz != 2:  # f32 (a TMA reduce-add's target) or FP8 (moved as bytes)
            sw = f", {m.swizzle}, {isz}"
        w(
            f"if ((e = cypress::make_tma_map(&{sym(m.name)}, {sym(t.name)}, {bf16}, {inner}, {outer}, {batch}, "
            f"{m.box[-1]}, {m.box[-2]}, {len(m.box)}{sw})) != cudaSuccess) return e;"
        )
    w(f"static int configured_device = -1, sms = 0{', clusters = 0' if p.cluster else ''};")
    w("int dev;")
    w("if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;")
    w.open("if (dev != configured_device)")
    # a paired walk has two instances: tiles in pairs (tiles > grid), one tile per block
    kernels = (
        [f"{p.name}_kernel<true>", f"{p.name}_kernel<false>"] if paired else [f"{p.name}_kernel"]
    )
    for k in kernels:
        w(
            f"if ((e = cudaFuncSetAttribute({k}, cudaFuncAttributeMaxDynamicSharedMemorySize, "
            "SMEM_BYTES)) != cudaSuccess) return e;"
        )
    w(
        "if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;"
    )
    if p.cluster:  # how many clusters fit at once (GPCs need not split into whole clusters)
        w(
            f"if ((e = cypress::max_active_clusters(&clusters, {kernels[0]}, CLUSTER, THREADS, "
            "SMEM_BYTES)) != cudaSuccess) return e;"
        )
    w("configured_device = dev;")
    w.close()
    shape = p.cluster or (1,) * len(p.grid)
    tiles = " * ".join(
        f"cdiv({c(g)}, {n})" if n > 1 else f"({c(g)})" for g, n in zip(p.grid, shape)
    )
    w(f"const long long tiles = {tiles};" + ("  // cluster tiles" if p.cluster else ""))
    if p.cluster:
        w(
            "const long long grid = CLUSTER * "
            + ("(tiles < clusters ? tiles : clusters);" if p.persistent else "tiles;")
        )
    else:
        w(f"const long long grid = {'tiles < sms ? tiles : sms' if p.persistent else 'tiles'};")
    args = (
        [sym(m.name) for m in p.maps]
        + [
            f"static_cast<{'' if t.writes else 'const '}{CTYPE[t.dtype]}*>({sym(t.name)})"
            for t in p.pointer_tensors
        ]
        + [f"static_cast<int>({sym(s)})" for s in p.sizes]
        + [sym(f) for f in p.floats]
    )
    if p.ordered:  # deterministic: true
        w("long long* order;  // a progress word per tile: the blocks' order of reduce-adds")
        w("if ((e = cypress::order_workspace(&order, tiles, stream)) != cudaSuccess) return e;")
        args.append("order")
    launch = f"<<<static_cast<unsigned>(grid), THREADS, SMEM_BYTES, stream>>>({', '.join(args)});"
    if len(kernels) == 2:
        w(f"if (tiles > grid) {kernels[0]}{launch}")
        w(f"else {kernels[1]}{launch}")
    else:
        w(f"{kernels[0]}{launch}")
    if p.ordered:
        w("e = cudaGetLastError();")
        w(
            "const cudaError_t freed = cudaFreeAsync(order, stream);  // to the pool after the kernel"
        )
        w("return e != cudaSuccess ? e : freed;")
    else:
        w("return cudaGetLastError();")
    w.ind -= 1
    w("}")
