"""FlashAttention backward (issue #38): three kernels, launched in order — the preprocess
(Dsum = rowsum(dO ∘ O), dQacc = 0; tests/programs/attn_bwd_prep.cyp), the main kernel (per
block of keys of one key/value head: dK and dV summed over the group's query heads, and the dQ
sums added into dQacc; tests/programs/attn_bwd_dkdv.cyp plus attn_bwd_main.cyp's dQ) and the
postprocess (dQ = T(scale · dQacc); tests/programs/attn_bwd_post.cyp).  Q, O, dO, dQ:
B x H x M x D, K, V, dK, dV: B x HK x N x D (T; query head h reads key/value head
h // (H / HK)), LSE: B x H x M f32 (the forward's, natural log), Dsum: B x H x M f32 and
dQacc: B x H x M x D f32 (scratch the caller allocates, as FlashAttention-3's Python side does),
``scale`` a float, ``causal`` 0 or 1 (top-left, as programs/flash_attention3.cyp).

The main kernel's dQ: each step's dSᵀ (f32, keys on its rows) is converted to T into a shared
tile (both warpgroups' halves) and read back as an MN-major A (``mma_at``: dS = (dSᵀ)ᵀ) against
the block's K panel, the 64-query product split between the warpgroups by columns
(``wgmma_cols``), and each warpgroup's f32 piece is added into dQacc (``reduces=``, handed on
from the entry to the thread-level ``red``): every key block adds into the same rows, in any
order.  Variant ``dq_keys`` splits the product by keys instead (each warpgroup its own rows of
dSᵀ and K, a whole U x E piece added): the head-dimension-64 mapping's, whose 64 columns are
one swizzle chunk that two warpgroups could not split.
"""

T = dtype(f16, bf16)

from hopper_bt import mma
from hopper import mma_rs, clear, convert, store
from hopper_cols import clear
from hopper_at import mma_at
from elementwise import load, load_f32, mul, copy_f32, scale
from reduction import store_sums
from attn_bwd_trees import mask_t, probs, dscores, red, stage, put  # tests/programs/attn_bwd_trees.cyp


@task("attention_bwd", Inner, reads=["Q", "K", "V", "O", "dO", "LSE", "Dsum", "dQacc"],
      writes=["dQ", "dK", "dV", "Dsum", "dQacc"])
def attention_bwd(dQ: tensor[(B, H, M, D), T], dK: tensor[(B, HK, N, D), T],
                  dV: tensor[(B, HK, N, D), T], Dsum: tensor[(B, H, M), f32],
                  dQacc: tensor[(B, H, M, D), f32], Q: tensor[(B, H, M, D), T],
                  K: tensor[(B, HK, N, D), T], V: tensor[(B, HK, N, D), T],
                  O: tensor[(B, H, M, D), T], dO: tensor[(B, H, M, D), T],
                  LSE: tensor[(B, H, M), f32], scale: float, causal: int):
    Ds, Zs = partition_by_slices(Dsum, 0), partition_by_slices(dQacc, 0)
    Os, dOs = partition_by_slices(O, 0), partition_by_slices(dO, 0)
    dQs = partition_by_slices(dQ, 0)
    for b in prange(B):
        launch("prep_heads", Ds[b], Zs[b], Os[b], dOs[b])
    launch("dkdv", dK, dV, dQacc, Q, K, V, dO, LSE, Dsum, scale, causal)
    for b in prange(B):
        launch("post_heads", dQs[b], Zs[b], scale)


