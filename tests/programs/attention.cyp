"""O = softmax(Q @ Kᵀ · 0.125) @ V for one head: the FlashAttention-2 main loop (online
softmax, issue #11) on tests/programs/chain_gemm.cyp's skeleton.

Q: M x D, K: N x D, V: N x D, O: M x D, all row-major T.  A BLOCK owns U query rows and
keeps its Q panel in shared memory; it loops over W-row tiles of K and V.  Its registers
hold the f32 output accumulator Oacc (U x D) and the running row statistics m (row max
of the scores) and l (row sum of the exponentials), one value per row.  Each step clears
S, runs S = Q·K[tile]ᵀ (wgmma, K-major B), the online softmax (new row max, the factor
alpha = exp2((m_old - m) · scale) that rescales O and l, P = exp2((S - m) · scale), l +=
row sums of P: the row reductions combine the 4 lanes that share an accumulator row), then
O += T(P)·V[tile] with P in registers.  After the loop O /= l.

The softmax scale is the literal 0.125 (1/sqrt(64)) and the log2(e) factor that turns
exp into exp2 is folded into it (SCALE below); N must be a multiple of W (the program does
not mask padding keys yet).
"""

T = dtype(f16, bf16)


@task("attn", Inner, reads=["Q", "K", "V"], writes=["O"])
def attn_host(O: tensor[(M, D), T], Q: tensor[(M, D), T], K: tensor[(N, D), T],
              V: tensor[(N, D), T]):
    U, E = tunable(int), tunable(int)
    Op = partition_by_blocks(O, (U, E))
    Qp = partition_by_blocks(Q, (U, E))
    for i in prange(cdiv(M, U)):
        launch("attn", Op[i, 0], Qp[i, 0], K, V)


@task("attn", Inner, reads=["Q", "K", "V"], writes=["O"])
def attn_block(O: tensor[2, T], Q: tensor[2, T], K: tensor[2, T], V: tensor[2, T]):
    W = tunable(int)
    U, E, N = O.shape[0], O.shape[1], K.shape[0]
    Kp = partition_by_blocks(K, (W, E))
    Vp = partition_by_blocks(V, (W, E))
    Oacc: tensor[2, f32] = make_tensor(U, E)
    m: tensor[1, f32] = make_tensor(U)
    l: tensor[1, f32] = make_tensor(U)
    launch("clear", Oacc)
    launch("init", m, l)
    for k in srange(cdiv(N, W)):
        S: tensor[2, f32] = make_tensor(U, W)
        P: tensor[2, T] = make_tensor(U, W)
        alpha: tensor[1, f32] = make_tensor(U)
        launch("clear", S)
        launch("mma", S, Q, Kp[k, 0])
        launch("softmax", Oacc, S, m, l, alpha)
        launch("convert", S, P)
        launch("mma_rs", Oacc, P, Vp[k, 0])
    launch("finish", Oacc, l)
    launch("store", Oacc, O)


# ---- S += Q Kᵀ (both from shared memory, K as the K-major B operand)
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


# ---- O += P V with P (the A operand) in registers
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


# ---- the online softmax of one step, on the accumulator layout's rows
@task("softmax", Inner, reads=["O", "S", "m", "l"], writes=["O", "S", "m", "l", "alpha"])
def softmax_tile(O: tensor[2, f32], S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32],
                 alpha: tensor[1, f32]):
    WGS = tunable(int)
    M, N, E = S.shape[0], S.shape[1], O.shape[1]
    Op = partition_by_blocks(O, (M / WGS, E))
    Sp = partition_by_blocks(S, (M / WGS, N))
    mp = partition_by_blocks(m, (M / WGS,))
    lp = partition_by_blocks(l, (M / WGS,))
    ap = partition_by_blocks(alpha, (M / WGS,))
    for i in prange(WGS):
        launch("softmax", Op[i, 0], Sp[i, 0], mp[i], lp[i], ap[i])


@task("softmax", Inner, reads=["O", "S", "m", "l"], writes=["O", "S", "m", "l", "alpha"])
def softmax_inner(O: tensor[2, f32], S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32],
                  alpha: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Op = partition_by_mma(O, MMA, PROC, "C")
    Sp = partition_by_mma(S, MMA, PROC, "C")
    mp = partition_by_mma(m, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    ap = partition_by_mma(alpha, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("softmax", Op[i], Sp[i], mp[i], lp[i], ap[i])


@task("softmax", Leaf, reads=["O", "S", "m", "l"], writes=["O", "S", "m", "l", "alpha"])
def softmax_thread(O: tensor[2, f32], S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32],
                   alpha: tensor[1, f32]):
    copy(m, alpha)
    warpgroup_row_max(m, S)
    exp2_diff(alpha, m, 0.18033688011112042)
    exp2_diff(S, m, 0.18033688011112042)
    scale_rows(l, alpha)
    warpgroup_row_sum(l, S)
    scale_rows(O, alpha)


# ---- m = -inf, l = 0
@task("init", Inner, writes=["m", "l"])
def init_tile(m: tensor[1, f32], l: tensor[1, f32]):
    WGS = tunable(int)
    M = m.shape[0]
    mp = partition_by_blocks(m, (M / WGS,))
    lp = partition_by_blocks(l, (M / WGS,))
    for i in prange(WGS):
        launch("init", mp[i], lp[i])


@task("init", Inner, writes=["m", "l"])
def init_inner(m: tensor[1, f32], l: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    mp = partition_by_mma(m, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("init", mp[i], lp[i])


@task("init", Leaf, writes=["m", "l"])
def init_thread(m: tensor[1, f32], l: tensor[1, f32]):
    fill(m, -1e30)
    fill(l, 0)


# ---- O /= l after the loop
@task("finish", Inner, reads=["O", "l"], writes=["O"])
def finish_tile(O: tensor[2, f32], l: tensor[1, f32]):
    WGS = tunable(int)
    M, E = O.shape[0], O.shape[1]
    Op = partition_by_blocks(O, (M / WGS, E))
    lp = partition_by_blocks(l, (M / WGS,))
    for i in prange(WGS):
        launch("finish", Op[i, 0], lp[i])


@task("finish", Inner, reads=["O", "l"], writes=["O"])
def finish_inner(O: tensor[2, f32], l: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Op = partition_by_mma(O, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("finish", Op[i], lp[i])


@task("finish", Leaf, reads=["O", "l"], writes=["O"])
def finish_thread(O: tensor[2, f32], l: tensor[1, f32]):
    div_rows(O, l)


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
