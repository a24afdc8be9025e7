"""The attention backward's elementwise trees on a key-major score tile (Sᵀ: keys on the rows,
queries on the columns), shared by tests/programs/attn_bwd_dkdv.cyp, attn_bwd_main.cyp and
flash_attention_bwd.cyp (issue #38).  Each splits the block's tile among WGS warpgroups by rows
and lays it out like the wgmma accumulator (the library's `wgmma` template maps them; `red`
goes with `wgmma_cols`):

mask_t:  Sᵀ = -inf where the key (row) comes after the query (column): top-left causal
probs:   Pᵀ = exp(Sᵀ·scale − LSE[q]), LSE per column (a user C++ leaf, ops/attn_bwd.cuh)
dscores: dSᵀ = Pᵀ ∘ (dPᵀ − Dsum[q]), Dsum per column (likewise)
stage:   a T copy of an f32 tile into shared memory, for a later wgmma to read
red:     D += C, f32, a tile split among the warpgroups by columns (``reduces=``)
put:     D = C, f32, split the same way

The importing program declares the dtype parameter `T`.
"""

include("ops/attn_bwd.cuh")

T = dtype(f16, bf16)  # the 16-bit element type: bound by the importing program


@external("cypress_ops::probs_t", writes=["s"])
def probs_t(s: tensor[2, f32], lse: tensor[1, f32], scale: float):
    """s = exp(s * scale - lse[c]), lse per column."""


@external("cypress_ops::dscores_t", writes=["ds"])
def dscores_t(ds: tensor[2, f32], p: tensor[2, f32], d: tensor[1, f32]):
    """ds = p * (ds - d[c]), d per column."""


# ---- Sᵀ = -inf where the key (row) comes after the query (column): top-left causal, key-major
@task("mask_t", Inner, reads=["S"], writes=["S"])
def mask_t_tile(S: tensor[2, f32], d: int):
    WGS = tunable(int)
    Sp = partition_by_blocks(S, (S.shape[0] / WGS, S.shape[1]))
    for i in prange(WGS):
        launch("mask_t", Sp[i, 0], d + i * (S.shape[0] / WGS))


@task("mask_t", Inner, reads=["S"], writes=["S"])
def mask_t_inner(S: tensor[2, f32], d: int):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Sp = partition_by_mma(S, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("mask_t", Sp[i], d)


@task("mask_t", Leaf, reads=["S"], writes=["S"])
def mask_t_thread(S: tensor[2, f32], d: int):
    mask_causal_t(S, d)


@task("probs", Inner, reads=["S", "lse"], writes=["S"])
def probs_tile(S: tensor[2, f32], lse: tensor[1, f32], scale: float):
    WGS = tunable(int)
    Sp = partition_by_blocks(S, (S.shape[0] / WGS, S.shape[1]))
    for i in prange(WGS):
        launch("probs", Sp[i, 0], lse, scale)


@task("probs", Inner, reads=["S", "lse"], writes=["S"])
def probs_inner(S: tensor[2, f32], lse: tensor[1, f32], scale: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Sp = partition_by_mma(S, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("probs", Sp[i], lse, scale)


@task("probs", Leaf, reads=["S", "lse"], writes=["S"])
def probs_thread(S: tensor[2, f32], lse: tensor[1, f32], scale: float):
    probs_t(S, lse, scale)


@task("dscores", Inner, reads=["dS", "P", "d"], writes=["dS"])
def dscores_tile(dS: tensor[2, f32], P: tensor[2, f32], d: tensor[1, f32]):
    WGS = tunable(int)
    R, C = dS.shape[0] / WGS, dS.shape[1]
    dSp = partition_by_blocks(dS, (R, C))
    Pp = partition_by_blocks(P, (R, C))
    for i in prange(WGS):
        launch("dscores", dSp[i, 0], Pp[i, 0], d)


@task("dscores", Inner, reads=["dS", "P", "d"], writes=["dS"])
def dscores_inner(dS: tensor[2, f32], P: tensor[2, f32], d: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    dSp = partition_by_mma(dS, MMA, PROC, "C")
    Pp = partition_by_mma(P, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("dscores", dSp[i], Pp[i], d)


@task("dscores", Leaf, reads=["dS", "P", "d"], writes=["dS"])
def dscores_thread(dS: tensor[2, f32], P: tensor[2, f32], d: tensor[1, f32]):
    dscores_t(dS, P, d)


@task("red", Inner, reads=["C"], reduces=["D"])
def red_cols(C: tensor[2, f32], D: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    Dp = partition_by_blocks(D, (M, N / WGS))
    for i in prange(WGS):
        launch("red", Cp[0, i], Dp[0, i])


@task("red", Inner, reads=["C"], reduces=["D"])
def red_inner(C: tensor[2, f32], D: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("red", Cp[i], Dp[i])


@task("red", Leaf, reads=["C"], reduces=["D"])
def red_thread(C: tensor[2, f32], D: tensor[2, f32]):
    copy(C, D)


@task("stage", Inner, reads=["C"], writes=["D"])
def stage_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("stage", Cp[i, 0], Dp[i, 0])


@task("stage", Inner, reads=["C"], writes=["D"])
def stage_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("stage", Cp[i], Dp[i])


@task("stage", Leaf, reads=["C"], writes=["D"])
def stage_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)


# ---- D = C, f32, a tile split among the warpgroups by columns (as `red`, writing instead)
@task("put", Inner, reads=["C"], writes=["D"])
def put_cols(C: tensor[2, f32], D: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    Dp = partition_by_blocks(D, (M, N / WGS))
    for i in prange(WGS):
        launch("put", Cp[0, i], Dp[0, i])


@task("put", Inner, reads=["C"], writes=["D"])
def put_inner(C: tensor[2, f32], D: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("put", Cp[i], Dp[i])


@task("put", Leaf, reads=["C"], writes=["D"])
def put_thread(C: tensor[2, f32], D: tensor[2, f32]):
    copy(C, D)