# ---- the batch, the key/value heads, the key blocks: one block per (b, hk, j)
@task("dkdv", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"], reduces=["dQacc"])
def dkdv_host(dK: tensor[4, T], dV: tensor[4, T], dQacc: tensor[4, f32], Q: tensor[4, T],
              K: tensor[4, T], V: tensor[4, T], dO: tensor[4, T], LSE: tensor[3, f32],
              Dsum: tensor[3, f32], scale: float, causal: int):
    B = Q.shape[0]
    Zs = partition_by_slices(dQacc, 0)
    dKs, dVs, Qs = partition_by_slices(dK, 0), partition_by_slices(dV, 0), partition_by_slices(Q, 0)
    Ks, Vs, dOs = partition_by_slices(K, 0), partition_by_slices(V, 0), partition_by_slices(dO, 0)
    Ls, Ds = partition_by_slices(LSE, 0), partition_by_slices(Dsum, 0)
    for b in prange(B):
        launch("heads", dKs[b], dVs[b], Zs[b], Qs[b], Ks[b], Vs[b], dOs[b], Ls[b], Ds[b], scale, causal)


@task("heads", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"], reduces=["dQacc"])
def heads_host(dK: tensor[3, T], dV: tensor[3, T], dQacc: tensor[3, f32], Q: tensor[3, T], K: tensor[3, T], V: tensor[3, T],
               dO: tensor[3, T], LSE: tensor[2, f32], Dsum: tensor[2, f32], scale: float, causal: int):
    G = Q.shape[0] / K.shape[0]
    dKs, dVs = partition_by_slices(dK, 0), partition_by_slices(dV, 0)
    Ks, Vs = partition_by_slices(K, 0), partition_by_slices(V, 0)
    for hk in prange(K.shape[0]):
        launch("keys", dKs[hk], dVs[hk], dQacc, Q, Ks[hk], Vs[hk], dO, LSE, Dsum, scale, causal, hk * G, G)


@task("keys", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"], reduces=["dQacc"])
def keys_host(dK: tensor[2, T], dV: tensor[2, T], dQacc: tensor[3, f32], Q: tensor[3, T], K: tensor[2, T], V: tensor[2, T],
              dO: tensor[3, T], LSE: tensor[2, f32], Dsum: tensor[2, f32], scale: float, causal: int,
              h0: int, G: int):
    W, E = tunable(int), tunable(int)
    dKp = partition_by_blocks(dK, (W, E))
    dVp = partition_by_blocks(dV, (W, E))
    Kp = partition_by_blocks(K, (W, E))
    Vp = partition_by_blocks(V, (W, E))
    for j in prange(cdiv(K.shape[0], W)):
        launch("dkdv_block", dKp[j, 0], dVp[j, 0], dQacc, Q, Kp[j, 0], Vp[j, 0], dO, LSE, Dsum, scale, causal,
               h0, G, j * W)


# ---- one block of W keys starting at key k0: the query heads h0 .. h0 + G - 1 of its key/value
# head, each over its query blocks from the first one that reaches the diagonal when causal
@task("dkdv_block", Inner, reads=["Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"], reduces=["dQacc"])
def dkdv_block(dK: tensor[2, T], dV: tensor[2, T], dQacc: tensor[3, f32], Q: tensor[3, T], K: tensor[2, T],
               V: tensor[2, T], dO: tensor[3, T], LSE: tensor[2, f32], Dsum: tensor[2, f32],
               scale: float, causal: int, h0: int, G: int, k0: int):
    U = tunable(int)
    W, E, M = dV.shape[0], dV.shape[1], Q.shape[1]
    Qs, dOs = partition_by_slices(Q, 0), partition_by_slices(dO, 0)
    Ls, Ds = partition_by_slices(LSE, 0), partition_by_slices(Dsum, 0)
    Zs = partition_by_slices(dQacc, 0)
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
        launch("step", dKacc, dVacc, Zs[h0 + t // n], Qs[h0 + t // n], K, V, dOs[h0 + t // n],
               Ls[h0 + t // n], Ds[h0 + t // n], scale, causal, i0 + t % n, k0)
    launch("scale", dKacc, scale)
    launch("store", dKacc, dK)
    launch("store", dVacc, dV)


# ---- one step: query block i of one query head against the block's keys
@task("step", Inner, reads=["dK", "dV", "Q", "K", "V", "dO", "LSE", "Dsum"], writes=["dK", "dV"],
      reduces=["dQacc"])
def dkdv_step(dK: tensor[2, f32], dV: tensor[2, f32], dQacc: tensor[2, f32], Q: tensor[2, T], K: tensor[2, T],
              V: tensor[2, T], dO: tensor[2, T], LSE: tensor[1, f32], Dsum: tensor[1, f32],
              scale: float, causal: int, i: int, k0: int):
    U = tunable(int)
    W, E = dV.shape[0], dV.shape[1]
    Qp = partition_by_blocks(Q, (U, E))
    dOp = partition_by_blocks(dO, (U, E))
    Lp = partition_by_blocks(LSE, (U,))
    Dp = partition_by_blocks(Dsum, (U,))
    dQp = partition_by_blocks(dQacc, (U, E))
    St: tensor[2, f32] = make_tensor(W, U)
    dPt: tensor[2, f32] = make_tensor(W, U)
    Pt: tensor[2, T] = make_tensor(W, U)
    dSt: tensor[2, T] = make_tensor(W, U)
    dSs: tensor[2, T] = make_tensor(W, U)
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
    launch("stage", dPt, dSs)
    launch("dq", dQp[i, 0], dSs, K)


@task("dq", Inner, reads=["dS", "K"], reduces=["dQ"])
def dq_block(dQ: tensor[2, f32], dS: tensor[2, T], K: tensor[2, T]):
    dQi: tensor[2, f32] = make_tensor(dQ.shape[0], dQ.shape[1])
    launch("clear", dQi)
    launch("mma_at", dQi, dS, K)
    launch("red", dQi, dQ)


# dQ split by keys instead: each of WGS warpgroups multiplies the dS rows of its own keys (the
# rows of the staged tile it wrote) by those keys of K, and adds its whole U x E piece into dQacc
# on its own (twice the additions of the column split, no exchange between warpgroups)
@task("dq", Inner, reads=["dS", "K"], reduces=["dQ"])
def dq_keys(dQ: tensor[2, f32], dS: tensor[2, T], K: tensor[2, T]):
    WGS = tunable(int)
    W = K.shape[0]
    dSp = partition_by_blocks(dS, (W / WGS, dS.shape[1]))
    Kp = partition_by_blocks(K, (W / WGS, K.shape[1]))
    for w in prange(WGS):
        launch("dq", dQ, dSp[w, 0], Kp[w, 0])


# dQ split by columns as separate tasks: each of WGS warpgroups multiplies the whole staged dSᵀ
# by its own columns of K into its own columns of dQ (a dq task per warpgroup, whose private
# copy, and its synchronization, is the warpgroup's own)
@task("dq", Inner, reads=["dS", "K"], reduces=["dQ"])
def dq_cols(dQ: tensor[2, f32], dS: tensor[2, T], K: tensor[2, T]):
    WGS = tunable(int)
    E = dQ.shape[1]
    dQp = partition_by_blocks(dQ, (dQ.shape[0], E / WGS))
    Kp = partition_by_blocks(K, (K.shape[0], E / WGS))
    for w in prange(WGS):
        launch("dq", dQp[0, w], dS, Kp[0, w])


# dQ through shared memory: the step's product written into the dq task's private copy of its
# dQacc tile (a plain store, each element once) which the reduction privilege adds into dQacc;
# where the mapping keeps that copy in SHARED, the add is a TMA reduce-add of the whole tile
@task("dq", Inner, reads=["dS", "K"], reduces=["dQ"])
def dq_staged(dQ: tensor[2, f32], dS: tensor[2, T], K: tensor[2, T]):
    dQi: tensor[2, f32] = make_tensor(dQ.shape[0], dQ.shape[1])
    launch("clear", dQi)
    launch("mma_at", dQi, dS, K)
    launch("put", dQi, dQ)


@task("prep_heads", Inner, reads=["O", "dO"], writes=["Dsum", "dQacc"])
def prep_heads(Dsum: tensor[2, f32], dQacc: tensor[3, f32], O: tensor[3, T], dO: tensor[3, T]):
    Ds, Zs = partition_by_slices(Dsum, 0), partition_by_slices(dQacc, 0)
    Os, dOs = partition_by_slices(O, 0), partition_by_slices(dO, 0)
    for h in prange(O.shape[0]):
        launch("prep_rows", Ds[h], Zs[h], Os[h], dOs[h])


# ---- one head: U-row blocks
@task("prep_rows", Inner, reads=["O", "dO"], writes=["Dsum", "dQacc"])
def prep_rows(Dsum: tensor[1, f32], dQacc: tensor[2, f32], O: tensor[2, T], dO: tensor[2, T]):
    U, E = tunable(int), tunable(int)
    M = O.shape[0]
    Dp = partition_by_blocks(Dsum, (U,))
    Zp = partition_by_blocks(dQacc, (U, E))
    Op = partition_by_blocks(O, (U, E))
    dOp = partition_by_blocks(dO, (U, E))
    for i in prange(cdiv(M, U)):
        launch("prep_block", Dp[i], Zp[i, 0], Op[i, 0], dOp[i, 0])


@task("prep_block", Inner, reads=["O", "dO"], writes=["Dsum", "dQacc"])
def prep_block(Dsum: tensor[1, f32], dQacc: tensor[2, f32], O: tensor[2, T], dO: tensor[2, T]):
    U, E = O.shape[0], O.shape[1]
    Of: tensor[2, f32] = make_tensor(U, E)
    dOf: tensor[2, f32] = make_tensor(U, E)
    Z: tensor[2, f32] = make_tensor(U, E)
    launch("clear", Z)
    launch("copy_f32", Z, dQacc)
    launch("load", O, Of)
    launch("load", dO, dOf)
    launch("mul", Of, dOf)
    launch("store_sums", Of, Dsum)


@task("post_heads", Inner, reads=["dQacc"], writes=["dQ"])
def post_heads(dQ: tensor[3, T], dQacc: tensor[3, f32], scale: float):
    Qs, As = partition_by_slices(dQ, 0), partition_by_slices(dQacc, 0)
    for h in prange(dQ.shape[0]):
        launch("post_rows", Qs[h], As[h], scale)


# ---- one head: U-row blocks
@task("post_rows", Inner, reads=["dQacc"], writes=["dQ"])
def post_rows(dQ: tensor[2, T], dQacc: tensor[2, f32], scale: float):
    U, E = tunable(int), tunable(int)
    M = dQ.shape[0]
    Qp = partition_by_blocks(dQ, (U, E))
    Ap = partition_by_blocks(dQacc, (U, E))
    for i in prange(cdiv(M, U)):
        launch("post_block", Qp[i, 0], Ap[i, 0], scale)


@task("post_block", Inner, reads=["dQacc"], writes=["dQ"])
def post_block(dQ: tensor[2, T], dQacc: tensor[2, f32], scale: float):
    U, E = dQ.shape[0], dQ.shape[1]
    X: tensor[2, f32] = make_tensor(U, E)
    launch("load_f32", dQacc, X)
    launch("scale", X, scale)
    launch("store", X, dQ)
