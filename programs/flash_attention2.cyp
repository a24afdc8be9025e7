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

The trees below the block come from cypressc's library: S = Q·Kᵀ's mma from
cypressc/lib/hopper_bt.cyp, mma_rs, clear, convert and store from cypressc/lib/hopper.cyp,
mask, init and finish from cypressc/lib/softmax.cyp; the program with every tree written out
is tests/programs/full/flash_attention2.cyp.  The softmax tree stays here: it also rescales O
(its variants take O), where the library's (flash_attention3's) leaves that to "rescale".
"""

T = dtype(f16, bf16)  # the element type of Q, K, V and O: --dtype T=bf16

from hopper_bt import mma                         # S += Q Kᵀ (K as the K-major B operand)
from hopper import mma_rs, clear, convert, store  # O += P V, P in registers; S = 0; P, O to T
from softmax import mask, init, finish            # the online softmax's other steps


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


# ---- the online softmax of one step, on the accumulator layout's rows (s = scale·log2 e),
# O rescaled in the same leaf (not the library's softmax, which leaves that to "rescale")
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
