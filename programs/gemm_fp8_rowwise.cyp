"""C = diag(scale_a) · (A @ Bᵀ) · diag(scale_b) on FP8 operands: programs/gemm_fp8.cyp with a
scale per row of A and per column of C (``torch._scaled_mm``'s row-wise mode: scale_a M x 1,
scale_b 1 x N), applied to the f32 accumulator by a user C++ leaf before the epilogue.

A: M x K and B: N x K in F8 (e4m3 or e5m2), K-major; C: M x N in T (bf16 or f16); scale_a: M
and scale_b: N, f32, the dequantization scales of A's rows and B's rows (C's columns).  The
leaf scale_rows_cols (programs/ops/scales.cuh) reads scale_a per row (its dimension is named
like the accumulator's rows) and scale_b per column, each thread the elements of its own
fragment, from global memory.
"""

include("ops/scales.cuh")

F8 = dtype(f8e4m3, f8e5m2)  # the element type of A and B: --dtype F8=f8e5m2
T = dtype(bf16, f16)  # the element type of C: --dtype T=f16


@external("cypress_ops::scale_rows_cols", writes=["c"])
def scale_rows_cols(c: tensor[(R, S), f32], sa: tensor[(R,), f32], sb: tensor[(S,), f32]):
    """c = c * sa[r] * sb[s]: sa per row, sb per column."""


from hopper import clear, copy  # block -> warpgroups -> warps -> threads
from hopper_fp8 import mma  # C += A @ Bᵀ on FP8 operands (k32 wgmma, both K-major)


@task("gemm", Inner, reads=["A", "B", "scale_a", "scale_b"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(M, K), F8], B: tensor[(N, K), F8],
              scale_a: tensor[(M,), f32], scale_b: tensor[(N,), f32]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (V, K))
    sap = partition_by_blocks(scale_a, (U,))
    sbp = partition_by_blocks(scale_b, (V,))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[j, 0], sap[i], sbp[j])


@task("gemm", Inner, reads=["A", "B", "scale_a", "scale_b"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, F8], B: tensor[2, F8], scale_a: tensor[1, f32],
               scale_b: tensor[1, f32]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (N, W))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[0, k])
    launch("dequant", Cacc, scale_a, scale_b)
    launch("copy", Cacc, C)


# ---- C *= scale_a[r] * scale_b[c]: the warpgroups split the rows (and scale_a with them)
@task("dequant", Inner, reads=["C", "sa", "sb"], writes=["C"])
def dequant_tile(C: tensor[2, f32], sa: tensor[1, f32], sb: tensor[1, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    sap = partition_by_blocks(sa, (M / WGS,))
    for i in prange(WGS):
        launch("dequant", Cp[i, 0], sap[i], sb)


@task("dequant", Inner, reads=["C", "sa", "sb"], writes=["C"])
def dequant_inner(C: tensor[2, f32], sa: tensor[1, f32], sb: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("dequant", Cp[i], sa, sb)


@task("dequant", Leaf, reads=["C", "sa", "sb"], writes=["C"])
def dequant_thread(C: tensor[2, f32], sa: tensor[1, f32], sb: tensor[1, f32]):
    scale_rows_cols(C, sa, sb)
