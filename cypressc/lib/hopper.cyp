"""cypressc's Hopper task library: the accumulator trees every Hopper GEMM-like program restates.

Import them by task name: `from hopper import mma, clear, copy` brings every variant of those
tasks, exactly as if written in the program (a program that wants its own variants of a task
simply does not import it).  The importing program declares the dtype parameter `T` (e.g.
`T = dtype(f16, bf16)`); the module shares its binding (`--dtype T=bf16`).  Variant names are
the ones the mappings name (mma_tile, mma_inner, mma_thread, ...).  Each tree splits a
block's f32 accumulator over the warpgroups (tunable WGS), then over the wgmma atom's layout
(PIECES, PROC, MMA), down to one thread's fragment.

mma:     C (f32) += A @ B (T), A and B in shared memory (B row-major, K x N)
mma_rs:  C (f32) += A @ B (T) with A in registers (the accumulator layout: FlashAttention's P·V)
clear:   C (f32) = 0
add:     C (f32) += X (f32), two accumulators of one layout
copy:    D (T) = C (f32) converted: the epilogue from the accumulator to shared/global
convert: the same as copy, a separate task (FlashAttention's P = T(S), a register tile)
store:   the same as copy, a separate task (FlashAttention's O)

K-major Bᵀ: hopper_bt.cyp's mma.  Tiles split by columns: hopper_cols.cyp.  Online softmax:
softmax.cyp.  Row sums: reduction.cyp.  A user C++ function over the accumulator: epilogue.cyp.
"""

T = dtype(f16, bf16)  # the 16-bit element type of the operands: bound by the importing program

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


# ---- C += A @ B with A (e.g. FlashAttention's P) in registers
@task("mma_rs", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_rs_tile(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, A.shape[1]))
    for i in prange(WGS):
        launch("mma_rs", Cp[i, 0], Ap[i, 0], B)


@task("mma_rs", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_rs_inner(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Ap = partition_by_mma(A, MMA, PROC, "A")
    Bp = partition_by_mma(B, MMA, PROC, "B")
    for i in prange(PIECES):
        launch("mma_rs", Cp[i], Ap[i], Bp[i])


@task("mma_rs", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_rs_thread(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
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


# ---- C += X for two f32 accumulators: same distribution as "clear", per-thread adds
@task("add", Inner, reads=["C", "X"], writes=["C"])
def add_tile(C: tensor[2, f32], X: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Xp = partition_by_blocks(X, (M / WGS, N))
    for i in prange(WGS):
        launch("add", Cp[i, 0], Xp[i, 0])


@task("add", Inner, reads=["C", "X"], writes=["C"])
def add_inner(C: tensor[2, f32], X: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Xp = partition_by_mma(X, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("add", Cp[i], Xp[i])


@task("add", Leaf, reads=["C", "X"], writes=["C"])
def add_thread(C: tensor[2, f32], X: tensor[2, f32]):
    add(C, X)


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


# ---- D = C converted to T: a register tile (FlashAttention's P)
@task("convert", Inner, reads=["C"], writes=["D"])
def convert_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("convert", Cp[i, 0], Dp[i, 0])


@task("convert", Inner, reads=["C"], writes=["D"])
def convert_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("convert", Cp[i], Dp[i])


@task("convert", Leaf, reads=["C"], writes=["D"])
def convert_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)


# ---- D = C converted to T: the output (FlashAttention's O)
@task("store", Inner, reads=["C"], writes=["D"])
def store_tile(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Dp = partition_by_blocks(D, (M / WGS, N))
    for i in prange(WGS):
        launch("store", Cp[i, 0], Dp[i, 0])


@task("store", Inner, reads=["C"], writes=["D"])
def store_inner(C: tensor[2, f32], D: tensor[2, T]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Dp = partition_by_mma(D, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("store", Cp[i], Dp[i])


@task("store", Leaf, reads=["C"], writes=["D"])
def store_thread(C: tensor[2, f32], D: tensor[2, T]):
    copy(C, D)
