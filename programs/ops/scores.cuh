// A user C++ leaf function applied inside a main loop (call-external, Cypress paper §3.2):
// logit soft-capping as in Gemma 2, s = cap * tanh(s / cap), on each thread's f32
// accumulator fragment of S = Q @ K^T before it is converted and fed to the next wgmma
// (tests/programs/chain_gemm_softcap.cyp).  NumPy reference: scores.py.
#pragma once

namespace cypress_ops {

__device__ __forceinline__ void softcap(float& s, float cap) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(s * __frcp_rn(cap)));
  s = cap * t;
}

}  // namespace cypress_ops
