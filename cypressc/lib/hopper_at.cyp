"""cypressc's Hopper task library: the mma tree with an MN-major Aᵀ operand.

`from hopper_at import mma_at` brings task "mma_at" (variants mma_at_tile, mma_at_inner,
mma_at_thread): C (f32) += Aᵀ @ B (T) where A is stored K x M, contiguous along M (the
attention backward's dV += Pᵀ·dO and dK += dSᵀ·Q, P and dS kept as the scores are), read
MN-major by the Tensor Core (`warpgroup_mma_at`, PTX ISA imm-trans-a = 1), and B is stored
K x N as hopper.cyp's mma reads it.  The block's accumulator is split among WGS warpgroups
by rows, so A's tile is split among them by columns (M); variant mma_at_cols splits it by
columns instead (A whole, B by columns; the mapping template `wgmma_cols`).  A task of its own name, so that a
program may import it beside hopper's `mma` (imports have no `as`).  The importing program
declares the dtype parameter `T` (e.g. `T = dtype(f16, bf16)`); the module shares its binding.
"""

T = dtype(f16, bf16)  # the 16-bit element type of the operands: bound by the importing program

# ---- C += Aᵀ @ B (A MN-major) on the Tensor Core: block -> warpgroups -> warps -> threads
@task("mma_at", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_at_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (A.shape[0], M / WGS))
    for i in prange(WGS):
        launch("mma_at", Cp[i, 0], Ap[0, i], B)


@task("mma_at", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_at_cols(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    Bp = partition_by_blocks(B, (B.shape[0], N / WGS))
    for i in prange(WGS):
        launch("mma_at", Cp[0, i], A, Bp[0, i])


@task("mma_at", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_at_inner(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "At")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma_at", Cp[i], Ap[i], Bp[i])


@task("mma_at", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_at_thread(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    MMA = tunable(atom)
    warpgroup_mma_at(MMA, C, A, B)
