// main.cu — host harness for gemm_target.cu (the shape of build/<name>/main.cu in DESIGN.md §6).
//   ./gemm_main M N K [--time]     random inputs, NaN-poisoned output, CPU (double) reference check
// Built together with gemm_target.cu; used on the device for compute-sanitizer runs.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" int gemm_launch(const void* A, const void* B, void* C, int M, int N, int K, cudaStream_t s);
extern "C" const char* gemm_config();

#ifdef CYP_BF16
using T = __nv_bfloat16;
static T to_t(float x) { return __float2bfloat16(x); }
static float from_t(T x) { return __bfloat162float(x); }
#else
using T = __half;
static T to_t(float x) { return __float2half(x); }
static float from_t(T x) { return __half2float(x); }
#endif

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  printf("{\"error\": \"%s at %s:%d\"}\n", cudaGetErrorString(e_), __FILE__, __LINE__); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s M N K [--time]\n", argv[0]); return 2; }
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
  const bool timeit = argc > 4 && !strcmp(argv[4], "--time");
  std::vector<T> hA(size_t(M) * K), hB(size_t(K) * N), hC(size_t(M) * N);
  srand(1234);
  for (auto& x : hA) x = to_t(float(rand()) / RAND_MAX * 2.f - 1.f);
  for (auto& x : hB) x = to_t(float(rand()) / RAND_MAX * 2.f - 1.f);
  T *dA, *dB, *dC;
  CK(cudaMalloc(&dA, hA.size() * 2)); CK(cudaMalloc(&dB, hB.size() * 2)); CK(cudaMalloc(&dC, hC.size() * 2));
  CK(cudaMemcpy(dA, hA.data(), hA.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, hB.data(), hB.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dC, 0xff, hC.size() * 2));  // 0xffff is NaN in f16 and bf16: unwritten elements show
  CK((cudaError_t)gemm_launch(dA, dB, dC, M, N, K, 0));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hC.data(), dC, hC.size() * 2, cudaMemcpyDeviceToHost));

  double num = 0, den = 0; long nan = 0;
  if (!timeit || size_t(M) * N * K <= (size_t(1) << 30)) {
    std::vector<double> row(N);
    for (int i = 0; i < M; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int k = 0; k < K; ++k) {
        const double a = from_t(hA[size_t(i) * K + k]);
        for (int j = 0; j < N; ++j) row[j] += a * from_t(hB[size_t(k) * N + j]);
      }
      for (int j = 0; j < N; ++j) {
        const double c = from_t(hC[size_t(i) * N + j]);
        if (std::isnan(c)) ++nan;
        num += (c - row[j]) * (c - row[j]); den += row[j] * row[j];
      }
    }
  }
  double ms = 0;
  if (timeit) {
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int r = 0; r < 25; ++r) {
      CK(cudaEventRecord(e0));
      CK((cudaError_t)gemm_launch(dA, dB, dC, M, N, K, 0));
      CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
      float x; CK(cudaEventElapsedTime(&x, e0, e1)); if (r >= 5) t.push_back(x);
    }
    std::sort(t.begin(), t.end()); ms = t[t.size() / 2];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : 0;
  printf("{\"config\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"rel_err\": %.3e, \"nan\": %ld, \"ms\": %.4f, \"tflops\": %.1f}\n",
         gemm_config(), M, N, K, rel, nan, ms, ms > 0 ? 2.0 * M * N * K / ms / 1e9 : 0.0);
  return (nan == 0 && rel < 1e-2) ? 0 : 1;
}
