// The tutorial's C++ leaf functions (call-external): cypressc calls each once per element of
// a thread's f32 accumulator fragment, in registers, written operands by reference, read
// ones by value.  NumPy twins for the CPU interpreters: ops.py.
#pragma once

namespace tutorial {

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// x = GELU(alpha * x + bias), tanh approximation (torch's gelu(approximate="tanh"));
// B is the bias's element type (__half or __nv_bfloat16)
template <class B>
__device__ __forceinline__ void bias_gelu(float& x, B bias, float alpha) {
  const float v = alpha * x + float(bias);
  x = 0.5f * v * (1.0f + tanh_approx(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

// s = cap * tanh(s * scale / cap): an attention score scaled, then soft-capped (Gemma 2)
__device__ __forceinline__ void softcap(float& s, float scale, float cap) {
  s = cap * tanh_approx(s * (scale / cap));
}

}  // namespace tutorial
