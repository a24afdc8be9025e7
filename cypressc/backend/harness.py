"""Write the host harness of a built kernel: ``main.cu``, ``Makefile`` and ``<name>.json``.

``cypressc build`` writes ``<name>.cu`` (kernel + ``extern "C"`` launcher) and
``<name>.h``, then calls :func:`write_harness` with the kernel's info dict (the ABI;
schema in :class:`cypressc.runtime.KernelInfo`).  The results (DESIGN §6):

``main.cu``
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

__all__ = ["write_harness", "render_main", "render_makefile", "RUNTIME_DIR"]

# cypress.cuh and its parts: the -I of every kernel build
RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"


def write_harness(outdir: Path, info: Mapping[str, Any]) -> None:
    """Write ``outdir/main.cu``, ``outdir/Makefile`` and ``outdir/<name>.json``.

    ``info`` is validated first (``ValueError`` naming the bad field); ``outdir`` is created
    if needed; a file whose content would not change is not rewritten (make stays a no-op).  ``<name>.cu`` and ``<name>.h`` are the emitter's and are not touched."""
    ki = KernelInfo.from_dict(info)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    _write_if_changed(outdir / "main.cu", render_main(ki))
    _write_if_changed(outdir / "Makefile", render_makefile(ki))
    _write_if_changed(outdir / f"{ki.name}.json", json.dumps(dict(info), indent=2) + "\n")


