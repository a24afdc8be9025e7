// main.cu — the host harness of a cypressc kernel (copied unchanged from cypressc/backend/runtime/main.cu
// by `cypressc build`; do not edit).  Everything kernel-specific is in main.h, which cypressc writes:
// the kernel's name, its launcher, its sizes, float parameters and tensor parameters as tables, and
// its flops and `requires` expressions.
//   ./NAME SIZE... FLOAT... [--iters N] [--warmup N] [--seed S] [--dump DIR]
// Random inputs, NaN-poisoned outputs, one checked launch, warm-up, CUDA-event timing
// (median), one JSON line on stdout.  See cypressc/backend/harness.py for the details.
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>
#include <sys/stat.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

// ---- the vocabulary main.h's tables are written in ------------------------------------------

// The element types a parameter may have (cypressc.abi.dtypes.DTYPES); cyp_typed maps each to
// its C++ type.
enum class CypType { f16, bf16, f32, i32, f8e4m3, f8e5m2 };

// One tensor parameter of the launcher, in the launcher's order.
struct CypParam {
  const char* name;
  const char* dtype;   // cypressc's name of the element type (f16, bf16, f32, i32)
  CypType type;        // the same, for cyp_typed
  const char* ctype;   // its C++ spelling, for error messages
  const char* npy;     // the NumPy descr --dump writes (bf16, fp8: raw bits, '<u2', '|u1')
  int itemsize;        // bytes per element
  bool floating;       // NaN-poisoned and NaN-counted when written only
  bool reads, writes;
  int first_dim, rank;  // its dimensions: cyp_kernel::kDims[first_dim, first_dim + rank)
};

// One dimension of a parameter: a size (its index among the sizes), or a fixed extent.
struct CypDim {
  int size;       // index into the sizes, or -1
  int64_t value;  // the extent when size is -1
};

// What the flops and `requires` expressions of main.h may call besides the sizes (cdiv is also
// the launcher's).
namespace cyp_expr {
template <class A, class B> constexpr std::common_type_t<A, B> cdiv(A a, B b) { return (a + b - 1) / b; }
template <class A, class B> constexpr std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }
template <class A, class B> constexpr std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
}  // namespace cyp_expr

#include "main.h"

