"""C = scale_a * scale_b * (A @ Bᵀ) on FP8 operands: the linear layer of an FP8 network with
per-tensor scales (``torch._scaled_mm(A, B.T, scale_a, scale_b)``), the Hopper GEMM of
programs/gemm_bt.cyp with the f32 accumulator scaled in the epilogue.

A: M x K and B: N x K in F8 (e4m3 or e5m2), both contiguous along K, as an FP8 wgmma reads
both operands (K-major, k32 atoms); C: M x N in T (bf16 or f16); scale_a, scale_b: the f32
dequantization scales (A holds a / scale_a of the real matrix a).  The whole K accumulates in
the wgmma accumulator, whose FP8 sums keep about 14 bits (DeepSeek-V3 report §3.3.2), as
cuBLASLt's fast-accumulation mode (``use_fast_accum=True``); promoting each K block into f32
is the block-scaled program's two-level accumulation.
"""

F8 = dtype(f8e4m3, f8e5m2)  # the element type of A and B: --dtype F8=f8e5m2
T = dtype(bf16, f16)  # the element type of C: --dtype T=f16

from hopper import clear, copy  # block -> warpgroups -> warps -> threads
from hopper_fp8 import mma  # C += A @ Bᵀ on FP8 operands (k32 wgmma, both K-major)
from elementwise import scale

@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(M, K), F8], B: tensor[(N, K), F8],
              scale_a: float, scale_b: float):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (V, K))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[j, 0], scale_a, scale_b)


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, F8], B: tensor[2, F8], scale_a: float,
               scale_b: float):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (N, W))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[0, k])
    launch("scale", Cacc, scale_a * scale_b)
    launch("copy", Cacc, C)
