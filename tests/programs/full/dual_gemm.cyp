"""Dual GEMM: D = A @ B1 + A @ B2 in one kernel (the Cypress paper's §5.2 Dual-GEMM, the core
of a gated linear unit).

A: M x K, B1 and B2: K x N, D: M x N, all row-major T (f16 or bf16); both products accumulate in f32.

Each thread block owns a U x V tile of D.  It keeps two f32 accumulators, clears both, and
in one sequential K loop issues both Tensor Core products on the same A tile, so the loads
of B1 and B2 and the two wgmma chains overlap.  Then it adds the second accumulator into the
first on the CUDA cores (task "add", split down to threads exactly like "clear") and
copies the sum out as T.  The mma / clear / copy trees are those of programs/gemm.cyp.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

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


# ---- C += X for two f32 accumulators: same distribution as "clear", per-thread adds
@task("add", Inner, reads=["C", "X"], writes=["C"])
def add_tile(C: tensor[2, f32], X: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Xp = partition_by_blocks(X, (M / WGS, N))
    for i in prange(WGS):
        launch("add", Cp[i, 0], Xp[i, 0])


@task("add", Inner, reads=["C", "X"], writes=["C"])
def add_inner(C: tensor[2, f32], X: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Xp = partition_by_mma(X, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("add", Cp[i], Xp[i])


@task("add", Leaf, reads=["C", "X"], writes=["C"])
def add_thread(C: tensor[2, f32], X: tensor[2, f32]):
    add(C, X)


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
