"""FlashAttention backward's preprocess (issue #38; FlashAttention-3's
flash_bwd_preprocess_kernel.h): Dsum = rowsum(dO ∘ O) in f32 and dQacc = 0.

O, dO: B x H x M x D of T (f16 or bf16), as programs/flash_attention3.cyp's O; Dsum: B x H x M
f32 (the backward's D, read per query row); dQacc: B x H x M x D f32, the accumulator the main
kernel adds dQ into, cleared here.  Any M; D up to the mapping's E.

No main loop and no Tensor Core: each block reads its U x E tiles of O and dO straight from
global memory into f32 registers (laid out like a wgmma accumulator, so that the row sums are
the warpgroup row reductions of cypressc/lib/reduction.cyp's store_sums), multiplies them,
stores the row sums and writes a tile of zeros.  Memory-bound: the mapping picks tile sizes.
"""

T = dtype(f16, bf16)  # the element type of O and dO: --dtype T=bf16

from elementwise import load, mul, copy_f32   # global -> registers, C *= X, registers -> global (f32)
from hopper import clear                       # C = 0
from reduction import store_sums               # y = the row sums of C, stored from registers


@task("prep", Inner, reads=["O", "dO"], writes=["Dsum", "dQacc"])
def prep_host(Dsum: tensor[(B, H, M), f32], dQacc: tensor[(B, H, M, D), f32],
              O: tensor[(B, H, M, D), T], dO: tensor[(B, H, M, D), T]):
    Ds, Zs = partition_by_slices(Dsum, 0), partition_by_slices(dQacc, 0)
    Os, dOs = partition_by_slices(O, 0), partition_by_slices(dO, 0)
    for b in prange(B):
        launch("prep_heads", Ds[b], Zs[b], Os[b], dOs[b])


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
