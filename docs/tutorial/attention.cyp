"""O = softmax(softcap(Q @ Kᵀ * scale, cap)) @ V for one head: FlashAttention-2's loop with
Gemma 2's soft-capped scores, the cap the user's C++ (docs/tutorial.md, part 2).

Q: M x D, K: N x D, V: N x D, O: M x D, all row-major T; D <= 64 and N a multiple of 64
(the program neither loops over D nor masks padding keys).  A block owns U query rows and
loops over W-row tiles of K and V with the online softmax: m and l are the running row max
and row sum, alpha the factor that rescales O and l when the max grows.
"""

include("ops.cuh")

T = dtype(f16, bf16)

from hopper import mma, clear, copy  # O += P @ V (P in registers), S = 0, O = Oacc


@external("tutorial::softcap", writes=["s"])
def softcap(s: tensor[2, f32], scale: float, cap: float):
    """s = cap * tanh(s * scale / cap): the scaled score, soft-capped."""


@task("attn", Inner, reads=["Q", "K", "V"], writes=["O"])
def attn_host(O: tensor[(M, D), T], Q: tensor[(M, D), T], K: tensor[(N, D), T],
              V: tensor[(N, D), T], scale: float, cap: float):
    U, E = tunable(int), tunable(int)
    Op = partition_by_blocks(O, (U, E))
    Qp = partition_by_blocks(Q, (U, E))
    for i in prange(cdiv(M, U)):
        launch("attn", Op[i, 0], Qp[i, 0], K, V, scale, cap)


@task("attn", Inner, reads=["Q", "K", "V"], writes=["O"])
def attn_block(O: tensor[2, T], Q: tensor[2, T], K: tensor[2, T], V: tensor[2, T],
               scale: float, cap: float):
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
        launch("scores", S, Q, Kp[k, 0])
        launch("softmax", Oacc, S, P, m, l, alpha, scale, cap)
        launch("mma", Oacc, P, Vp[k, 0])
    launch("finish", Oacc, l)
    launch("copy", Oacc, O)


# ---- S += Q @ Kᵀ: the library's mma tree with K read as the K-major B operand
@task("scores", Inner, reads=["A", "B", "C"], writes=["C"])
def scores_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, A.shape[1]))
    for i in prange(WGS):
        launch("scores", Cp[i, 0], Ap[i, 0], B)


@task("scores", Inner, reads=["A", "B", "C"], writes=["C"])
def scores_inner(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("scores", Cp[i], Ap[i], Bp[i])


@task("scores", Leaf, reads=["A", "B", "C"], writes=["C"])
def scores_thread(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    MMA = tunable(atom)
    warpgroup_mma_bt(MMA, C, A, B)


# ---- one step of the online softmax on each thread's rows: the scores soft-capped first,
# P = T(exp2((S - m) * log2 e)) for the next wgmma last
@task("softmax", Inner, reads=["O", "S", "m", "l"], writes=["O", "S", "P", "m", "l", "alpha"])
def softmax_tile(O: tensor[2, f32], S: tensor[2, f32], P: tensor[2, T], m: tensor[1, f32],
                 l: tensor[1, f32], alpha: tensor[1, f32], scale: float, cap: float):
    WGS = tunable(int)
    M, N, E = S.shape[0], S.shape[1], O.shape[1]
    Op = partition_by_blocks(O, (M / WGS, E))
    Sp = partition_by_blocks(S, (M / WGS, N))
    Pp = partition_by_blocks(P, (M / WGS, N))
    mp = partition_by_blocks(m, (M / WGS,))
    lp = partition_by_blocks(l, (M / WGS,))
    ap = partition_by_blocks(alpha, (M / WGS,))
    for i in prange(WGS):
        launch("softmax", Op[i, 0], Sp[i, 0], Pp[i, 0], mp[i], lp[i], ap[i], scale, cap)


@task("softmax", Inner, reads=["O", "S", "m", "l"], writes=["O", "S", "P", "m", "l", "alpha"])
def softmax_inner(O: tensor[2, f32], S: tensor[2, f32], P: tensor[2, T], m: tensor[1, f32],
                  l: tensor[1, f32], alpha: tensor[1, f32], scale: float, cap: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Op = partition_by_mma(O, MMA, PROC, "C")
    Sp = partition_by_mma(S, MMA, PROC, "C")
    Pp = partition_by_mma(P, MMA, PROC, "C")
    mp = partition_by_mma(m, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    ap = partition_by_mma(alpha, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("softmax", Op[i], Sp[i], Pp[i], mp[i], lp[i], ap[i], scale, cap)


@task("softmax", Leaf, reads=["O", "S", "m", "l"], writes=["O", "S", "P", "m", "l", "alpha"])
def softmax_thread(O: tensor[2, f32], S: tensor[2, f32], P: tensor[2, T], m: tensor[1, f32],
                   l: tensor[1, f32], alpha: tensor[1, f32], scale: float, cap: float):
    softcap(S, scale, cap)
    copy(m, alpha)
    warpgroup_row_max(m, S)
    exp2_diff(alpha, m, 1.4426950408889634)
    exp2_diff(S, m, 1.4426950408889634)
    scale_rows(l, alpha)
    warpgroup_row_sum(l, S)
    scale_rows(O, alpha)
    copy(S, P)


# ---- m = -inf, l = 0 before the loop; O /= l after it
@task("init", Inner, writes=["m", "l"])
def init_tile(m: tensor[1, f32], l: tensor[1, f32]):
    WGS = tunable(int)
    mp = partition_by_blocks(m, (m.shape[0] / WGS,))
    lp = partition_by_blocks(l, (m.shape[0] / WGS,))
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
