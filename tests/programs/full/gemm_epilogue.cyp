"""C = act(A @ B + bias): a GEMM with a fused epilogue written by the user in C++ (the
Cypress paper's call-external, §3.2).

A: M x K, B: K x N, C: M x N, all row-major T (f16 or bf16); bias: N, BIAS (f32 by
default, or f16/bf16: --dtype BIAS=bf16).  The accumulator is f32.  act is a program
parameter: GELU (tanh approximation, the default) or SiLU: --param ACT=bias_silu.

The epilogue is the leaf function ACT, declared below with @external and defined in
programs/ops/epilogue.cuh (NumPy reference: programs/ops/epilogue.py).  It runs on each
thread's accumulator fragment in registers, between the last wgmma and the store, so C is
written once: this is programs/gemm.cyp plus the "epilogue" tree.
"""

include("ops/epilogue.cuh")

T = dtype(f16, bf16)          # the element type of A, B and C: --dtype T=bf16
BIAS = dtype(f32, f16, bf16)  # the element type of bias: --dtype BIAS=bf16


@external("cypress_ops::bias_gelu", writes=["x"])
def bias_gelu(x: tensor[2, f32], bias: tensor[1, BIAS]):
    """x = GELU_tanh(x + bias); bias is per column (broadcast along the rows)."""


@external("cypress_ops::bias_silu", writes=["x"])
def bias_silu(x: tensor[2, f32], bias: tensor[1, BIAS]):
    """x = SiLU(x + bias) = (x + bias) * sigmoid(x + bias); bias per column."""


ACT = choice(bias_gelu, bias_silu)  # the activation: --param ACT=bias_silu


@task("gemm_epilogue", Inner, reads=["A", "B", "bias"], writes=["C"])
def gemm_epilogue_host(C: tensor[(M, N), T], A: tensor[(M, K), T], B: tensor[(K, N), T],
                       bias: tensor[(N,), BIAS]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (K, V))
    biasp = partition_by_blocks(bias, (V,))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm_epilogue", Cp[i, j], Ap[i, 0], Bp[0, j], biasp[j])


@task("gemm_epilogue", Inner, reads=["A", "B", "bias"], writes=["C"])
def gemm_epilogue_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T], bias: tensor[1, BIAS]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("epilogue", Cacc, bias)
    launch("copy", Cacc, C)


# ---- C += A @ B on the Tensor Core: block -> warpgroups -> warps -> threads
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
    warpgroup_mma(MMA, C, A, B)


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


# ---- C = act(C + bias): the user's epilogue on each thread's fragment.  The warpgroups
# split C's rows; every thread reads the block's whole bias vector, element c for its
# fragment's column c.
@task("epilogue", Inner, reads=["C", "bias"], writes=["C"])
def epilogue_tile(C: tensor[2, f32], bias: tensor[1, BIAS]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("epilogue", Cp[i, 0], bias)


@task("epilogue", Inner, reads=["C", "bias"], writes=["C"])
def epilogue_inner(C: tensor[2, f32], bias: tensor[1, BIAS]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("epilogue", Cp[i], bias)


@task("epilogue", Leaf, reads=["C", "bias"], writes=["C"])
def epilogue_thread(C: tensor[2, f32], bias: tensor[1, BIAS]):
    ACT(C, bias)


# ---- D = C converted to T: the store
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
