"""C = A @ B with each block's tile split among its warpgroups by columns (issue #38): the
bundled gemm's program; the mapping picks the library's column variants (template
`wgmma_cols`: mma_cols, clear_cols, copy_cols), so each consumer warpgroup reads its own
columns of the B stage (a per-warpgroup wgmma descriptor) and stores its own columns of C.

A: M x K, B: K x N, C: M x N, row-major T; f32 accumulators.
"""

T = dtype(f16, bf16)

from hopper import mma, clear, copy
from hopper_cols import mma, clear, copy  # the `_cols` block variants the mapping picks


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(M, K), T], B: tensor[(K, N), T]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (K, V))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("copy", Cacc, C)
