"""Batched GEMM: C[l] = A[l] @ B[l] for every l < L (the Cypress paper's §5.2 Batched-GEMM).

A: L x M x K, B: L x K x N, C: L x M x N, all row-major T (f16 or bf16); each product accumulates in f32.

The batch is peeled off on the HOST with ``partition_by_slices(T, 0)``: its piece ``Ts[l]``
is the rank-2 matrix ``T[l, :, :]``.  A first HOST-level variant (task "batched_gemm") loops
over the batch in a prange and launches the ordinary 2-D "gemm" task on each slice; from
there on the program is programs/gemm.cyp unchanged: a second HOST-level instance tiles the
slice into U x V blocks, each block clears an f32 accumulator, runs the K loop on the Tensor
Core (block -> warpgroups -> warps -> threads) and copies the accumulator out as T.
The batch, row and column loops are all parallel, so the kernel's grid is L x M/U x N/V.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

# ---- the batch: one 2-D GEMM per slice
@task("batched_gemm", Inner, reads=["A", "B"], writes=["C"])
def batched_gemm_host(C: tensor[(L, M, N), T], A: tensor[(L, M, K), T], B: tensor[(L, K, N), T]):
    Cs = partition_by_slices(C, 0)
    As = partition_by_slices(A, 0)
    Bs = partition_by_slices(B, 0)
    for l in prange(L):
        launch("gemm", Cs[l], As[l], Bs[l])


# ---- one GEMM: U x V output tiles, one per thread block
@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T]):
    U, V = tunable(int), tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
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


# ---- C += A @ B on the Tensor Core: block -> warpgroups -> warps -> threads
@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, K))
    for i in prange(WGS):
        launch("mma", Cp[i, 0], Ap[i, 0], B)


@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_inner(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma", Cp[i], Ap[i], Bp[i])


@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    MMA = tunable(atom)
    warpgroup_mma(MMA, C, A, B)


# ---- C = 0 for the f32 accumulator
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("clear", Cp[i, 0])


@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("clear", Cp[i])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)


# ---- D = C converted to T: the epilogue
@task("copy", Inner, reads=["C"], writes=["D"])
def copy_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("copy", Cp[i, 0], Dp[i, 0])


@task("copy", Inner, reads=["C"], writes=["D"])
def copy_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("copy", Cp[i], Dp[i])


@task("copy", Leaf, reads=["C"], writes=["D"])
def copy_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)
