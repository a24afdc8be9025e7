"""cypressc's Hopper task library: the online-softmax steps of attention (FlashAttention's
main loop), on the wgmma accumulator layout's rows.

Import them by task name: `from softmax import init, mask, softmax, rescale, finish`.  S is
the f32 score tile (U x W), O the f32 output accumulator (U x E), m, l and alpha f32 row
vectors laid out like the accumulator's rows; the row reductions combine the 4 lanes that
share an accumulator row.  No dtype parameter: everything is f32.

init:    m = -inf (-1e30), l = 0
mask:    S = -inf for keys past n and, with d (the tile's first query row minus its first key
         column), above the causal diagonal
softmax: the statistics of one step (s = scale·log2 e): the new row max m,
         alpha = exp2((m_old - m)·s), S = exp2((S - m)·s), l = l·alpha + the row sums of S
rescale: O *= alpha, row by row
finish:  O /= l, LSE = m·scale + ln(l)

A program that folds the rescale into its softmax step (flash_attention2's softmax takes O)
keeps its own softmax variants and imports the rest.
"""

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


# ---- the online softmax statistics of one step, on the accumulator layout's rows
# (s = scale·log2 e): the new row max m, alpha = exp2((m_old - m)·s), S = exp2((S - m)·s), l
@task("softmax", Inner, reads=["S", "m", "l"], writes=["S", "m", "l", "alpha"])
def softmax_tile(S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32], alpha: tensor[1, f32], s: float):
    WGS = tunable(int)
    M, N = S.shape[0], S.shape[1]
    Sp = partition_by_blocks(S, (M / WGS, N))
    mp = partition_by_blocks(m, (M / WGS,))
    lp = partition_by_blocks(l, (M / WGS,))
    ap = partition_by_blocks(alpha, (M / WGS,))
    for i in prange(WGS):
        launch("softmax", Sp[i, 0], mp[i], lp[i], ap[i], s)


@task("softmax", Inner, reads=["S", "m", "l"], writes=["S", "m", "l", "alpha"])
def softmax_inner(S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32], alpha: tensor[1, f32], s: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Sp = partition_by_mma(S, MMA, PROC, "C")
    mp = partition_by_mma(m, MMA, PROC, "C")
    lp = partition_by_mma(l, MMA, PROC, "C")
    ap = partition_by_mma(alpha, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("softmax", Sp[i], mp[i], lp[i], ap[i], s)


@task("softmax", Leaf, reads=["S", "m", "l"], writes=["S", "m", "l", "alpha"])
def softmax_thread(S: tensor[2, f32], m: tensor[1, f32], l: tensor[1, f32], alpha: tensor[1, f32], s: float):
    copy(m, alpha)
    warpgroup_row_max(m, S)
    exp2_diff(alpha, m, s)
    exp2_diff(S, m, s)
    scale_rows(l, alpha)
    warpgroup_row_sum(l, S)


# ---- O *= alpha, row by row
@task("rescale", Inner, reads=["O", "alpha"], writes=["O"])
def rescale_tile(O: tensor[2, f32], alpha: tensor[1, f32]):
    WGS = tunable(int)
    M, E = O.shape[0], O.shape[1]
    Op = partition_by_blocks(O, (M / WGS, E))
    ap = partition_by_blocks(alpha, (M / WGS,))
    for i in prange(WGS):
        launch("rescale", Op[i, 0], ap[i])


@task("rescale", Inner, reads=["O", "alpha"], writes=["O"])
def rescale_inner(O: tensor[2, f32], alpha: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Op = partition_by_mma(O, MMA, PROC, "C")
    ap = partition_by_mma(alpha, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("rescale", Op[i], ap[i])


@task("rescale", Leaf, reads=["O", "alpha"], writes=["O"])
def rescale_thread(O: tensor[2, f32], alpha: tensor[1, f32]):
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
