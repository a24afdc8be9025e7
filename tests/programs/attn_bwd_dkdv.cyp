"""dK and dV of attention (issue #38: the attention backward's main kernel without dQ),
FlashAttention-3's way (SdP_swapAB): per block of W keys, over the query blocks of each query
head that reads the block's key/value head, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (keys on the rows),
causal: Sᵀ = −inf where the key comes after the query, Pᵀ = exp(Sᵀ·scale − LSE[q]),
dSᵀ = Pᵀ ∘ (dPᵀ − Dsum[q]) (LSE and Dsum per column), dV += Pᵀ·dO and dK += dSᵀ·Q (Pᵀ and dSᵀ
from registers); dK scaled once at the end.  Q, dO: B x H x M x D, K, V, dK, dV: B x HK x N x D
(grouped-query heads: query head h reads key/value head h // (H / HK), so dK and dV of a
key/value head sum over its H / HK query heads, all in one block's registers), LSE (the
forward's, natural log) and Dsum = rowsum(dO ∘ O): B x H x M f32, ``scale`` a float,
``causal`` 0 or 1 (top-left aligned, as programs/flash_attention3.cyp: query q sees keys
k ≤ q); any M and N.

The block of keys k0 .. k0 + W − 1 walks G = H / HK query heads times its query blocks in one
sequential loop (step t: head h0 + t // n, block i0 + t % n); causal, the n blocks start at
i0, the one holding query k0 (the blocks before it see none of these keys; keys past every
query: no step, dK = dV = 0), and the mask's diagonal offset is k0 − i·U (not causal: −W,
which masks nothing).

Keys past N and queries past M read as zeros (TMA): a padded query row has dO = 0 and adds
nothing to dV; its dSᵀ column is Pᵀ·(0 − 0) = 0 and adds nothing to dK, masked or not.  Rows of
dK and dV past N are never stored.  The per-column leaves are user C++ functions
(tests/programs/ops/attn_bwd.cuh).

Both 16-bit Q and dO tiles of a step are read twice by the Tensor Core, as a K-major B (Qᵀ,
dOᵀ) and as an MN-major B (Q, dO): one shared tile, two descriptors.
"""

T = dtype(f16, bf16)

from hopper_bt import mma                      # Sᵀ += K Qᵀ, dPᵀ += V dOᵀ (K-major B operands)
from hopper import mma_rs, clear, convert, store
from elementwise import scale
from attn_bwd_trees import mask_t, probs, dscores  # tests/programs/attn_bwd_trees.cyp


