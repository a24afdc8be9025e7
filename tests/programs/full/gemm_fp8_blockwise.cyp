"""C = Σ_k diag(SA[k]) · (A_k @ B_kᵀ) · SB_k on FP8 operands, A_k and B_k the k-th 128-wide K
blocks: block-scaled FP8 as DeepSeek-V3 / DeepGEMM, A scaled per 1 x 128 (a row of a K block),
B per 128 x 128 (a block of 128 rows of a K block), with two-level accumulation.

A: M x K and B: N x K in F8 (e4m3 or e5m2), K-major; C: M x N in T (bf16 or f16).  SA: KB x M
f32, SA[k, i] the scale of row i of A's K block k (M contiguous, as DeepGEMM stores it for
TMA); SB: NB x KB f32, SB[j, k] the scale of B's rows 128 j ... 128 j + 127 in K block k
(DeepGEMM's layout); KB >= cdiv(K, 128) and NB >= cdiv(N, 128) (the launcher checks both).

Each K block's product goes into its own accumulator Tmp (cleared per block: the wgmma's
scale-d), whose sum the Tensor Core keeps to about 14 bits, and the CUDA cores promote it into
the f32 accumulator with both scales (programs/ops/scales.cuh's promote: one FMA per element,
B's block scale one element read once per step).  The K block and the N tile are the scales'
blocks, so they are written here (128), not tunables: a mapping cannot change them.
"""

include("ops/scales.cuh")

F8 = dtype(f8e4m3, f8e5m2)  # the element type of A and B: --dtype F8=f8e5m2
T = dtype(bf16, f16)  # the element type of C: --dtype T=f16


@external("cypress_ops::promote", writes=["c"])
def promote(c: tensor[(R, S), f32], t: tensor[(R, S), f32], sa: tensor[(R,), f32],
            sb: tensor[(1,), f32]):
    """c += t * sa[r] * sb: sa per row, sb the tile's block scale."""


@task("gemm", Inner, reads=["A", "B", "SA", "SB"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(M, K), F8], B: tensor[(N, K), F8],
              SA: tensor[(KB, M), f32], SB: tensor[(NB, KB), f32]):
    U = tunable(int)
    Cp = partition_by_blocks(C, (U, 128))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (128, K))
    SAp = partition_by_blocks(SA, (KB, U))
    SBp = partition_by_blocks(SB, (1, KB))  # SBp[j, 0]: the scales of B's rows 128 j ...
    for i, j in prange(cdiv(M, U), cdiv(N, 128)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[j, 0], SAp[0, i], SBp[j, 0])


@task("gemm", Inner, reads=["A", "B", "SA", "SB"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, F8], B: tensor[2, F8], SA: tensor[2, f32],
               SB: tensor[2, f32]):
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, 128))
    Bp = partition_by_blocks(B, (N, 128))
    SAs = partition_by_slices(SA, 0)
    SBs = partition_by_slices(SB, 1)  # SBs[k]: this tile's scale of K block k (one element)
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, 128)):
        Tmp: tensor[2, f32] = make_tensor(M, N)  # this K block's product: a step's own tensor
        launch("clear", Tmp)
        launch("mma", Tmp, Ap[0, k], Bp[0, k])
        launch("promote", Cacc, Tmp, SAs[k], SBs[k])
    launch("copy", Cacc, C)


# The same result software-pipelined, as flash_attention3.cyp's key loop: step k issues K block
# k's product, then promotes block k - 1's (carried in Prev) while that wgmma runs, so
# sync-insertion can leave the wgmma in flight across the promotion.  Step 0 promotes the
# cleared Prev (adding zeros), so no step is peeled.  A mapping picks it with
# `variant: gemm_block_overlap`.
@task("gemm", Inner, reads=["A", "B", "SA", "SB"], writes=["C"])
def gemm_block_overlap(C: tensor[2, T], A: tensor[2, F8], B: tensor[2, F8], SA: tensor[2, f32],
                       SB: tensor[2, f32]):
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, 128))
    Bp = partition_by_blocks(B, (N, 128))
    SAs = partition_by_slices(SA, 0)
    SBs = partition_by_slices(SB, 1)  # SBs[k]: this tile's scale of K block k (one element)
    nk = cdiv(K, 128)
    Cacc: tensor[2, f32] = make_tensor(M, N)
    Prev: tensor[2, f32] = make_tensor(M, N)  # the previous K block's product
    launch("clear", Cacc)
    launch("clear", Prev)
    for k in srange(nk):
        Tmp: tensor[2, f32] = make_tensor(M, N)
        launch("clear", Tmp)
        launch("mma", Tmp, Ap[0, k], Bp[0, k])
        launch("promote", Cacc, Prev, SAs[max(k - 1, 0)], SBs[max(k - 1, 0)])
        launch("copy_f32", Tmp, Prev)
    launch("promote", Cacc, Prev, SAs[nk - 1], SBs[nk - 1])
    launch("copy", Cacc, C)


# ---- C += Tmp * sa[r] * sb: the warpgroups split the rows (and sa with them)
@task("promote", Inner, reads=["C", "Tmp", "sa", "sb"], writes=["C"])
def promote_tile(C: tensor[2, f32], Tmp: tensor[2, f32], sa: tensor[1, f32], sb: tensor[1, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Tp = partition_by_blocks(Tmp, (M / WGS, N))
    sap = partition_by_blocks(sa, (M / WGS,))
    for i in prange(WGS):
        launch("promote", Cp[i, 0], Tp[i, 0], sap[i], sb)


@task("promote", Inner, reads=["C", "Tmp", "sa", "sb"], writes=["C"])
def promote_inner(C: tensor[2, f32], Tmp: tensor[2, f32], sa: tensor[1, f32], sb: tensor[1, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Tp = partition_by_mma(Tmp, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("promote", Cp[i], Tp[i], sa, sb)


@task("promote", Leaf, reads=["C", "Tmp", "sa", "sb"], writes=["C"])
def promote_thread(C: tensor[2, f32], Tmp: tensor[2, f32], sa: tensor[1, f32], sb: tensor[1, f32]):
    promote(C, Tmp, sa, sb)


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


# ---- C = 0 for the f32 accumulator
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("clear", Cp[i, 0])


@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("clear", Cp[i])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)


# ---- D = C converted to T: the epilogue
@task("copy", Inner, reads=["C"], writes=["D"])
def copy_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("copy", Cp[i, 0], Dp[i, 0])


@task("copy", Inner, reads=["C"], writes=["D"])
def copy_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("copy", Cp[i], Dp[i])


@task("copy", Leaf, reads=["C"], writes=["D"])
def copy_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)


# ---- D = C (f32 -> f32)
@task("copy_f32", Inner, reads=["C"], writes=["D"])
def copy_f32_tile(C: tensor[2, f32], D: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("copy_f32", Cp[i, 0], Dp[i, 0])


@task("copy_f32", Inner, reads=["C"], writes=["D"])
def copy_f32_inner(C: tensor[2, f32], D: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("copy_f32", Cp[i], Dp[i])


@task("copy_f32", Leaf, reads=["C"], writes=["D"])
def copy_f32_thread(C: tensor[2, f32], D: tensor[2, f32]):
    copy(C, D)
