"""FlashAttention-2 forward (the Cypress paper's §5.3 attention; issue #11):
O = softmax(Q @ Kᵀ · scale) @ V per (batch, head), and LSE, the natural log-sum-exp of each
softmax row (what a backward pass needs).

Q, O: B x H x M x D; K, V: B x HK x N x D, all row-major T (f16 or bf16); LSE: B x H x M f32.
Grouped-query attention: the H query heads share the HK key/value heads in groups of
H / HK (query head h reads key/value head h // (H / HK)); H must be a multiple of HK.
``scale`` is the softmax scale (1/sqrt(D) for the usual attention), a float argument of the
kernel; ``causal`` (an int, 0 or 1) masks key j for query i when j > i (the top-left aligned
mask of torch's ``is_causal``), and a query block's key loop stops at the diagonal.  M and N
are any lengths: keys past N are masked, rows past M are never written.  D may be below the
mapping's E (the padding columns of Q, K and V read as zeros), not above.

A BLOCK owns U query rows of one (batch, head) and keeps its Q panel in shared memory; it
loops over W-row tiles of K and V (a pipeline of shared stages).  Its registers hold the f32
output accumulator Oacc (U x E) and the row statistics m (the running row max of the raw
scores) and l (the running row sum of the exponentials).  Each step clears S, runs
S = Q·K[tile]ᵀ (wgmma, K-major B), masks the keys past N and, if causal, above the diagonal,
then the online softmax: the new row max, alpha = exp2((m_old - m)·s) rescales O and l,
P = exp2((S - m)·s), l += the row sums of P, where s = scale·log2(e) turns exp into exp2; the
row reductions combine the 4 lanes that share an accumulator row.  Then O += T(P)·V[tile]
with P in registers as the wgmma A operand.  After the loop O /= l, LSE = m·scale + ln(l).
"""

T = dtype(f16, bf16)  # the element type of Q, K, V and O: --dtype T=bf16


# ---- the batch and the heads: one 2-D attention per (b, h), key/value head h // (H / HK)
@task("attention", Inner, reads=["Q", "K", "V"], writes=["O", "LSE"])
def attention_host(O: tensor[(B, H, M, D), T], LSE: tensor[(B, H, M), f32], Q: tensor[(B, H, M, D), T],
                   K: tensor[(B, HK, N, D), T], V: tensor[(B, HK, N, D), T], scale: float, causal: int):
    Os, Ls, Qs = partition_by_slices(O, 0), partition_by_slices(LSE, 0), partition_by_slices(Q, 0)
    Ks, Vs = partition_by_slices(K, 0), partition_by_slices(V, 0)
    for b in prange(B):
        launch("heads", Os[b], Ls[b], Qs[b], Ks[b], Vs[b], scale, causal)


