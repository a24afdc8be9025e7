"""cypressc's Hopper task library: element-wise trees over a block's f32 register tile laid out
like the wgmma accumulator, for kernels that move and combine tiles without the Tensor Core
(FlashAttention backward's preprocess and postprocess, issue #38).

Import them by task name, e.g. `from elementwise import load, mul, scale`.  The importing program
declares the dtype parameter `T` (e.g. `T = dtype(f16, bf16)`); the module shares its binding.
Each tree splits the block's tile over the warpgroups (tunable WGS), then over the layout of the
accumulator of the wgmma atom MMA (PIECES, PROC, MMA), as cypressc/lib/hopper.cyp's trees do
(its `wgmma` mapping template maps them): no wgmma runs, the atom only lays the tile out, so a
quad of lanes reads and writes 8 contiguous columns of a row (whole 32-byte sectors of f32).

load:     C (f32) = X (T), read straight from global memory into registers (mems [NONE, GLOBAL])
load_f32: C (f32) = X (f32), the same for an f32 tile
mul:      C (f32) *= X (f32), element by element
scale:    C (f32) *= s (a float)
copy_f32: D (f32) = C (f32), stored straight from registers (hopper.cyp's copy stores T)
"""

T = dtype(f16, bf16)  # the 16-bit element type of load's source: bound by the importing program


# ---- C = X (T -> f32): block -> warpgroups -> warps -> threads
@task("load", Inner, reads=["X"], writes=["C"])
def load_tile(X: tensor[2, T], C: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Xp = partition_by_blocks(X, (M / WGS, N))
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("load", Xp[i, 0], Cp[i, 0])


@task("load", Inner, reads=["X"], writes=["C"])
def load_inner(X: tensor[2, T], C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Xp = partition_by_mma(X, MMA, PROC, "C")
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("load", Xp[i], Cp[i])


@task("load", Leaf, reads=["X"], writes=["C"])
def load_thread(X: tensor[2, T], C: tensor[2, f32]):
    copy(X, C)


# ---- C = X (f32)
@task("load_f32", Inner, reads=["X"], writes=["C"])
def load_f32_tile(X: tensor[2, f32], C: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Xp = partition_by_blocks(X, (M / WGS, N))
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("load_f32", Xp[i, 0], Cp[i, 0])


@task("load_f32", Inner, reads=["X"], writes=["C"])
def load_f32_inner(X: tensor[2, f32], C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Xp = partition_by_mma(X, MMA, PROC, "C")
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("load_f32", Xp[i], Cp[i])


@task("load_f32", Leaf, reads=["X"], writes=["C"])
def load_f32_thread(X: tensor[2, f32], C: tensor[2, f32]):
    copy(X, C)


# ---- C *= X
@task("mul", Inner, reads=["C", "X"], writes=["C"])
def mul_tile(C: tensor[2, f32], X: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Xp = partition_by_blocks(X, (M / WGS, N))
    for i in prange(WGS):
        launch("mul", Cp[i, 0], Xp[i, 0])


@task("mul", Inner, reads=["C", "X"], writes=["C"])
def mul_inner(C: tensor[2, f32], X: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    Xp = partition_by_mma(X, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("mul", Cp[i], Xp[i])


@task("mul", Leaf, reads=["C", "X"], writes=["C"])
def mul_thread(C: tensor[2, f32], X: tensor[2, f32]):
    mul(C, X)


# ---- C *= s
@task("scale", Inner, reads=["C"], writes=["C"])
def scale_tile(C: tensor[2, f32], s: float):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("scale", Cp[i, 0], s)


@task("scale", Inner, reads=["C"], writes=["C"])
def scale_inner(C: tensor[2, f32], s: float):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("scale", Cp[i], s)


@task("scale", Leaf, reads=["C"], writes=["C"])
def scale_thread(C: tensor[2, f32], s: float):
    scale(C, s)


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
