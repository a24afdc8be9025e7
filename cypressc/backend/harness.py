"""Write the host harness of a built kernel: ``main.cu``, ``main.h``, ``Makefile`` and
``<name>.json``.

``cypressc build`` writes ``<name>.cu`` (kernel + ``extern "C"`` launcher) and
``<name>.h``, then calls :func:`write_harness` with the kernel's info dict (the ABI;
schema in :class:`cypressc.runtime.KernelInfo`).  The results (DESIGN §6):

``main.cu``
    The harness: :data:`MAIN_CU` copied unchanged, the same for every kernel.  Everything
    kernel-specific is in ``main.h`` (:func:`render_main_header`), which it includes: the
    name, the launcher, the sizes, floats and tensor parameters as tables, and the
    ``flops`` and ``requires`` expressions.
    ``./<name> SIZE... FLOAT... [--iters N] [--warmup N] [--seed S] [--dump DIR]``: one size
    per entry of ``sizes``, then one number per entry of ``floats`` (the kernel's ``float``
    parameters, read with ``strtod``); inputs drawn on the device (normal for floats, small ints for
    i32, counter-based hash, never zeros), written-only outputs poisoned with NaN
    (0xff bytes); one checked launch, a count of NaNs left in the float outputs, ``--warmup``
    launches, ``--iters`` launches timed one by one with CUDA events, and ONE JSON line on
    stdout: ``{"name", "sizes", "ms" (median), "tflops", "min_ms", "max_ms", "iters",
    "warmup", "nan", "device"}``, with ``"floats": {name: value}`` after ``"sizes"`` for a
    kernel with float parameters (also in the refusal line and ``meta.json``; ``null`` for a
    non-finite value).  ``--dump DIR`` writes every parameter after the first
    launch as ``DIR/<param>.npy`` (an in/out parameter also as ``<param>.in.npy`` before
    it) plus ``DIR/meta.json``; bf16 is stored as its raw bits (``'<u2'``; in NumPy:
    ``(a.astype(np.uint32) << 16).view(np.float32)``).
    Exit codes: 0 ok; 1 a CUDA error or the launcher refused (message on stderr, a JSON
    line with ``"error"`` on stdout); 2 usage; 3 NaN left in an output.

``Makefile``
    ``make`` builds ``./<name>`` (main.cu + <name>.cu) and ``lib<name>.so`` with
    ``nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a`` (the flags of
    bench/proto), ``-I`` the runtime headers and the CUTLASS/CuTe headers of the installed
    ``nvidia-cutlass`` package (found at make time; ``CUTLASS_INCLUDE=`` overrides).
    ``EXTRA_NVCCFLAGS=`` adds flags (``-Xptxas -v``, ``-lineinfo``); ``make clean``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cypressc.abi.dtypes import DTYPES
from cypressc.abi.info import KernelInfo
from cypressc.backend.names import choose_names, sym

__all__ = [
    "write_harness",
    "harness_files",
    "main_source",
    "render_main_header",
    "render_makefile",
    "RUNTIME_DIR",
    "MAIN_CU",
]

# cypress.cuh and its parts: the -I of every kernel build
RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
# the static host harness, copied into every build directory as main.cu
MAIN_CU = RUNTIME_DIR / "main.cu"


def harness_files(ki: KernelInfo) -> dict[str, str]:
    """The harness's files of a build directory for ``ki``: ``main.cu`` (static), ``main.h``
    and ``Makefile``, name -> text."""
    return {
        "main.cu": main_source(),
        "main.h": render_main_header(ki),
        "Makefile": render_makefile(ki),
    }


def write_harness(outdir: Path, info: Mapping[str, Any]) -> None:
    """Write ``outdir/main.cu``, ``main.h``, ``Makefile`` and ``<name>.json``.

    ``info`` is validated first (``ValueError`` naming the bad field); ``outdir`` is created
    if needed; a file whose content would not change is not rewritten (make stays a no-op).
    ``<name>.cu`` and ``<name>.h`` are the emitter's and are not touched."""
    ki = KernelInfo.from_dict(info)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, text in harness_files(ki).items():
        _write_if_changed(outdir / name, text)
    _write_if_changed(outdir / f"{ki.name}.json", json.dumps(dict(info), indent=2) + "\n")


