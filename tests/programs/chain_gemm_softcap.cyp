"""O = T(softcap(Q[:, :64] @ K[:, :64]ᵀ, 30)) @ V: tests/programs/chain_gemm.cyp with a user C++
leaf function between the two wgmmas of each step (call-external inside a main loop; the
header is found through `-I programs`, see tests/backend/test_external.py).

The rest is chain_gemm's docstring.  O = (Q[:, :64] @ K[:, :64]ᵀ) @ V: two chained Tensor Core products per step, the first one's
f32 result converted to T in registers and fed to the second as its register-sourced A operand
(attention without the softmax: S = Q·Kᵀ, P = T(S), O += P·V).

Q: M x D, K: N x D, V: N x E, O: M x E, all row-major T (K as attention stores it, so Q·Kᵀ
reads K's tiles as a K-major wgmma B operand: ``warpgroup_mma_bt``).  A test program (issue
#10 item 5): a BLOCK owns a U x X tile of O and keeps its Q panel (U x 64) in shared memory;
each step of its loop over W-row tiles of K and V clears S, runs S += Q·K[tile, :64]ᵀ (wgmma,
A and B from shared memory), converts S to T on the CUDA cores (SIMT between two wgmmas of one
step) and runs O += P·V[tile, :] with P in registers.  The K and V tiles are streamed on
separate channels: K's stage is free once the first product has retired, V's once the second
has.
"""

include("ops/scores.cuh")

T = dtype(f16, bf16)


@external("cypress_ops::softcap", writes=["s"])
def softcap(s: tensor[2, f32], cap: float):
    """s = cap * tanh(s / cap), elementwise."""


@task("chain", Inner, reads=["Q", "K", "V"], writes=["O"])
def chain_host(O: tensor[(M, E), T], Q: tensor[(M, D), T], K: tensor[(N, D), T],
               V: tensor[(N, E), T]):
    U, X = tunable(int), tunable(int)
    Op = partition_by_blocks(O, (U, X))
    Qp = partition_by_blocks(Q, (U, 64))
    Vp = partition_by_blocks(V, (N, X))
    for i, j in prange(cdiv(M, U), cdiv(E, X)):
        launch("chain", Op[i, j], Qp[i, 0], K, Vp[0, j])


@task("chain", Inner, reads=["Q", "K", "V"], writes=["O"])
def chain_block(O: tensor[2, T], Q: tensor[2, T], K: tensor[2, T], V: tensor[2, T]):
    W = tunable(int)
    U, X, N = O.shape[0], O.shape[1], V.shape[0]
    Kp = partition_by_blocks(K, (W, 64))
    Vp = partition_by_blocks(V, (W, X))
    Oacc: tensor[2, f32] = make_tensor(U, X)
    launch("clear", Oacc)
    for k in srange(cdiv(N, W)):
        S: tensor[2, f32] = make_tensor(U, W)
        P: tensor[2, T] = make_tensor(U, W)
        launch("clear", S)
        launch("mma", S, Q, Kp[k, 0])
        launch("score", S)
        launch("convert", S, P)
        launch("mma_rs", Oacc, P, Vp[k, 0])
    launch("store", Oacc, O)


@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, A.shape[1]))
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
    warpgroup_mma_bt(MMA, C, A, B)


# ---- the same product with A from registers: its own task, so that the mapping can place A
@task("mma_rs", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_rs_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, A.shape[1]))
    for i in prange(WGS):
        launch("mma_rs", Cp[i, 0], Ap[i, 0], B)


@task("mma_rs", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_rs_inner(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma_rs", Cp[i], Ap[i], Bp[i])


@task("mma_rs", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_rs_thread(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    MMA = tunable(atom)
    warpgroup_mma(MMA, C, A, B)


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


@task("convert", Inner, reads=["C"], writes=["D"])
def convert_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("convert", Cp[i, 0], Dp[i, 0])


@task("convert", Inner, reads=["C"], writes=["D"])
def convert_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("convert", Cp[i], Dp[i])


@task("convert", Leaf, reads=["C"], writes=["D"])
def convert_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)


# ---- the epilogue: the same conversion into global memory
@task("store", Inner, reads=["C"], writes=["D"])
def store_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("store", Cp[i, 0], Dp[i, 0])


@task("store", Inner, reads=["C"], writes=["D"])
def store_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("store", Cp[i], Dp[i])


@task("store", Leaf, reads=["C"], writes=["D"])
def store_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)


# ---- S = softcap(S, 30): the user's C++ on each thread's fragment, inside the main loop
@task("score", Inner, reads=["S"], writes=["S"])
def score_tile(S: tensor[2, f32]):
    WGS = tunable(int)
    M, N = S.shape[0], S.shape[1]
    Sp = partition_by_blocks(S, (M / WGS, N))
    for i in prange(WGS):
        launch("score", Sp[i, 0])


@task("score", Inner, reads=["S"], writes=["S"])
def score_inner(S: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Sp = partition_by_mma(S, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("score", Sp[i])


@task("score", Leaf, reads=["S"], writes=["S"])
def score_thread(S: tensor[2, f32]):
    softcap(S, 30.0)
