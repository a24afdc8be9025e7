// Dequantization scales of FP8 GEMMs, applied to the f32 accumulator in the epilogue
// (programs/gemm_fp8_rowwise.cyp).  NumPy reference: scales.py.
#pragma once

namespace cypress_ops {

// c = c * sa * sb: A's scale of this element's row and B's of its column (torch._scaled_mm's
// row-wise mode: scale_a of shape M x 1, scale_b of shape 1 x N)
template <class SA, class SB>
__device__ __forceinline__ void scale_rows_cols(float& c, SA sa, SB sb) {
  c *= static_cast<float>(sa) * static_cast<float>(sb);
}

// c += t * sa * sb: one K block's product t promoted into the f32 accumulator c with A's scale
// of this row and B's scale of this element's 128 x 128 block (the two-level accumulation of
// DeepSeek-V3's FP8 GEMMs: the Tensor Core's FP8 sums keep about 14 bits, so each K block's
// sum leaves the wgmma accumulator before it grows long)
template <class SA, class SB>
__device__ __forceinline__ void promote(float& c, float t, SA sa, SB sb) {
  c = fmaf(t, static_cast<float>(sa) * static_cast<float>(sb), c);
}

}  // namespace cypress_ops