def _write_if_changed(path: Path, text: str) -> None:
    """Leave an identical file alone, so that `make` after a rebuild with no change is a no-op."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# --------------------------------------------------------------------------------------------
# main.h: the kernel-specific part of the harness, as tables main.cu reads
# --------------------------------------------------------------------------------------------


def main_source() -> str:
    """The text of ``main.cu``: the static harness :data:`MAIN_CU`, the same for every kernel."""
    return MAIN_CU.read_text()


def _c_string(s: str) -> str:
    """A C string literal holding ``s``."""
    out = []
    for ch in s:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.append("".join(f'\\x{b:02x}""' for b in ch.encode()))
    return '"' + "".join(out) + '"'


def _braced(items: list[str], strings: bool = False) -> str:
    """A ``std::array`` initializer of ``items`` (C initializers, or strings to quote):
    ``{{a, b}}``, or ``{}`` for none."""
    inner = ", ".join(_c_string(i) if strings else i for i in items)
    return f"{{{{{inner}}}}}" if items else "{}"


def render_main_header(ki: KernelInfo) -> str:
    """The text of ``main.h`` for ``ki``: what main.cu needs to know of the kernel.

    ``CYP_NAME``; ``<name>.h`` (when present) and the launcher's declaration, so that a
    mismatch between them is a compile error; in namespace ``cyp_kernel`` the tables
    ``kSizes`` and ``kFloats`` (the positional arguments, in order), ``kParams`` (one
    ``CypParam`` per tensor parameter: dtype facts from :data:`DTYPES`, read/written, its
    dimensions in ``kDims``) and ``kDims`` (``CypDim``: a size's index or -1 and a fixed
    extent), and ``launch(d, s, f, stream)``, the launcher called with the device pointers,
    sizes and floats as arrays; in namespace ``cyp_expr`` the kernel's ``flops`` and
    ``explain`` (its ``requires``), functions of the sizes by name as the launcher's C has
    them.  main.cu's vocabulary (``CypType``, ``CypParam``, ``CypDim``, ``cyp_expr::cdiv``,
    ``min``, ``max``) is declared before it includes this header."""
    n = ki.name
    sizes, floats = list(ki.sizes), list(ki.floats)
    index = {s: i for i, s in enumerate(sizes)}
    L: list[str] = []
    w = L.append
    w(
        f"// main.h — the kernel-specific part of the host harness of `{n}` (generated by cypressc; do not edit)."
    )
    w(f"//   ./{n} {' '.join(sizes + floats)} [--iters N] [--warmup N] [--seed S] [--dump DIR]")
    w(
        "// main.cu (the same for every kernel: cypressc/backend/runtime/main.cu) includes it after the"
    )
    w("// types these tables are written in.")
    w("#pragma once")
    w(f"#define CYP_NAME {_c_string(n)}")
    w(f'#if __has_include("{n}.h")')
    w(f'#include "{n}.h"')
    w("#endif")
    ptr_args = [f"{'void*' if p.writes else 'const void*'} {sym(p.name)}" for p in ki.params]
    size_args = [f"int64_t {s}" for s in sizes]
    # the program's names spelled apart from the declaration's own (a tensor named `stream`)
    args = [*ptr_args, *(f"int64_t {sym(s)}" for s in sizes), *(f"float {sym(f)}" for f in floats)]
    w(f"// The launcher in {n}.cu (must match {n}.h; a mismatch is a compile error here).")
    w(choose_names(f'extern "C" int {n}_launch({", ".join([*args, "cudaStream_t stream"])});'))
    w("")
    w("namespace cyp_kernel {")
    w("// The positional arguments of the command line: the sizes, then the float parameters.")
    w(f"inline constexpr std::array<const char*, {len(sizes)}> kSizes = {_braced(sizes, True)};")
    w(f"inline constexpr std::array<const char*, {len(floats)}> kFloats = {_braced(floats, True)};")
    w("// The tensor parameters in the launcher's order: name, dtype, type, C++ type, .npy descr,")
    w("// bytes per element, floating, read, written, first dimension, rank.")
    rows, dims = [], []
    for p in ki.params:
        dt = DTYPES[p.dtype]
        flags = ", ".join("true" if b else "false" for b in (dt.floating, p.reads, p.writes))
        rows.append(
            f"    {{{_c_string(p.name)}, {_c_string(dt.name)}, CypType::{dt.name}, "
            f"{_c_string(dt.ctype)}, {_c_string(dt.npy)}, {dt.itemsize}, {flags}, {len(dims)}, "
            f"{len(p.dims)}}},  // {p.shape_str}{' read' if p.reads else ''}"
            f"{' written' if p.writes else ''}"
        )
        dims += [f"{{{index[d]}, 0}}" if isinstance(d, str) else f"{{-1, {d}}}" for d in p.dims]
    w(f"inline constexpr std::array<CypParam, {len(rows)}> kParams = {{{{")
    L.extend(rows)
    w("}};")
    w("// Their dimensions, outermost first: {index of a size, 0} or {-1, fixed extent}.")
    w(f"inline constexpr std::array<CypDim, {len(dims)}> kDims = {_braced(dims)};")
    w("// The launcher, given the device pointers, the sizes and the floats in the tables' order.")
    call = (
        [f"d[{i}]" for i in range(len(ki.params))]
        + [f"s[{i}]" for i in range(len(sizes))]
        + [f"f[{i}]" for i in range(len(floats))]
    )
    w(
        f"inline cudaError_t launch(const std::array<void*, {len(ki.params)}>& d, "
        f"const std::array<int64_t, {len(sizes)}>&{' s' if sizes else ''}, "
        f"const std::array<float, {len(floats)}>&{' f' if floats else ''}, cudaStream_t stream) {{"
    )
    w(f"  return static_cast<cudaError_t>({n}_launch({', '.join(call + ['stream'])}));")
    w("}")
    w("}  // namespace cyp_kernel")
    w("")
    # the expressions of the info, evaluated in C as the launcher would, on the sizes by name
    w("namespace cyp_expr {")
    unused = "  " + " ".join(f"(void){s};" for s in sizes) if sizes else ""
    w(
        f"inline double flops({', '.join(size_args) or 'void'}) {{{unused} return double({ki.flops}); }}"
    )
    w("// The launcher's `requires` conditions: used only to explain a refusal.")
    w(f"inline void explain({', '.join(size_args) or 'void'}) {{{unused}")
    for r in ki.requires:
        w(
            f'  if (!({r.c})) fprintf(stderr, "  requires %s: %s\\n", {_c_string(r.c)}, {_c_string(r.why)});'
        )
    w("}")
    w("}  // namespace cyp_expr")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------------
# Makefile
# --------------------------------------------------------------------------------------------

_MAKEFILE = r"""# Makefile for the cypressc kernel `@NAME@` (generated by cypressc; do not edit).
#   make                 ./@NAME@ (harness: main.cu, main.h + @NAME@.cu) and lib@NAME@.so (for cypressc.runtime)
#   make clean
# Overridable: NVCC, PYTHON, CUDA_ARCH, NVCCFLAGS, EXTRA_NVCCFLAGS (e.g. "-Xptxas -v" or -lineinfo),
# RUNTIME_INCLUDE (cypressc's runtime headers), CUTLASS_INCLUDE (the dir holding cute/ and cutlass/;
# by default the headers of the installed nvidia-cutlass Python package).
NAME := @NAME@
NVCC ?= nvcc
PYTHON ?= python3
CUDA_ARCH ?= @ARCH@
NVCCFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH)
EXTRA_NVCCFLAGS ?=

