"""C += A @ B with every main-loop step adding its product into a different row tile of C: a
test program of a reduction inside the main loop (issue #38), the shape of FlashAttention-3's
dQ (for each query block i of a key/value block's loop, dQ[i] += dS_i · K).

A: M x K and B: K x N row-major T, C: M x N f32.  The entry holds ``reduces=["C"]``.  Its
blocks form a (K slice, column tile) grid: block (s, j) keeps its S x V panel of B in shared
memory and walks the W-row tiles of A's slice s; step i computes the W x V product
P = A[i, s] · B[s, j] and adds it into the tile C[i, j] (its ``store`` writes the block's
private copy of C piece by piece, one row tile per step).  The blocks of one column tile (one
per K slice) add into the same elements, in any order.  S is one K tile of the product.
"""

T = dtype(f16, bf16)

from hopper import mma, clear


@task("steps", Inner, reads=["A", "B"], reduces=["C"])
def steps_host(C: tensor[(M, N), f32], A: tensor[(M, K), T], B: tensor[(K, N), T]):
    S, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (M, V))
    Ap = partition_by_blocks(A, (M, S))
    Bp = partition_by_blocks(B, (S, V))
    for s, j in prange(cdiv(K, S), cdiv(N, V)):
        launch("steps", Cp[0, j], Ap[0, s], Bp[s, j])


@task("steps", Inner, reads=["A", "B"], reduces=["C"])
def steps_block(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, V, S = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (W, S))
    Cp = partition_by_blocks(C, (W, V))
    for i in srange(cdiv(M, W)):
        P: tensor[2, f32] = make_tensor(W, V)
        launch("clear", P)
        launch("mma", P, Ap[i, 0], B)
        launch("store", P, Cp[i, 0])


# ---- the product tile into the block's private copy of its row tile (f32 to f32)
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