def _write_if_changed(path: Path, text: str) -> None:
    """Leave an identical file alone, so that `make` after a rebuild with no change is a no-op."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# --------------------------------------------------------------------------------------------
# main.cu
# --------------------------------------------------------------------------------------------


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


def _dims_c(ki: KernelInfo, dims: tuple[str | int, ...]) -> str:
    return ", ".join(f"(int64_t){d}" if isinstance(d, int) else f"s.{d}" for d in dims)


_PRELUDE = r"""#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>
#include <sys/stat.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define CYP_CHECK(x)                                                                       \
  do {                                                                                     \
    cudaError_t cyp_e_ = (x);                                                              \
    if (cyp_e_ != cudaSuccess) return cyp_fail(#x, cyp_e_);                                \
  } while (0)

namespace {

const char* cyp_argv0 = "";
std::string cyp_sizes_json;  // {"M": 1, ...}, for error lines

int cyp_fail(const char* what, cudaError_t e) {
  fprintf(stderr, "%s: error: %s failed: %s (%s)\n", cyp_argv0, what, cudaGetErrorName(e),
          cudaGetErrorString(e));
  printf("{\"name\": \"%s\", \"sizes\": %s, \"error\": \"%s\", \"rc\": %d}\n", CYP_NAME,
         cyp_sizes_json.c_str(), cudaGetErrorName(e), int(e));
  return 1;
}

// ---- random inputs on the device: a counter-based hash (splitmix64), so any size is fast and
// the data depends only on (seed, parameter, index) ------------------------------------------
__host__ __device__ inline uint64_t cyp_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
template <typename T> __device__ inline T cyp_from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return T(x);
}
template <typename T> __device__ inline float cyp_to_float(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return float(x);
}

// Standard normal values (Box-Muller), or integers in [-8, 8) for integer types.
template <typename T>
__global__ void cyp_fill_random(T* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = cyp_mix(seed ^ cyp_mix(uint64_t(i)));
    if constexpr (std::is_integral_v<T>) {
      p[i] = T(int(h >> 60) - 8);
    } else {
      const float u1 = float((h >> 40) + 1) * (1.0f / 16777217.0f);  // (0, 1)
      const float u2 = float((h >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
      p[i] = cyp_from_float<T>(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
    }
  }
}

template <typename T>
__global__ void cyp_count_nan(const T* p, int64_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    c += isnan(cyp_to_float(p[i])) ? 1 : 0;
  if (c) atomicAdd(count, c);
}

unsigned cyp_blocks(int64_t n) { return unsigned(std::min<int64_t>((n + 255) / 256, 4096)); }

template <typename T>
cudaError_t cyp_random(void* p, int64_t n, uint64_t seed) {
  if (n == 0) return cudaSuccess;
  cyp_fill_random<T><<<cyp_blocks(n), 256>>>(static_cast<T*>(p), n, seed);
  return cudaGetLastError();
}

template <typename T>
cudaError_t cyp_nans(const void* p, int64_t n, unsigned long long* dcount, unsigned long long* out) {
  *out = 0;
  if (n == 0) return cudaSuccess;
  cudaError_t e;
  if ((e = cudaMemset(dcount, 0, sizeof *dcount)) != cudaSuccess) return e;
  cyp_count_nan<T><<<cyp_blocks(n), 256>>>(static_cast<const T*>(p), n, dcount);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return cudaMemcpy(out, dcount, sizeof *out, cudaMemcpyDeviceToHost);
}

// ---- .npy files (format 1.0), written by hand so nothing but libc is needed ----------------
bool cyp_write_npy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                   const void* data, size_t bytes) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  size_t total = 10 + dict.size() + 1;                  // magic(6) version(2) len(2) dict '\n'
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) { fprintf(stderr, "%s: error: cannot write %s: %s\n", cyp_argv0, path.c_str(), strerror(errno)); return false; }
  const unsigned char head[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const unsigned char len[2] = {static_cast<unsigned char>(dict.size() & 0xff), static_cast<unsigned char>(dict.size() >> 8)};
  bool ok = fwrite(head, 1, 8, f) == 8 && fwrite(len, 1, 2, f) == 2 && fwrite(dict.data(), 1, dict.size(), f) == dict.size()
            && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
  ok = (fclose(f) == 0) && ok;
  if (!ok) fprintf(stderr, "%s: error: writing %s failed\n", cyp_argv0, path.c_str());
  return ok;
}

int cyp_dump(const std::string& dir, const std::string& file, const char* descr, const std::vector<int64_t>& shape,
             const void* dptr, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  if (bytes) CYP_CHECK(cudaMemcpy(host.data(), dptr, bytes, cudaMemcpyDeviceToHost));
  return cyp_write_npy(dir + "/" + file, descr, shape, host.data(), bytes) ? 0 : 1;
}

bool cyp_parse_int(const char* s, int64_t* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

std::string cyp_json_escape(const char* s) {
  std::string o;
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') { o += '\\'; o += *s; }
    else if (static_cast<unsigned char>(*s) < 0x20) o += ' ';
    else o += *s;
  }
  return o;
}

}  // namespace
"""

# Only for a kernel with float parameters, so the harness of any other stays as it was.
_FLOAT_PRELUDE = r"""#include <cfloat>
namespace {
// A float parameter: a whole argument strtod reads (inf and nan too), within float range.
bool cyp_parse_float(const char* s, float* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  const double v = strtod(s, &end);
  if (*end || (errno == ERANGE && std::fabs(v) > 1.0) || (std::isfinite(v) && std::fabs(v) > FLT_MAX)) return false;
  *out = static_cast<float>(v);
  return true;
}
std::string cyp_json_float(float x) {  // JSON has no inf or nan
  if (!std::isfinite(x)) return "null";
  char b[32];
  snprintf(b, sizeof b, "%.9g", double(x));
  return b;
}
}  // namespace
"""


def render_main(ki: KernelInfo) -> str:
    """The text of ``main.cu`` for ``ki``."""
    n = ki.name
    sizes, floats = list(ki.sizes), list(ki.floats)
    usage = f"usage: %s {' '.join(sizes + floats)} [--iters N] [--warmup N] [--seed S] [--dump DIR]"
    L: list[str] = []
    w = L.append
    w(
        f"// main.cu — host harness for the cypressc kernel `{n}` (generated by cypressc; do not edit)."
    )
    w(f"//   ./{n} {' '.join(sizes + floats)} [--iters N] [--warmup N] [--seed S] [--dump DIR]")
    w("// Random inputs, NaN-poisoned outputs, one checked launch, warm-up, CUDA-event timing")
    w("// (median), one JSON line on stdout.  See cypressc/backend/harness.py for the details.")
    w(f'#define CYP_NAME "{n}"')
    w(_PRELUDE)
    if floats:
        w(_FLOAT_PRELUDE)
    w(f'#if __has_include("{n}.h")')
    w(f'#include "{n}.h"')
    w("#endif")
    ptr_args = [f"{'void*' if p.writes else 'const void*'} {sym(p.name)}" for p in ki.params]
    size_args = [f"int64_t {s}" for s in sizes]
    w(
        "// The launcher in "
        + n
        + ".cu (must match "
        + n
        + ".h; a mismatch is a compile error here)."
    )
    # the program's names spelled apart from the declaration's own (a tensor named `stream`)
    args = [*ptr_args, *(f"int64_t {sym(s)}" for s in sizes), *(f"float {sym(f)}" for f in floats)]
    w(choose_names(f'extern "C" int {n}_launch({", ".join([*args, "cudaStream_t stream"])});'))
    w("")
    # sizes struct and the expressions of the info, evaluated in C as the launcher would
    w("namespace cyp_expr {")
    w(
        "template <class A, class B> constexpr std::common_type_t<A, B> cdiv(A a, B b) { return (a + b - 1) / b; }"
    )
    w(
        "template <class A, class B> constexpr std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }"
    )
    w(
        "template <class A, class B> constexpr std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }"
    )
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
    w("")
    w("struct CypSizes {")
    for s in sizes:
        w(f"  int64_t {s} = 0;")
    w("};")
    if floats:  # a struct, like the sizes, so that no float name clashes with main's locals
        w("struct CypFloats {")
        for f in floats:
            w(f"  float {f} = 0.0f;")
        w("};")
    w("")
    w("int main(int argc, char** argv) {")
    w("  cyp_argv0 = argv[0];")
    w(f"  const char* usage = {_c_string(usage)};")
    w("  CypSizes s;")
    if floats:
        w("  CypFloats fl;")
    w("  int64_t iters = 30, warmup = 5, seed = 1234;")
    w("  const char* dump = nullptr;")
    w("  std::vector<const char*> pos;")
    w("  for (int i = 1; i < argc; ++i) {")
    w("    const std::string a = argv[i];")
    w('    if (a == "-h" || a == "--help") { printf(usage, argv[0]); printf("\\n"); return 0; }')
    w(
        "    auto val = [&](int64_t* out) { if (i + 1 >= argc || !cyp_parse_int(argv[i + 1], out)) {"
        ' fprintf(stderr, "%s: %s needs an integer\\n", argv[0], a.c_str()); return false; } ++i; return true; };'
    )
    w('    if (a == "--iters") { if (!val(&iters) || iters < 0) return 2; }')
    w('    else if (a == "--warmup") { if (!val(&warmup) || warmup < 0) return 2; }')
    w('    else if (a == "--seed") { if (!val(&seed)) return 2; }')
    w(
        '    else if (a == "--npy-selftest") {  // writes sample .npy files from host data, no GPU needed'
    )
    w("      if (i + 1 >= argc) return 2;")
    w("      const std::string d = argv[++i];")
    w(
        "      const uint16_t h[6] = {0x3c00, 0xc000, 0x0000, 0x7bff, 0x3800, 0xbc00};  // f16 1 -2 0 65504 .5 -1"
    )
    w("      const float f[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f};")
    w("      const int32_t k[4] = {-8, 7, 0, 123456};")
    w(
        '      return cyp_write_npy(d + "/f2.npy", "<f2", {2, 3}, h, sizeof h) && cyp_write_npy(d + "/f4.npy", "<f4", {5}, f, sizeof f)'
        ' && cyp_write_npy(d + "/i4.npy", "<i4", {1, 2, 2}, k, sizeof k) && cyp_write_npy(d + "/empty.npy", "<u2", {0, 4}, h, 0) ? 0 : 1;'
    )
    w("    }")
    w(
        '    else if (a == "--dump") { if (i + 1 >= argc) { fprintf(stderr, "%s: --dump needs a directory\\n", argv[0]); return 2; } dump = argv[++i]; }'
    )
    number = "a[1] >= '0' && a[1] <= '9'" + (
        " || a[1] == '.'" if floats else ""
    )  # -0.5, -.5: a float
    w(
        f"    else if (a.size() > 1 && a[0] == '-' && !({number})) {{"
        ' fprintf(stderr, "%s: unknown option %s\\n", argv[0], a.c_str()); fprintf(stderr, usage, argv[0]); fprintf(stderr, "\\n"); return 2; }'
    )
    w("    else pos.push_back(argv[i]);")
    w("  }")
    w(
        f'  if (pos.size() != {len(sizes) + len(floats)}) {{ fprintf(stderr, usage, argv[0]); fprintf(stderr, "\\n"); return 2; }}'
    )
    for i, sz in enumerate(sizes):
        w(
            f'  if (!cyp_parse_int(pos[{i}], &s.{sz}) || s.{sz} < 0) {{ fprintf(stderr, "%s: size {sz} must be a '
            f"non-negative integer, got '%s'\\n\", argv[0], pos[{i}]); return 2; }}"
        )
    json_sizes = (
        ' + ", " + '.join(f'"\\"{sz}\\": " + std::to_string(s.{sz})' for sz in sizes) or '""'
    )
    w(f'  cyp_sizes_json = std::string("{{") + {json_sizes} + "}}";')
    for i, f in enumerate(floats, len(sizes)):
        w(
            f'  if (!cyp_parse_float(pos[{i}], &fl.{f})) {{ fprintf(stderr, "%s: float {f} must be a number '
            f"(in float range), got '%s'\\n\", argv[0], pos[{i}]); return 2; }}"
        )
    if floats:
        json_floats = ' + ", " + '.join(f'"\\"{f}\\": " + cyp_json_float(fl.{f})' for f in floats)
        w(f'  const std::string cyp_floats_json = std::string("{{") + {json_floats} + "}}";')
    # the floats object after "sizes" in each JSON line: its format text, and printf's argument
    ffmt, fpass = (', \\"floats\\": %s', ", cyp_floats_json.c_str()") if floats else ("", "")
    sargs = ", ".join(f"s.{sz}" for sz in sizes)
    w("")
    w("  cudaDeviceProp prop;")
    w("  int dev = 0;")
    w("  CYP_CHECK(cudaGetDevice(&dev));")
    w("  CYP_CHECK(cudaGetDeviceProperties(&prop, dev));")
    w("")
    w("  // ---- parameters: inputs random, written-only outputs poisoned with NaN (0xff bytes)")
    for i, p in enumerate(ki.params):
        dt = DTYPES[p.dtype]
        w(
            f"  // {p.name}: {p.shape_str}{' read' if p.reads else ''}{' written' if p.writes else ''}"
        )
        w(f"  const std::vector<int64_t> shape_{p.name} = {{{_dims_c(ki, p.dims)}}};")
        w(f"  int64_t n_{p.name} = 1;")
        w(f"  for (int64_t d : shape_{p.name}) n_{p.name} *= d;")
        w(f"  const size_t bytes_{p.name} = size_t(n_{p.name}) * {dt.itemsize};")
        w(f"  void* d_{p.name} = nullptr;")
        w(f"  if (bytes_{p.name}) CYP_CHECK(cudaMalloc(&d_{p.name}, bytes_{p.name}));")
        if p.reads:
            w(
                f"  CYP_CHECK(cyp_random<{dt.ctype}>(d_{p.name}, n_{p.name}, cyp_mix(uint64_t(seed) * 1000003ull + {i})));"
            )
        else:
            w(f"  if (bytes_{p.name}) CYP_CHECK(cudaMemset(d_{p.name}, 0xff, bytes_{p.name}));")
    w("  CYP_CHECK(cudaDeviceSynchronize());")
    w("")
    w("  if (dump) {")
    w(
        "    if (mkdir(dump, 0755) != 0 && errno != EEXIST) {"
        ' fprintf(stderr, "%s: error: cannot create %s: %s\\n", argv[0], dump, strerror(errno)); return 1; }'
    )
    for p in ki.params:
        if p.reads and p.writes:
            w(
                f'    if (cyp_dump(dump, "{p.name}.in.npy", "{DTYPES[p.dtype].npy}", shape_{p.name}, d_{p.name}, bytes_{p.name})) return 1;'
            )
    w("  }")
    w("")
    call = (
        [f"d_{p.name}" for p in ki.params]
        + [f"s.{sz}" for sz in sizes]
        + [f"fl.{f}" for f in floats]
    )
    launch = f"{n}_launch({', '.join(call + ['stream'])})"
    w("  cudaStream_t stream;")
    w("  CYP_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));")
    w(f"  auto launch = [&]() {{ return static_cast<cudaError_t>({launch}); }};")
    w("")
    w("  // ---- one checked launch")
    w("  cudaError_t rc = launch();")
    w("  if (rc != cudaSuccess) {")
    w(
        f'    fprintf(stderr, "%s: error: {n}_launch(%s) returned %d: %s (%s)\\n", argv[0], cyp_sizes_json.c_str(), int(rc),'
    )
    w("            cudaGetErrorName(rc), cudaGetErrorString(rc));")
    w(f"    if (rc == cudaErrorInvalidValue) cyp_expr::explain({sargs});")
    w(
        f'    printf("{{\\"name\\": \\"%s\\", \\"sizes\\": %s{ffmt}, \\"error\\": \\"%s\\", \\"rc\\": %d}}\\n", CYP_NAME,'
        f" cyp_sizes_json.c_str(){fpass}, cudaGetErrorName(rc), int(rc));"
    )
    w("    return 1;")
    w("  }")
    w("  CYP_CHECK(cudaStreamSynchronize(stream));")
    w("  CYP_CHECK(cudaGetLastError());")
    w("")
    w("  // ---- NaN left in a floating output = an element the kernel did not write (or overflow)")
    w("  unsigned long long* d_count = nullptr;")
    w("  CYP_CHECK(cudaMalloc(&d_count, sizeof *d_count));")
    w("  std::string nan_json;")
    w("  unsigned long long nan_total = 0;")
    outs = [p for p in ki.params if p.writes]
    for p in outs:
        dt = DTYPES[p.dtype]
        if dt.floating:
            w("  {")
            w("    unsigned long long c = 0;")
            w(f"    CYP_CHECK(cyp_nans<{dt.ctype}>(d_{p.name}, n_{p.name}, d_count, &c));")
            w("    nan_total += c;")
            w(
                f'    nan_json += std::string(nan_json.empty() ? "" : ", ") + "\\"{p.name}\\": " + std::to_string(c);'
            )
            w("  }")
    w("")
    w("  if (dump) {")
    for p in ki.params:
        w(
            f'    if (cyp_dump(dump, "{p.name}.npy", "{DTYPES[p.dtype].npy}", shape_{p.name}, d_{p.name}, bytes_{p.name})) return 1;'
        )
    meta = {
        "name": n,
        "dtypes": {p.name: p.dtype for p in ki.params},
        "note": "bf16 arrays hold raw bits ('<u2'): (a.astype(np.uint32) << 16).view(np.float32)",
    }
    meta_head = json.dumps(meta)[:-1]  # without the closing brace; sizes follow
    w("    {")
    w('      const std::string path = std::string(dump) + "/meta.json";')
    w('      FILE* f = fopen(path.c_str(), "w");')
    w(
        '      if (!f) { fprintf(stderr, "%s: error: cannot write %s\\n", argv[0], path.c_str()); return 1; }'
    )
    w(
        f'      fprintf(f, "%s, \\"sizes\\": %s{ffmt}}}\\n", {_c_string(meta_head)}, cyp_sizes_json.c_str(){fpass});'
    )
    w("      fclose(f);")
    w("    }")
    w("  }")
    w("")
    w("  // ---- warm-up, then each timed launch between its own pair of events")
    w("  for (int64_t r = 0; r < warmup; ++r) CYP_CHECK(launch());")
    w("  std::vector<cudaEvent_t> ev(2 * size_t(iters));")
    w("  for (auto& e : ev) CYP_CHECK(cudaEventCreate(&e));")
    w("  for (int64_t r = 0; r < iters; ++r) {")
    w("    CYP_CHECK(cudaEventRecord(ev[2 * r], stream));")
    w("    CYP_CHECK(launch());")
    w("    CYP_CHECK(cudaEventRecord(ev[2 * r + 1], stream));")
    w("  }")
    w("  CYP_CHECK(cudaStreamSynchronize(stream));")
    w("  CYP_CHECK(cudaGetLastError());")
    w("  std::vector<float> t(size_t(iters), 0.0f);")
    w(
        "  for (int64_t r = 0; r < iters; ++r) CYP_CHECK(cudaEventElapsedTime(&t[r], ev[2 * r], ev[2 * r + 1]));"
    )
    w("  for (auto& e : ev) CYP_CHECK(cudaEventDestroy(e));")
    w("  std::sort(t.begin(), t.end());")
    w(
        "  const double ms = iters ? (iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2])) : 0.0;"
    )
    w(f"  const double flops = cyp_expr::flops({sargs});")
    w("  char num[64];")
    w(
        '  auto fmt = [&](double x, const char* f) { if (!std::isfinite(x) || !iters) return std::string("null");'
        " snprintf(num, sizeof num, f, x); return std::string(num); };"
    )
    w(
        f'  printf("{{\\"name\\": \\"%s\\", \\"sizes\\": %s{ffmt}, \\"ms\\": %s, \\"tflops\\": %s, \\"min_ms\\": %s, '
        '\\"max_ms\\": %s, \\"iters\\": %lld, \\"warmup\\": %lld, \\"flops\\": %.6g, \\"nan\\": {%s}, '
        '\\"device\\": \\"%s\\"}\\n",'
    )
    w(
        f'         CYP_NAME, cyp_sizes_json.c_str(){fpass}, fmt(ms, "%.5f").c_str(), fmt(ms > 0 ? flops / ms / 1e9 : 0.0, "%.2f").c_str(),'
    )
    w(
        '         fmt(iters ? t.front() : 0.0, "%.5f").c_str(), fmt(iters ? t.back() : 0.0, "%.5f").c_str(),'
    )
    w(
        "         (long long)iters, (long long)warmup, flops, nan_json.c_str(), cyp_json_escape(prop.name).c_str());"
    )
    w("  fflush(stdout);")
    w("")
    w("  CYP_CHECK(cudaStreamDestroy(stream));")
    w("  CYP_CHECK(cudaFree(d_count));")
    for p in ki.params:
        w(f"  if (d_{p.name}) CYP_CHECK(cudaFree(d_{p.name}));")
    w("  if (nan_total) {")
    w(
        '    fprintf(stderr, "%s: error: %llu NaN element(s) in the output(s) {%s} after the first launch '
        '(unwritten or overflowed)\\n", argv[0], nan_total, nan_json.c_str());'
    )
    w("    return 3;")
    w("  }")
    w("  return 0;")
    w("}")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------------
# Makefile
# --------------------------------------------------------------------------------------------

_MAKEFILE = r"""# Makefile for the cypressc kernel `@NAME@` (generated by cypressc; do not edit).
#   make                 ./@NAME@ (harness: main.cu + @NAME@.cu) and lib@NAME@.so (for cypressc.runtime)
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

$(NAME): main.cu $(NAME).cu $(wildcard $(NAME).h) | check-env
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
