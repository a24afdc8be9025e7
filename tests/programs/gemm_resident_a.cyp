"""C = A[:, :128] @ B[:128, :] (= A @ B for K <= 128) with each block's A row panel resident in
shared memory: the block copies its 64 x 128 panel of A in once, before its K loop, and every
step of the loop multiplies a 64-column slice of that panel with a streamed tile of B.

A test program (issue #10 item 5): a GLOBAL->SHARED copy before the main loop, like
FlashAttention's Q tile, loaded once per block.  The panel width is the program's constant 128,
not a tunable, so that the mapping changes speed, never results.
"""

@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[(M, N), f16], A: tensor[(M, K), f16], B: tensor[(K, N), f16]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, 128))
    Bp = partition_by_blocks(B, (128, V))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("copy", Cacc, C)


@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_inner(C: tensor[2, f32], A: tensor[2, f16], B: tensor[2, f16]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma", Cp[i], Ap[i], Bp[i])


@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, f16], B: tensor[2, f16]):
    MMA = tunable(atom)
    warpgroup_mma(MMA, C, A, B)


@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("clear", Cp[i])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)


@task("copy", Inner, reads=["C"], writes=["D"])
def copy_inner(C: tensor[2, f32], D: tensor[2, f16]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("copy", Cp[i], Dp[i])


@task("copy", Leaf, reads=["C"], writes=["D"])
def copy_thread(C: tensor[2, f32], D: tensor[2, f16]):
    copy(C, D)
