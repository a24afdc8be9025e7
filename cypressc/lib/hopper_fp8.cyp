"""cypressc's Hopper task library: the mma tree of FP8 operands.

`from hopper_fp8 import mma` brings task "mma" (variants mma_tile, mma_inner, mma_thread):
C (f32) += A @ Bᵀ (F8: e4m3 or e5m2) with B stored N x K, both operands contiguous along K as
an FP8 wgmma reads them (`warpgroup_mma_bt` on a k32 atom, `WGMMA_64xNx32`, derived from the
operands when the mapping leaves it unbound).  The importing program declares the dtype
parameter `F8` (e.g. `F8 = dtype(f8e4m3, f8e5m2)`); the module shares its binding.
"""

F8 = dtype(f8e4m3, f8e5m2)  # the FP8 element type of the operands: bound by the importing program

# ---- C += A @ Bᵀ on the Tensor Core: block -> warpgroups -> warps -> threads
@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_tile(C: tensor[2, f32], A: tensor[2, F8], B: tensor[2, F8]):
    WGS = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, K))
    for i in prange(WGS):
        launch("mma", Cp[i, 0], Ap[i, 0], B)


@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_inner(C: tensor[2, f32], A: tensor[2, F8], B: tensor[2, F8]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma", Cp[i], Ap[i], Bp[i])


@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, F8], B: tensor[2, F8]):
    MMA = tunable(atom)
    warpgroup_mma_bt(MMA, C, A, B)
