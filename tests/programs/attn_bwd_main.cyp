"""The attention backward's main kernel for one head (issue #38): dK, dV and the dQ sums, in
FlashAttention-3's order.  tests/programs/attn_bwd_dkdv.cyp (its docstring gives dK and dV)
plus, per query block i, dQ[i] += dS·K: dSᵀ (f32, the keys on its rows) converted to T into a
shared tile, both warpgroups' halves together, read back as an MN-major A (``mma_at``,
dS = (dSᵀ)ᵀ) against the whole K panel, the 64-query product split among the warpgroups by
columns (``wgmma_cols``), and each warpgroup's f32 piece added into dQacc (``reduces=``): the
blocks of all key blocks add into the same rows of dQacc, in any order.

Task ``dq`` holds ``reduces=`` on its piece of dQacc and hands it on to ``red`` only, and so
does ``dkdv_block`` with the whole of dQacc: neither gets a private copy; ``red``'s leaf writes
its thread's private copy, which its launch adds into dQacc (``copy.add``).  One head: Q, dO
M x D, K, V N x D, LSE and Dsum M f32, dK and dV N x D, dQacc M x D f32 (added into: the
preprocess clears it, the postprocess scales and converts it).
"""

T = dtype(f16, bf16)

from hopper_bt import mma                      # Sᵀ += K Qᵀ, dPᵀ += V dOᵀ (K-major B operands)
from hopper import mma_rs, clear, convert, store
from hopper_cols import clear
from hopper_at import mma_at
from elementwise import scale
from attn_bwd_trees import probs, dscores, red, stage  # tests/programs/attn_bwd_trees.cyp


@task("dkdv", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"], reduces=["dQacc"])
def dkdv_host(dK: tensor[(N, D), T], dV: tensor[(N, D), T], dQacc: tensor[(M, D), f32], Q: tensor[(M, D), T],
              K: tensor[(N, D), T], V: tensor[(N, D), T], dO: tensor[(M, D), T],
              LSE: tensor[(M,), f32], Dsum: tensor[(M,), f32], scale: float):
    W, E = tunable(int), tunable(int)
    dKp = partition_by_blocks(dK, (W, E))
    dVp = partition_by_blocks(dV, (W, E))
    Kp = partition_by_blocks(K, (W, E))
    Vp = partition_by_blocks(V, (W, E))
    for j in prange(cdiv(N, W)):
        launch("dkdv", dKp[j, 0], dVp[j, 0], dQacc, Q, Kp[j, 0], Vp[j, 0], dO, LSE, Dsum, scale)


@task("dkdv", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"], reduces=["dQacc"])
def dkdv_block(dK: tensor[2, T], dV: tensor[2, T], dQacc: tensor[2, f32], Q: tensor[2, T], K: tensor[2, T],
               V: tensor[2, T], dO: tensor[2, T], LSE: tensor[1, f32], Dsum: tensor[1, f32],
               scale: float):
    U = tunable(int)
    W, E, M = dV.shape[0], dV.shape[1], Q.shape[0]
    Qp = partition_by_blocks(Q, (U, E))
    dOp = partition_by_blocks(dO, (U, E))
    Lp = partition_by_blocks(LSE, (U,))
    Dp = partition_by_blocks(Dsum, (U,))
    dQp = partition_by_blocks(dQacc, (U, E))
    dKacc: tensor[2, f32] = make_tensor(W, E)
    dVacc: tensor[2, f32] = make_tensor(W, E)
    launch("clear", dKacc)
    launch("clear", dVacc)
    for i in srange(cdiv(M, U)):
        St: tensor[2, f32] = make_tensor(W, U)
        dPt: tensor[2, f32] = make_tensor(W, U)
        Pt: tensor[2, T] = make_tensor(W, U)
        dSt: tensor[2, T] = make_tensor(W, U)
        dSs: tensor[2, T] = make_tensor(W, U)
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
        launch("stage", dPt, dSs)
        launch("dq", dQp[i, 0], dSs, K)
    launch("scale", dKacc, scale)
    launch("store", dKacc, dK)
    launch("store", dVacc, dV)


@task("dq", Inner, reads=["dS", "K"], reduces=["dQ"])
def dq_block(dQ: tensor[2, f32], dS: tensor[2, T], K: tensor[2, T]):
    dQi: tensor[2, f32] = make_tensor(dQ.shape[0], dQ.shape[1])
    launch("clear", dQi)
    launch("mma_at", dQi, dS, K)
    launch("red", dQi, dQ)
