// User C++ leaf functions of the attention backward on a key-major score tile (Sᵀ = K·Qᵀ: rows
// are keys, columns are queries, so the per-query vectors LSE and D are per-column vectors):
// Pᵀ = exp(Sᵀ·scale − LSE[q]) and dSᵀ = Pᵀ ∘ (dPᵀ − D[q]) (FlashAttention-3's SdP_swapAB).
// NumPy reference: attn_bwd.py.
#pragma once

namespace cypress_ops {

// s = exp(s * scale - lse): natural-log LSE as the forward returns it, through the hardware's
// approximate exp2 (ex2.approx.ftz, as FlashAttention compiles exp2f with --use_fast_math;
// exp2f proper handles subnormal results with four more instructions per element)
template <class V>
__device__ __forceinline__ void probs_t(float& s, V lse, float scale) {
  constexpr float kLog2e = 1.4426950408889634f;
  s = cypress::ex2(fmaf(s, scale * kLog2e, -static_cast<float>(lse) * kLog2e));
}

// ds = p * (dp - d)
template <class V>
__device__ __forceinline__ void dscores_t(float& ds, float p, V d) {
  ds = p * (ds - static_cast<float>(d));
}

}  // namespace cypress_ops
