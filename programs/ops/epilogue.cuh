// User C++ leaf functions for programs/gemm_epilogue.cyp (the Cypress paper's call-external,
// §3.2).  cypressc calls each once per element of a thread's accumulator fragment, in
// registers, inside the generated kernel: written operands by reference, read ones by value.
// Bias and activation are fused into the GEMM's epilogue, so C is written once.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace cypress_ops {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// GELU, tanh approximation (PyTorch's gelu(approximate="tanh")):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  tanh.approx.f32 (sm_75+, max rel.
// error ~2^-11) keeps the epilogue off the slow libdevice tanh; the result is rounded
// to 16 bits anyway.
__device__ __forceinline__ float tanh_fast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class B>
__device__ __forceinline__ void bias_gelu(float& x, B bias) {
  const float v = x + to_float(bias);
  x = 0.5f * v * (1.0f + tanh_fast(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

// SiLU (swish): v * sigmoid(v) = v / (1 + exp(-v)), with the fast exp and divide.
template <class B>
__device__ __forceinline__ void bias_silu(float& x, B bias) {
  const float v = x + to_float(bias);
  x = __fdividef(v, 1.0f + __expf(-v));
}

}  // namespace cypress_ops
