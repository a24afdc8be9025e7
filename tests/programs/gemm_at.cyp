"""C = Aᵀ @ B with A given as the K x M matrix it is stored as (the shape of the attention
backward's dV += Pᵀ·dO and dK += dSᵀ·Q, and of a linear layer's weight gradient Xᵀ·dY).

A: K x M, B: K x N, C: M x N, all row-major T (f16 or bf16); the accumulator is f32.  A test
program (issue #38, slice S5): a BLOCK owns a U x V tile of C; each step of its loop over
W-row tiles of A and B runs C += A[k]ᵀ·B[k] with A's W x U tile read MN-major from shared
memory (``warpgroup_mma_at``, cypressc/lib/hopper_at.cyp), each warpgroup its U / WGS columns.
The clear and copy trees come from cypressc/lib/hopper.cyp.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

from hopper import clear, copy  # block -> warpgroups -> warps -> threads
from hopper_at import mma_at  # C += Aᵀ @ B, A read MN-major

@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(K, M), T], B: tensor[(K, N), T]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (K, U))
    Bp = partition_by_blocks(B, (K, V))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[0, i], Bp[0, j])


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[0]
    Ap = partition_by_blocks(A, (W, M))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma_at", Cacc, Ap[k, 0], Bp[k, 0])
    launch("copy", Cacc, C)
