"""C = act(alpha * A @ B + bias): a GEMM with a fused epilogue (docs/tutorial.md).

A: M x K, B: K x N, C: M x N, bias: N, all row-major T; alpha a run-time float.  The
accumulator is f32; act is the user's C++ in ops.cuh, run on each thread's registers
between the last wgmma and the store, so C is written once.
"""

include("ops.cuh")

T = dtype(f16, bf16)  # the element type of A, B, C and bias: --dtype T=bf16

from hopper import mma, clear, copy  # the library's trees: Cacc += A @ B, Cacc = 0, C = Cacc


@external("tutorial::bias_gelu", writes=["x"])
def bias_gelu(x: tensor[2, f32], bias: tensor[1, T], alpha: float):
    """x = GELU_tanh(alpha * x + bias); bias per column."""


@task("gemm", Inner, reads=["A", "B", "bias"], writes=["C"])
def gemm_host(C: tensor[(M, N), T], A: tensor[(M, K), T], B: tensor[(K, N), T],
              bias: tensor[(N,), T], alpha: float):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (K, V))
    biasp = partition_by_blocks(bias, (V,))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j], biasp[j], alpha)


@task("gemm", Inner, reads=["A", "B", "bias"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T], bias: tensor[1, T],
               alpha: float):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("epilogue", Cacc, bias, alpha)
    launch("copy", Cacc, C)


# ---- Cacc = act(alpha * Cacc + bias): a block -> warpgroups -> warps -> threads tree, laid
# out like the accumulator, whose leaf calls the user's C++ on each thread's fragment
@task("epilogue", Inner, reads=["C", "bias"], writes=["C"])
def epilogue_tile(C: tensor[2, f32], bias: tensor[1, T], alpha: float):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("epilogue", Cp[i, 0], bias, alpha)


@task("epilogue", Inner, reads=["C", "bias"], writes=["C"])
def epilogue_inner(C: tensor[2, f32], bias: tensor[1, T], alpha: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("epilogue", Cp[i], bias, alpha)


@task("epilogue", Leaf, reads=["C", "bias"], writes=["C"])
def epilogue_thread(C: tensor[2, f32], bias: tensor[1, T], alpha: float):
    bias_gelu(C, bias, alpha)