@task("heads", Inner, reads=["Q", "K", "V"], writes=["O", "LSE"])
def heads_host(O: tensor[3, T], LSE: tensor[2, f32], Q: tensor[3, T], K: tensor[3, T], V: tensor[3, T],
               scale: float, causal: int):
    G = O.shape[0] / K.shape[0]
    Os, Ls, Qs = partition_by_slices(O, 0), partition_by_slices(LSE, 0), partition_by_slices(Q, 0)
    Ks, Vs = partition_by_slices(K, 0), partition_by_slices(V, 0)
    for h in prange(O.shape[0]):
        launch("attn", Os[h], Ls[h], Qs[h], Ks[h // G], Vs[h // G], scale, causal)


# ---- one head: U-row query blocks
@task("attn", Inner, reads=["Q", "K", "V"], writes=["O", "LSE"])
def attn_host(O: tensor[2, T], LSE: tensor[1, f32], Q: tensor[2, T], K: tensor[2, T], V: tensor[2, T],
              scale: float, causal: int):
    U, E = tunable(int), tunable(int)
    M = O.shape[0]
    Op = partition_by_blocks(O, (U, E))
    Lp = partition_by_blocks(LSE, (U,))
    Qp = partition_by_blocks(Q, (U, E))
    for i in prange(cdiv(M, U)):
        launch("attn_block", Op[i, 0], Lp[i], Qp[i, 0], K, V, scale, causal, i * U)


@task("attn_block", Inner, reads=["Q", "K", "V"], writes=["O", "LSE"])
def attn_block(O: tensor[2, T], LSE: tensor[1, f32], Q: tensor[2, T], K: tensor[2, T], V: tensor[2, T],
               scale: float, causal: int, q0: int):
    W = tunable(int)
    U, E, N = O.shape[0], O.shape[1], K.shape[0]
    Kp = partition_by_blocks(K, (W, E))
    Vp = partition_by_blocks(V, (W, E))
    Oacc: tensor[2, f32] = make_tensor(U, E)
    m: tensor[1, f32] = make_tensor(U)
    l: tensor[1, f32] = make_tensor(U)
    launch("clear", Oacc)
    launch("init", m, l)
    # causal: the keys up to the block's last query row; else all N (the min picks N)
    for k in srange(cdiv(min(N, q0 + U + (1 - causal) * N), W)):
        S: tensor[2, f32] = make_tensor(U, W)
        P: tensor[2, T] = make_tensor(U, W)
        alpha: tensor[1, f32] = make_tensor(U)
        launch("clear", S)
        launch("mma", S, Q, Kp[k, 0])
        launch("mask", S, N - k * W, q0 - k * W + (1 - causal) * (N + W))
        launch("softmax", Oacc, S, m, l, alpha, scale * 1.4426950408889634)
        launch("convert", S, P)
        launch("mma_rs", Oacc, P, Vp[k, 0])
    launch("finish", Oacc, LSE, m, l, scale)
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


# ---- the keys past N and, if causal, above the diagonal: -inf (n: the tile's valid keys,
# d: the tile's first query row minus its first key column)
@task("mask", Inner, reads=["S"], writes=["S"])
def mask_tile(S: tensor[2, f32], n: int, d: int):
    WGS = tunable(int)
    M, N = S.shape[0], S.shape[1]
    Sp = partition_by_blocks(S, (M / WGS, N))
    for i in prange(WGS):
        launch("mask", Sp[i, 0], n, d + i * (M / WGS))


@task("mask", Inner, reads=["S"], writes=["S"])
def mask_inner(S: tensor[2, f32], n: int, d: int):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Sp = partition_by_mma(S, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("mask", Sp[i], n, d)


@task("mask", Leaf, reads=["S"], writes=["S"])
def mask_thread(S: tensor[2, f32], n: int, d: int):
    mask_columns(S, n)
    mask_causal(S, d)


# ---- the online softmax of one step, on the accumulator layout's rows (s = scale·log2 e)
@task("softmax", Inner, reads=["O", "S", "m", "l"], writes=["O", "S", "m", "l", "alpha"])
def softmax_tile(O: tensor[2, f32], S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32],
                 alpha: tensor[1, f32], s: float):
    WGS = tunable(int)
    M, N, E = S.shape[0], S.shape[1], O.shape[1]
    Op = partition_by_blocks(O, (M / WGS, E))
    Sp = partition_by_blocks(S, (M / WGS, N))
    mp = partition_by_blocks(m, (M / WGS,))
    lp = partition_by_blocks(l, (M / WGS,))
    ap = partition_by_blocks(alpha, (M / WGS,))
    for i in prange(WGS):
        launch("softmax", Op[i, 0], Sp[i, 0], mp[i], lp[i], ap[i], s)


@task("softmax", Inner, reads=["O", "S", "m", "l"], writes=["O", "S", "m", "l", "alpha"])
def softmax_inner(O: tensor[2, f32], S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32],
                  alpha: tensor[1, f32], s: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Op = partition_by_mma(O, MMA, PROC, "C")
    Sp = partition_by_mma(S, MMA, PROC, "C")
    mp = partition_by_mma(m, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    ap = partition_by_mma(alpha, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("softmax", Op[i], Sp[i], mp[i], lp[i], ap[i], s)


@task("softmax", Leaf, reads=["O", "S", "m", "l"], writes=["O", "S", "m", "l", "alpha"])
def softmax_thread(O: tensor[2, f32], S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32],
                   alpha: tensor[1, f32], s: float):
    copy(m, alpha)
    warpgroup_row_max(m, S)
    exp2_diff(alpha, m, s)
    exp2_diff(S, m, s)
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


# ---- after the loop: O /= l, LSE = m·scale + ln(l)
@task("finish", Inner, reads=["O", "m", "l"], writes=["O", "LSE"])
def finish_tile(O: tensor[2, f32], LSE: tensor[1, f32], m: tensor[1, f32], l: tensor[1, f32], scale: float):
    WGS = tunable(int)
    M, E = O.shape[0], O.shape[1]
    Op = partition_by_blocks(O, (M / WGS, E))
    Lp = partition_by_blocks(LSE, (M / WGS,))
    mp = partition_by_blocks(m, (M / WGS,))
    lp = partition_by_blocks(l, (M / WGS,))
    for i in prange(WGS):
        launch("finish", Op[i, 0], Lp[i], mp[i], lp[i], scale)


@task("finish", Inner, reads=["O", "m", "l"], writes=["O", "LSE"])
def finish_inner(O: tensor[2, f32], LSE: tensor[1, f32], m: tensor[1, f32], l: tensor[1, f32], scale: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Op = partition_by_mma(O, MMA, PROC, "C")
    Lp = partition_by_mma(LSE, MMA, PROC, "C")
    mp = partition_by_mma(m, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("finish", Op[i], Lp[i], mp[i], lp[i], scale)


@task("finish", Leaf, reads=["O", "m", "l"], writes=["O", "LSE"])
def finish_thread(O: tensor[2, f32], LSE: tensor[1, f32], m: tensor[1, f32], l: tensor[1, f32], scale: float):
    div_rows(O, l)
    row_log_sum_exp(LSE, m, l, scale)


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
