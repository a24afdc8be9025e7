"""cypressc's Hopper task library: the mma tree with a K-major Bᵀ operand.

`from hopper_bt import mma` brings task "mma" (variants mma_tile, mma_inner, mma_thread):
C (f32) += A @ Bᵀ (T) where B is stored N x K, contiguous along K like A (PyTorch's
`x @ W.T`; FlashAttention's S = Q·Kᵀ), read K-major by the Tensor Core
(`warpgroup_mma_bt`).  The tree is hopper.cyp's mma but for the leaf (and A's panel
width, read from A's shape), under the same task and variant names, so a program imports
one or the other.  The importing program declares the dtype parameter `T` (e.g.
`T = dtype(f16, bf16)`); the module shares its binding.
"""

T = dtype(f16, bf16)  # the 16-bit element type of the operands: bound by the importing program

# ---- C += A @ Bᵀ (B K-major) on the Tensor Core: block -> warpgroups -> warps -> threads
@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, A.shape[1]))
    for i in prange(WGS):
        launch("mma", Cp[i, 0], Ap[i, 0], B)


@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_inner(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma", Cp[i], Ap[i], Bp[i])


@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    MMA = tunable(atom)
    warpgroup_mma_bt(MMA, C, A, B)