#define CYP_CHECK(x)                                                                       \
  do {                                                                                     \
    cudaError_t cyp_e_ = (x);                                                              \
    if (cyp_e_ != cudaSuccess) return cyp_fail(#x, cyp_e_);                                \
  } while (0)

// CYP_CHECK for a call on one parameter: `what` (a std::string, built only on failure) is the
// call as the message shows it, with the parameter's name.
#define CYP_CHECK_AS(x, what)                                                              \
  do {                                                                                     \
    cudaError_t cyp_e_ = (x);                                                              \
    if (cyp_e_ != cudaSuccess) return cyp_fail((what).c_str(), cyp_e_);                    \
  } while (0)

namespace {

// ints, so that a loop over none compares no unsigned value with zero (a warning)
constexpr int kNumSizes = int(cyp_kernel::kSizes.size());
constexpr int kNumFloats = int(cyp_kernel::kFloats.size());
constexpr int kNumParams = int(cyp_kernel::kParams.size());

const char* cyp_argv0 = "";
std::string cyp_sizes_json;  // {"M": 1, ...}, for error lines

int cyp_fail(const char* what, cudaError_t e) {
  fprintf(stderr, "%s: error: %s failed: %s (%s)\n", cyp_argv0, what, cudaGetErrorName(e),
          cudaGetErrorString(e));
  printf("{\"name\": \"%s\", \"sizes\": %s, \"error\": \"%s\", \"rc\": %d}\n", CYP_NAME,
         cyp_sizes_json.c_str(), cudaGetErrorName(e), int(e));
  return 1;
}

// `text` with each '@' replaced by parameter `p`'s name and each '$' by its C++ type.
std::string cyp_said(const char* text, const CypParam& p) {
  std::string o;
  for (; *text; ++text) o += *text == '@' ? p.name : *text == '$' ? p.ctype : std::string(1, *text);
  return o;
}

// Call f with a null T* for the C++ type T of t (f's result is returned).
template <class F> cudaError_t cyp_typed(CypType t, F&& f) {
  switch (t) {
    case CypType::f16: return f(static_cast<__half*>(nullptr));
    case CypType::bf16: return f(static_cast<__nv_bfloat16*>(nullptr));
    case CypType::f32: return f(static_cast<float*>(nullptr));
    case CypType::i32: return f(static_cast<int32_t*>(nullptr));
    case CypType::f8e4m3: return f(static_cast<__nv_fp8_e4m3*>(nullptr));
    case CypType::f8e5m2: return f(static_cast<__nv_fp8_e5m2*>(nullptr));
  }
  return cudaErrorInvalidValue;
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

std::string cyp_json_escape(const char* s) {
  std::string o;
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') { o += '\\'; o += *s; }
    else if (static_cast<unsigned char>(*s) < 0x20) o += ' ';
    else o += *s;
  }
  return o;
}

// "usage: %s M N K alpha [--iters N] ...": a printf format of argv[0].
std::string cyp_usage() {
  std::string u = "usage: %s";
  for (const char* n : cyp_kernel::kSizes) u = u + " " + n;
  for (const char* n : cyp_kernel::kFloats) u = u + " " + n;
  return u + " [--iters N] [--warmup N] [--seed S] [--dump DIR]";
}

}  // namespace

int main(int argc, char** argv) {
  using cyp_kernel::kParams;
  cyp_argv0 = argv[0];
  const std::string usage_text = cyp_usage();
  const char* usage = usage_text.c_str();
  std::array<int64_t, kNumSizes> s{};
  std::array<float, kNumFloats> fl{};
  int64_t iters = 30, warmup = 5, seed = 1234;
  const char* dump = nullptr;
  std::vector<const char*> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") { printf(usage, argv[0]); printf("\n"); return 0; }
    auto val = [&](int64_t* out) { if (i + 1 >= argc || !cyp_parse_int(argv[i + 1], out)) { fprintf(stderr, "%s: %s needs an integer\n", argv[0], a.c_str()); return false; } ++i; return true; };
    if (a == "--iters") { if (!val(&iters) || iters < 0) return 2; }
    else if (a == "--warmup") { if (!val(&warmup) || warmup < 0) return 2; }
    else if (a == "--seed") { if (!val(&seed)) return 2; }
    else if (a == "--npy-selftest") {  // writes sample .npy files from host data, no GPU needed
      if (i + 1 >= argc) return 2;
      const std::string d = argv[++i];
      const uint16_t h[6] = {0x3c00, 0xc000, 0x0000, 0x7bff, 0x3800, 0xbc00};  // f16 1 -2 0 65504 .5 -1
      const float f[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f};
      const int32_t k[4] = {-8, 7, 0, 123456};
      return cyp_write_npy(d + "/f2.npy", "<f2", {2, 3}, h, sizeof h) && cyp_write_npy(d + "/f4.npy", "<f4", {5}, f, sizeof f) && cyp_write_npy(d + "/i4.npy", "<i4", {1, 2, 2}, k, sizeof k) && cyp_write_npy(d + "/empty.npy", "<u2", {0, 4}, h, 0) ? 0 : 1;
    }
    else if (a == "--dump") { if (i + 1 >= argc) { fprintf(stderr, "%s: --dump needs a directory\n", argv[0]); return 2; } dump = argv[++i]; }
    // -0.5 and -.5 are numbers (a float parameter's) where the kernel has float parameters
    else if (a.size() > 1 && a[0] == '-' && !((a[1] >= '0' && a[1] <= '9') || (kNumFloats > 0 && a[1] == '.'))) { fprintf(stderr, "%s: unknown option %s\n", argv[0], a.c_str()); fprintf(stderr, usage, argv[0]); fprintf(stderr, "\n"); return 2; }
    else pos.push_back(argv[i]);
  }
  if (pos.size() != size_t(kNumSizes + kNumFloats)) { fprintf(stderr, usage, argv[0]); fprintf(stderr, "\n"); return 2; }
  int at = 0;  // the positional argument read next
  for (const char* name : cyp_kernel::kSizes) {
    if (!cyp_parse_int(pos[at], &s[at]) || s[at] < 0) { fprintf(stderr, "%s: size %s must be a non-negative integer, got '%s'\n", argv[0], name, pos[at]); return 2; }
    ++at;
  }
  cyp_sizes_json = "{";
  for (int k = 0; k < kNumSizes; ++k)
    cyp_sizes_json += std::string(k ? ", " : "") + "\"" + cyp_kernel::kSizes[k] + "\": " + std::to_string(s[k]);
  cyp_sizes_json += "}";
  std::string floats_json;  // `, "floats": {...}` after "sizes" in each JSON line, or nothing
  for (const char* name : cyp_kernel::kFloats) {
    float& v = fl[at - kNumSizes];
    if (!cyp_parse_float(pos[at], &v)) { fprintf(stderr, "%s: float %s must be a number (in float range), got '%s'\n", argv[0], name, pos[at]); return 2; }
    floats_json += std::string(floats_json.empty() ? ", \"floats\": {" : ", ") + "\"" + name + "\": " + cyp_json_float(v);
    ++at;
  }
  if (!floats_json.empty()) floats_json += "}";

  cudaDeviceProp prop;
  int dev = 0;
  CYP_CHECK(cudaGetDevice(&dev));
  CYP_CHECK(cudaGetDeviceProperties(&prop, dev));

  // ---- parameters: inputs random, written-only outputs poisoned with NaN (0xff bytes)
  std::array<std::vector<int64_t>, kNumParams> shape;
  std::array<int64_t, kNumParams> n{};
  std::array<size_t, kNumParams> bytes{};
  std::array<void*, kNumParams> d{};
  for (int i = 0; i < kNumParams; ++i) {
    const CypParam& p = kParams[i];
    for (int k = p.first_dim; k < p.first_dim + p.rank; ++k) {
      const CypDim& dim = cyp_kernel::kDims[k];
      shape[i].push_back(dim.size >= 0 ? s[dim.size] : dim.value);
    }
    n[i] = 1;
    for (int64_t e : shape[i]) n[i] *= e;
    bytes[i] = size_t(n[i]) * p.itemsize;
    if (bytes[i]) CYP_CHECK_AS(cudaMalloc(&d[i], bytes[i]), cyp_said("cudaMalloc(&d_@, bytes_@)", p));
    if (p.reads) {
      const uint64_t pseed = cyp_mix(uint64_t(seed) * 1000003ull + i);
      CYP_CHECK_AS(cyp_typed(p.type, [&](auto* t) { return cyp_random<std::remove_pointer_t<decltype(t)>>(d[i], n[i], pseed); }),
                   cyp_said("cyp_random<$>(d_@, n_@, cyp_mix(uint64_t(seed) * 1000003ull + ", p) + std::to_string(i) + "))");
    } else {
      if (bytes[i]) CYP_CHECK_AS(cudaMemset(d[i], 0xff, bytes[i]), cyp_said("cudaMemset(d_@, 0xff, bytes_@)", p));
    }
  }
  CYP_CHECK(cudaDeviceSynchronize());

  if (dump) {
    if (mkdir(dump, 0755) != 0 && errno != EEXIST) { fprintf(stderr, "%s: error: cannot create %s: %s\n", argv[0], dump, strerror(errno)); return 1; }
    for (int i = 0; i < kNumParams; ++i)
      if (kParams[i].reads && kParams[i].writes && cyp_dump(dump, cyp_said("@.in.npy", kParams[i]), kParams[i].npy, shape[i], d[i], bytes[i])) return 1;
  }

  cudaStream_t stream;
  CYP_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto launch = [&]() { return cyp_kernel::launch(d, s, fl, stream); };

  // ---- one checked launch
  cudaError_t rc = launch();
  if (rc != cudaSuccess) {
    fprintf(stderr, "%s: error: %s_launch(%s) returned %d: %s (%s)\n", argv[0], CYP_NAME, cyp_sizes_json.c_str(), int(rc),
            cudaGetErrorName(rc), cudaGetErrorString(rc));
    if (rc == cudaErrorInvalidValue) std::apply(cyp_expr::explain, s);
    printf("{\"name\": \"%s\", \"sizes\": %s%s, \"error\": \"%s\", \"rc\": %d}\n", CYP_NAME,
           cyp_sizes_json.c_str(), floats_json.c_str(), cudaGetErrorName(rc), int(rc));
    return 1;
  }
  CYP_CHECK(cudaStreamSynchronize(stream));
  CYP_CHECK(cudaGetLastError());

  // ---- NaN left in a floating output = an element the kernel did not write (or overflow)
  unsigned long long* d_count = nullptr;
  CYP_CHECK(cudaMalloc(&d_count, sizeof *d_count));
  std::string nan_json;
  unsigned long long nan_total = 0;
  for (int i = 0; i < kNumParams; ++i) {
    const CypParam& p = kParams[i];
    if (!p.writes || !p.floating) continue;
    unsigned long long c = 0;
    CYP_CHECK_AS(cyp_typed(p.type, [&](auto* t) { return cyp_nans<std::remove_pointer_t<decltype(t)>>(d[i], n[i], d_count, &c); }),
                 cyp_said("cyp_nans<$>(d_@, n_@, d_count, &c)", p));
    nan_total += c;
    nan_json += std::string(nan_json.empty() ? "" : ", ") + "\"" + p.name + "\": " + std::to_string(c);
  }

  if (dump) {
    for (int i = 0; i < kNumParams; ++i)
      if (cyp_dump(dump, cyp_said("@.npy", kParams[i]), kParams[i].npy, shape[i], d[i], bytes[i])) return 1;
    {
      std::string meta = std::string("{\"name\": \"") + CYP_NAME + "\", \"dtypes\": {";
      for (int i = 0; i < kNumParams; ++i)
        meta += std::string(i ? ", " : "") + "\"" + kParams[i].name + "\": \"" + kParams[i].dtype + "\"";
      meta += "}, \"note\": \"bf16 arrays hold raw bits ('<u2'): (a.astype(np.uint32) << 16).view(np.float32); fp8 arrays too ('|u1'): torch.from_numpy(a).view(torch.float8_e4m3fn)\"";
      const std::string path = std::string(dump) + "/meta.json";
      FILE* f = fopen(path.c_str(), "w");
      if (!f) { fprintf(stderr, "%s: error: cannot write %s\n", argv[0], path.c_str()); return 1; }
      fprintf(f, "%s, \"sizes\": %s%s}\n", meta.c_str(), cyp_sizes_json.c_str(), floats_json.c_str());
      fclose(f);
    }
  }

  // ---- warm-up, then each timed launch between its own pair of events
  for (int64_t r = 0; r < warmup; ++r) CYP_CHECK(launch());
  std::vector<cudaEvent_t> ev(2 * size_t(iters));
  for (auto& e : ev) CYP_CHECK(cudaEventCreate(&e));
  for (int64_t r = 0; r < iters; ++r) {
    CYP_CHECK(cudaEventRecord(ev[2 * r], stream));
    CYP_CHECK(launch());
    CYP_CHECK(cudaEventRecord(ev[2 * r + 1], stream));
  }
  CYP_CHECK(cudaStreamSynchronize(stream));
  CYP_CHECK(cudaGetLastError());
  std::vector<float> t(size_t(iters), 0.0f);
  for (int64_t r = 0; r < iters; ++r) CYP_CHECK(cudaEventElapsedTime(&t[r], ev[2 * r], ev[2 * r + 1]));
  for (auto& e : ev) CYP_CHECK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  const double ms = iters ? (iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2])) : 0.0;
  const double flops = std::apply(cyp_expr::flops, s);
  char num[64];
  auto fmt = [&](double x, const char* f) { if (!std::isfinite(x) || !iters) return std::string("null"); snprintf(num, sizeof num, f, x); return std::string(num); };
  printf("{\"name\": \"%s\", \"sizes\": %s%s, \"ms\": %s, \"tflops\": %s, \"min_ms\": %s, \"max_ms\": %s, \"iters\": %lld, \"warmup\": %lld, \"flops\": %.6g, \"nan\": {%s}, \"device\": \"%s\"}\n",
         CYP_NAME, cyp_sizes_json.c_str(), floats_json.c_str(), fmt(ms, "%.5f").c_str(), fmt(ms > 0 ? flops / ms / 1e9 : 0.0, "%.2f").c_str(),
         fmt(iters ? t.front() : 0.0, "%.5f").c_str(), fmt(iters ? t.back() : 0.0, "%.5f").c_str(),
         (long long)iters, (long long)warmup, flops, nan_json.c_str(), cyp_json_escape(prop.name).c_str());
  fflush(stdout);

  CYP_CHECK(cudaStreamDestroy(stream));
  CYP_CHECK(cudaFree(d_count));
  for (int i = 0; i < kNumParams; ++i)
    if (d[i]) CYP_CHECK_AS(cudaFree(d[i]), cyp_said("cudaFree(d_@)", kParams[i]));
  if (nan_total) {
    fprintf(stderr, "%s: error: %llu NaN element(s) in the output(s) {%s} after the first launch (unwritten or overflowed)\n", argv[0], nan_total, nan_json.c_str());
    return 3;
  }
  return 0;
}
