"""Dual GEMM: D = A @ B1 + A @ B2 in one kernel (the Cypress paper's §5.2 Dual-GEMM, the core
of a gated linear unit).

A: M x K, B1 and B2: K x N, D: M x N, all row-major T (f16 or bf16); both products accumulate in f32.

Each thread block owns a U x V tile of D.  It keeps two f32 accumulators, clears both, and
in one sequential K loop issues both Tensor Core products on the same A tile, so the loads
of B1 and B2 and the two wgmma chains overlap.  Then it adds the second accumulator into the
first on the CUDA cores (task "add", split down to threads exactly like "clear") and
copies the sum out as T.

The mma, clear, add and copy trees come from cypressc's library (cypressc/lib/hopper.cyp); the
program with every tree written out is tests/programs/full/dual_gemm.cyp.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

from hopper import mma, clear, add, copy  # block -> warpgroups -> warps -> threads

@task("dual_gemm", Inner, reads=["A", "B1", "B2"], writes=["D"])
def dual_gemm_host(D: tensor[(M, N), T], A: tensor[(M, K), T], B1: tensor[(K, N), T],
                   B2: tensor[(K, N), T]):
    U, V = tunable(int), tunable(int)
    Dp = partition_by_blocks(D, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    B1p = partition_by_blocks(B1, (K, V))
    B2p = partition_by_blocks(B2, (K, V))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("dual_gemm", Dp[i, j], Ap[i, 0], B1p[0, j], B2p[0, j])


@task("dual_gemm", Inner, reads=["A", "B1", "B2"], writes=["D"])
def dual_gemm_block(D: tensor[2, T], A: tensor[2, T], B1: tensor[2, T], B2: tensor[2, T]):
    W = tunable(int)
    M, N, K = D.shape[0], D.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    B1p = partition_by_blocks(B1, (W, N))
    B2p = partition_by_blocks(B2, (W, N))
    C1acc: tensor[2, f32] = make_tensor(M, N)
    C2acc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", C1acc)
    launch("clear", C2acc)
    for k in srange(cdiv(K, W)):
        launch("mma", C1acc, Ap[0, k], B1p[k, 0])
        launch("mma", C2acc, Ap[0, k], B2p[k, 0])
    launch("add", C1acc, C2acc)
    launch("copy", C1acc, D)