# ---- the batch, the key/value heads, the key blocks: one block per (b, hk, j)
@task("dkdv", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def dkdv_host(dK: tensor[(B, HK, N, D), T], dV: tensor[(B, HK, N, D), T], Q: tensor[(B, H, M, D), T],
              K: tensor[(B, HK, N, D), T], V: tensor[(B, HK, N, D), T], dO: tensor[(B, H, M, D), T],
              LSE: tensor[(B, H, M), f32], Dsum: tensor[(B, H, M), f32], scale: float, causal: int):
    dKs, dVs, Qs = partition_by_slices(dK, 0), partition_by_slices(dV, 0), partition_by_slices(Q, 0)
    Ks, Vs, dOs = partition_by_slices(K, 0), partition_by_slices(V, 0), partition_by_slices(dO, 0)
    Ls, Ds = partition_by_slices(LSE, 0), partition_by_slices(Dsum, 0)
    for b in prange(B):
        launch("heads", dKs[b], dVs[b], Qs[b], Ks[b], Vs[b], dOs[b], Ls[b], Ds[b], scale, causal)


@task("heads", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def heads_host(dK: tensor[3, T], dV: tensor[3, T], Q: tensor[3, T], K: tensor[3, T], V: tensor[3, T],
               dO: tensor[3, T], LSE: tensor[2, f32], Dsum: tensor[2, f32], scale: float, causal: int):
    G = Q.shape[0] / K.shape[0]
    dKs, dVs = partition_by_slices(dK, 0), partition_by_slices(dV, 0)
    Ks, Vs = partition_by_slices(K, 0), partition_by_slices(V, 0)
    for hk in prange(K.shape[0]):
        launch("keys", dKs[hk], dVs[hk], Q, Ks[hk], Vs[hk], dO, LSE, Dsum, scale, causal, hk * G, G)


@task("keys", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def keys_host(dK: tensor[2, T], dV: tensor[2, T], Q: tensor[3, T], K: tensor[2, T], V: tensor[2, T],
              dO: tensor[3, T], LSE: tensor[2, f32], Dsum: tensor[2, f32], scale: float, causal: int,
              h0: int, G: int):
    W, E = tunable(int), tunable(int)
    dKp = partition_by_blocks(dK, (W, E))
    dVp = partition_by_blocks(dV, (W, E))
    Kp = partition_by_blocks(K, (W, E))
    Vp = partition_by_blocks(V, (W, E))
    for j in prange(cdiv(K.shape[0], W)):
        launch("dkdv_block", dKp[j, 0], dVp[j, 0], Q, Kp[j, 0], Vp[j, 0], dO, LSE, Dsum, scale, causal,
               h0, G, j * W)


# ---- one block of W keys starting at key k0: the query heads h0 .. h0 + G - 1 of its key/value
# head, each over its query blocks from the first one that reaches the diagonal when causal
@task("dkdv_block", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def dkdv_block(dK: tensor[2, T], dV: tensor[2, T], Q: tensor[3, T], K: tensor[2, T],
               V: tensor[2, T], dO: tensor[3, T], LSE: tensor[2, f32], Dsum: tensor[2, f32],
               scale: float, causal: int, h0: int, G: int, k0: int):
    U = tunable(int)
    W, E, M = dV.shape[0], dV.shape[1], Q.shape[1]
    Qs, dOs = partition_by_slices(Q, 0), partition_by_slices(dO, 0)
    Ls, Ds = partition_by_slices(LSE, 0), partition_by_slices(Dsum, 0)
    nq = (M + U - 1) // U  # cdiv(M, U), in the kernel's int arithmetic (its cdiv is 64-bit)
    # causal: the query blocks before the one holding query k0 see none of these keys (k0 past
    # the last query: none does)
    i0 = causal * (min(k0, M + U - 1) // U)
    n = nq - i0
    dKacc: tensor[2, f32] = make_tensor(W, E)
    dVacc: tensor[2, f32] = make_tensor(W, E)
    launch("clear", dKacc)
    launch("clear", dVacc)
    for t in srange(G * n):
        launch("step", dKacc, dVacc, Qs[h0 + t // n], K, V, dOs[h0 + t // n], Ls[h0 + t // n],
               Ds[h0 + t // n], scale, causal, i0 + t % n, k0)
    launch("scale", dKacc, scale)
    launch("store", dKacc, dK)
    launch("store", dVacc, dV)


# ---- one step: query block i of one query head against the block's keys
@task("step", Inner, reads=["dK", "dV", "Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"])
def dkdv_step(dK: tensor[2, f32], dV: tensor[2, f32], Q: tensor[2, T], K: tensor[2, T],
              V: tensor[2, T], dO: tensor[2, T], LSE: tensor[1, f32], Dsum: tensor[1, f32],
              scale: float, causal: int, i: int, k0: int):
    U = tunable(int)
    W, E = dV.shape[0], dV.shape[1]
    Qp = partition_by_blocks(Q, (U, E))
    dOp = partition_by_blocks(dO, (U, E))
    Lp = partition_by_blocks(LSE, (U,))
    Dp = partition_by_blocks(Dsum, (U,))
    St: tensor[2, f32] = make_tensor(W, U)
    dPt: tensor[2, f32] = make_tensor(W, U)
    Pt: tensor[2, T] = make_tensor(W, U)
    dSt: tensor[2, T] = make_tensor(W, U)
    launch("clear", St)
    launch("mma", St, K, Qp[i, 0])
    launch("clear", dPt)
    launch("mma", dPt, V, dOp[i, 0])
    # keys after the query: -inf (d = the tile's first key minus its first query; not causal:
    # -W, below every key row of the tile, masks nothing)
    launch("mask_t", St, causal * (k0 - i * U) - (1 - causal) * W)
    launch("probs", St, Lp[i], scale)
    launch("convert", St, Pt)
    launch("mma_rs", dV, Pt, dOp[i, 0])
    launch("dscores", dPt, St, Dp[i])
    launch("convert", dPt, dSt)
    launch("mma_rs", dK, dSt, Qp[i, 0])
