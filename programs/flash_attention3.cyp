"""FlashAttention-3 forward (the Cypress paper's §5.3; issue #12): the program of
programs/flash_attention2.cyp — same interface, same result — with its main loop rewritten in
FlashAttention-3's software-pipelined order.

O = softmax(Q @ Kᵀ · scale) @ V and LSE per (batch, head); Q, O: B x H x M x D, K, V:
B x HK x N x D (grouped-query heads), LSE: B x H x M f32, ``scale`` a float, ``causal`` 0 or 1
(top-left aligned); any M and N; D up to the mapping's E.  See flash_attention2.cyp for the
algorithm.

The rewrite: step 0's S = Q·K[0]ᵀ and its softmax are peeled off the loop, the last
O += P·V[nk-1] after it, and step k of the loop issues, in this order,
S = Q·K[k+1]ᵀ, then O += P·V[k] with the P of the step before (a carried copy of the first
GEMM's result, converted to T), then the mask and the online softmax of the new S, then the
rescale of O and the new P.  In sequential order nothing between the two GEMMs and the
softmax of the new scores depends on O += P·V, so the compiler finds that the second GEMM
may run on the Tensor Core while the softmax runs on the CUDA cores: it commits the two GEMMs
as separate groups, waits for the first only (``wait_group 1``) before the mask, for both
before the rescale, releases the K stage after the first wait and the V stage after the
second.  The program says none of that: no waits, no roles, no stage indices.

Every tree below the block comes from cypressc's library: S = Q·Kᵀ's mma from
cypressc/lib/hopper_bt.cyp, mma_rs, clear, convert and store from cypressc/lib/hopper.cyp,
the online-softmax steps from cypressc/lib/softmax.cyp; the program with every tree written
out is tests/programs/full/flash_attention3.cyp.
"""

T = dtype(f16, bf16)  # the element type of Q, K, V and O: --dtype T=bf16

from hopper_bt import mma                                 # S += Q Kᵀ (K as the K-major B operand)
from hopper import mma_rs, clear, convert, store          # O += P V, P in registers; S = 0; P, O to T
from softmax import mask, softmax, rescale, init, finish  # the online softmax's steps


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
    P: tensor[2, T] = make_tensor(U, W)
    # the K/V tiles: causal, up to the block's last query row; else all N (the min picks N)
    nk = cdiv(min(N, q0 + U + (1 - causal) * N), W)
    launch("clear", Oacc)
    launch("init", m, l)
    # step 0: S = Q K[0]ᵀ, its softmax, P
    S0: tensor[2, f32] = make_tensor(U, W)
    alpha0: tensor[1, f32] = make_tensor(U)  # exp2(-inf): O is still zero, nothing rescales
    launch("clear", S0)
    launch("mma", S0, Q, Kp[0, 0])
    launch("mask", S0, N, q0 + (1 - causal) * (N + W))
    launch("softmax", S0, m, l, alpha0, scale * 1.4426950408889634)
    launch("convert", S0, P)
    # step k + 1's scores beside step k's O += P V
    for k in srange(nk - 1):
        S: tensor[2, f32] = make_tensor(U, W)
        alpha: tensor[1, f32] = make_tensor(U)
        launch("clear", S)
        launch("mma", S, Q, Kp[k + 1, 0])
        launch("mma_rs", Oacc, P, Vp[k, 0])
        launch("mask", S, N - (k + 1) * W, q0 - (k + 1) * W + (1 - causal) * (N + W))
        launch("softmax", S, m, l, alpha, scale * 1.4426950408889634)
        launch("rescale", Oacc, alpha)
        launch("convert", S, P)
    launch("mma_rs", Oacc, P, Vp[nk - 1, 0])
    launch("finish", Oacc, LSE, m, l, scale)
    launch("store", Oacc, O)
