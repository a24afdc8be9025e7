// corpus: a header whose NumPy reference (noref.py) lacks the function
#pragma once

namespace corpus_ops {

__device__ __forceinline__ void add_bias(float& x, float bias) { x += bias; }

}  // namespace corpus_ops
