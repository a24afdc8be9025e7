"""dK and dV of attention (issue #38: the attention backward's main kernel without dQ),
FlashAttention-3's way (SdP_swapAB): per block of W keys, over the query blocks,
Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (keys on the rows), Pᵀ = exp(Sᵀ·scale − LSE[q]),
dSᵀ = Pᵀ ∘ (dPᵀ − Dsum[q]) (LSE and Dsum per column), dV += Pᵀ·dO and dK += dSᵀ·Q (Pᵀ and dSᵀ
from registers); dK scaled once at the end.  One head: Q, dO M x D, K, V N x D, LSE (the
forward's, natural log) and Dsum = rowsum(dO ∘ O) M f32, dK and dV N x D; any M and N.

Keys past N and queries past M read as zeros (TMA): a padded query row has dO = 0 and adds
nothing to dV; its dSᵀ column is Pᵀ·(0 − 0) = 0 and adds nothing to dK.  Rows of dK and dV past
N are never stored.  The per-column leaves are user C++ functions (programs/ops/attn_bwd.cuh).

Both 16-bit Q and dO tiles of a step are read twice by the Tensor Core, as a K-major B (Qᵀ,
dOᵀ) and as an MN-major B (Q, dO): one shared tile, two descriptors.
"""

include("ops/attn_bwd.cuh")

T = dtype(f16, bf16)

from hopper_bt import mma                      # Sᵀ += K Qᵀ, dPᵀ += V dOᵀ (K-major B operands)
from hopper import mma_rs, clear, convert, store


@external("cypress_ops::probs_t", writes=["s"])
def probs_t(s: tensor[2, f32], lse: tensor[1, f32], scale: float):
    """s = exp(s * scale - lse[c]), lse per column."""


@external("cypress_ops::dscores_t", writes=["ds"])
def dscores_t(ds: tensor[2, f32], p: tensor[2, f32], d: tensor[1, f32]):
    """ds = p * (ds - d[c]), d per column."""


@external("cypress_ops::scale_by", writes=["x"])
def scale_by(x: tensor[2, f32], s: float):
    """x = x * s."""


@task("dkdv", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def dkdv_host(dK: tensor[(N, D), T], dV: tensor[(N, D), T], Q: tensor[(M, D), T],
              K: tensor[(N, D), T], V: tensor[(N, D), T], dO: tensor[(M, D), T],
              LSE: tensor[(M,), f32], Dsum: tensor[(M,), f32], scale: float):
    W, E = tunable(int), tunable(int)
    dKp = partition_by_blocks(dK, (W, E))
    dVp = partition_by_blocks(dV, (W, E))
    Kp = partition_by_blocks(K, (W, E))
    Vp = partition_by_blocks(V, (W, E))
    for j in prange(cdiv(N, W)):
        launch("dkdv", dKp[j, 0], dVp[j, 0], Q, Kp[j, 0], Vp[j, 0], dO, LSE, Dsum, scale)


@task("dkdv", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def dkdv_block(dK: tensor[2, T], dV: tensor[2, T], Q: tensor[2, T], K: tensor[2, T],
               V: tensor[2, T], dO: tensor[2, T], LSE: tensor[1, f32], Dsum: tensor[1, f32],
               scale: float):
    U = tunable(int)
    W, E, M = dV.shape[0], dV.shape[1], Q.shape[0]
    Qp = partition_by_blocks(Q, (U, E))
    dOp = partition_by_blocks(dO, (U, E))
    Lp = partition_by_blocks(LSE, (U,))
    Dp = partition_by_blocks(Dsum, (U,))
    dKacc: tensor[2, f32] = make_tensor(W, E)
    dVacc: tensor[2, f32] = make_tensor(W, E)
    launch("clear", dKacc)
    launch("clear", dVacc)
    for i in srange(cdiv(M, U)):
        St: tensor[2, f32] = make_tensor(W, U)
        dPt: tensor[2, f32] = make_tensor(W, U)
        Pt: tensor[2, T] = make_tensor(W, U)
        dSt: tensor[2, T] = make_tensor(W, U)
        launch("clear", St)
        launch("mma", St, K, Qp[i, 0])
        launch("clear", dPt)
        launch("mma", dPt, V, dOp[i, 0])
        launch("probs", St, Lp[i], scale)
        launch("convert", St, Pt)
        launch("mma_rs", dVacc, Pt, dOp[i, 0])
        launch("dscores", dPt, St, Dp[i])
        launch("convert", dPt, dSt)
        launch("mma_rs", dKacc, dSt, Qp[i, 0])
    launch("scale", dKacc, scale)
    launch("store", dKacc, dK)
    launch("store", dVacc, dV)


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


@task("scale", Inner, reads=["X"], writes=["X"])
def scale_tile(X: tensor[2, f32], s: float):
    WGS = tunable(int)
    Xp = partition_by_blocks(X, (X.shape[0] / WGS, X.shape[1]))
    for i in prange(WGS):
        launch("scale", Xp[i, 0], s)


@task("scale", Inner, reads=["X"], writes=["X"])
def scale_inner(X: tensor[2, f32], s: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Xp = partition_by_mma(X, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("scale", Xp[i], s)


@task("scale", Leaf, reads=["X"], writes=["X"])
def scale_thread(X: tensor[2, f32], s: float):
    scale_by(X, s)
