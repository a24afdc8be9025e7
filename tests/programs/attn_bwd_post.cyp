"""FlashAttention backward's postprocess (issue #38; FlashAttention-3's
flash_bwd_postprocess_kernel.h): dQ = T(scale · dQacc).

dQacc: B x H x M x D f32 (the main kernel's accumulated dQ), dQ: B x H x M x D of T (f16 or
bf16), the layout of programs/flash_attention3.cyp's Q; ``scale`` a float.  Any M; D up to the
mapping's E.

No main loop and no Tensor Core: each block reads its U x E tile of dQacc straight from global
memory into registers (laid out like a wgmma accumulator), scales it and stores it converted
to T, each thread its fragment.  Memory-bound: the mapping picks tile sizes.
"""

T = dtype(f16, bf16)  # the element type of dQ: --dtype T=bf16

from elementwise import load_f32, scale   # global -> registers (f32), C *= s
from hopper import store                  # registers -> global, converted to T


@task("post", Inner, reads=["dQacc"], writes=["dQ"])
def post_host(dQ: tensor[(B, H, M, D), T], dQacc: tensor[(B, H, M, D), f32], scale: float):
    Qs, As = partition_by_slices(dQ, 0), partition_by_slices(dQacc, 0)
    for b in prange(B):
        launch("post_heads", Qs[b], As[b], scale)


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