RUNTIME_INCLUDE ?= @RUNTIME@
ifeq ($(wildcard $(RUNTIME_INCLUDE)/cypress.cuh),)
  # the build directory moved to another machine: ask the installed (or importable) cypressc
  RUNTIME_INCLUDE := $(shell $(PYTHON) -c "import importlib.util as u, os; s = u.find_spec('cypressc'); print(os.path.join(s.submodule_search_locations[0], 'backend', 'runtime') if s else '')" 2>/dev/null)
endif
ifeq ($(origin CUTLASS_INCLUDE),undefined)
  ifneq ($(CUTLASS_INC),)
    CUTLASS_INCLUDE := $(CUTLASS_INC)
  else
    CUTLASS_INCLUDE := $(shell $(PYTHON) -c "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(s.submodule_search_locations[0], 'source', 'include') if s else '')" 2>/dev/null)
  endif
endif
INCLUDES := -I"$(RUNTIME_INCLUDE)" -I"$(CUTLASS_INCLUDE)"

.PHONY: all clean check-env
all: $(NAME) lib$(NAME).so

check-env:
	@test -f "$(RUNTIME_INCLUDE)/cypress.cuh" || { echo "error: cypress.cuh not found (RUNTIME_INCLUDE='$(RUNTIME_INCLUDE)'); pass RUNTIME_INCLUDE=<cypressc>/backend/runtime" >&2; exit 1; }
	@test -d "$(CUTLASS_INCLUDE)/cute" || { echo "error: CUTLASS/CuTe headers not found (CUTLASS_INCLUDE='$(CUTLASS_INCLUDE)'); pip install nvidia-cutlass, or pass CUTLASS_INCLUDE=<dir holding cute/ and cutlass/>" >&2; exit 1; }
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "error: $(NVCC) not found; install the CUDA toolkit or pass NVCC=" >&2; exit 1; }

$(NAME): main.cu main.h $(NAME).cu $(wildcard $(NAME).h) | check-env
	$(NVCC) $(NVCCFLAGS) $(EXTRA_NVCCFLAGS) $(INCLUDES) -o $@ main.cu $(NAME).cu

lib$(NAME).so: $(NAME).cu $(wildcard $(NAME).h) | check-env
	$(NVCC) $(NVCCFLAGS) $(EXTRA_NVCCFLAGS) $(INCLUDES) -Xcompiler -fPIC -shared -o $@ $(NAME).cu

clean:
	rm -f $(NAME) lib$(NAME).so
"""


def render_makefile(ki: KernelInfo) -> str:
    """The text of the ``Makefile`` for ``ki``."""
    runtime = ki.runtime_include or str(RUNTIME_DIR)
    return (
        _MAKEFILE.replace("@NAME@", ki.name)
        .replace("@ARCH@", ki.cuda_arch or "90a")
        .replace("@RUNTIME@", runtime)
    )
