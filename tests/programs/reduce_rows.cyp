"""C += A @ B split along K (split-K): a test program of the reduction privilege (issue #38).

A: M x K and B: K x N row-major T, C: M x N f32.  The entry holds ``reduces=["C"]``: it adds
A·B into the C it is given.  Its blocks form a (row tile, column tile, K slice) grid; every
block computes the product of its S-wide slice of K into a U x V accumulator tile and adds
that tile into the one piece of C its row and column tile name, so the blocks of one piece
(one per K slice) reduce into the same elements, in any order.  A block holds ``reduces=``
on its piece: its private copy (in shared memory) starts undefined, the block writes it
whole (``store``) and dependence analysis adds it back with ``copy.add``.
"""

T = dtype(f16, bf16)

from hopper import mma, clear


@task("splitk", Inner, reads=["A", "B"], reduces=["C"])
def splitk_host(C: tensor[(M, N), f32], A: tensor[(M, K), T], B: tensor[(K, N), T]):
    U, V, S = tunable(int), tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, S))
    Bp = partition_by_blocks(B, (S, V))
    for i, j, s in prange(cdiv(M, U), cdiv(N, V), cdiv(K, S)):
        launch("partial", Cp[i, j], Ap[i, s], Bp[s, j])


@task("partial", Inner, reads=["A", "B"], reduces=["C"])
def partial_block(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("store", Cacc, C)


# ---- the accumulator tile into the block's private copy of its piece (f32 to f32)
@task("store", Inner, reads=["C"], writes=["D"])
def store_tile(C: tensor[2, f32], D: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("store", Cp[i, 0], Dp[i, 0])


@task("store", Inner, reads=["C"], writes=["D"])
def store_inner(C: tensor[2, f32], D: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("store", Cp[i], Dp[i])


@task("store", Leaf, reads=["C"], writes=["D"])
def store_thread(C: tensor[2, f32], D: tensor[2, f32]):
    copy(C, D)
