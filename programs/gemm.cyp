"""C = A @ B: the Cypress paper's Fig. 5 Hopper GEMM.

A: M x K, B: K x N, C: M x N, all row-major T (f16 or bf16); the accumulator is f32 (task "mma").
The mma, clear and copy trees come from cypressc's library (cypressc/lib/hopper.cyp); the
program with them written out is tests/programs/full/gemm.cyp.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

from hopper import mma, clear, copy  # block -> warpgroups -> warps -> threads

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
