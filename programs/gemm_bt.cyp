"""C = A @ Bᵀ: the GEMM of a linear layer (PyTorch's ``x @ W.T``, ``W`` stored out x in), the
paper's Fig. 5 Hopper GEMM with B given as the N x K matrix it is stored as.

A: M x K, B: N x K, C: M x N, all row-major T (f16 or bf16); the accumulator is f32 (task "mma").
Both operands are contiguous along K, so the block's B tiles are N x W shared tiles that the
Tensor Core reads K-major (``warpgroup_mma_bt``), like A's.

The clear and copy trees come from cypressc's library (cypressc/lib/hopper.cyp); the program
with every tree written out is tests/programs/full/gemm_bt.cyp.  The K-major mma tree stays
here: cypressc/lib/hopper_bt.cyp's (FlashAttention's) reads A's panel width from A's shape
where this one names it K, as programs/gemm.cyp does.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

from hopper import clear, copy  # block -> warpgroups -> warps -> threads

@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(M, K), T], B: tensor[(N, K), T]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (V, K))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[j, 0])


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (N, W))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[0, k])
    launch("copy", Cacc, C)


# ---- C += A @ Bᵀ on the Tensor Core: block -> warpgroups -> warps -> threads
@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, K))
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
