"""cypressc's Hopper task library: row sums of a tile, beside a GEMM (the Cypress paper's
§5.2 GEMM+Reduction).

Import them by task name, e.g. `from reduction import rowsum, clear_vec, copy_vec`.  The
importing program declares the dtype parameter `T` (e.g. `T = dtype(f16, bf16)`); the module
shares its binding.

On the CUDA cores (block -> WGS warpgroups -> one row per thread):
rowsum:    y (f32, M) += the row sums of A (T, M x K)
clear_vec: y (f32) = 0, distributed like rowsum
copy_vec:  z (f32) = y, distributed like rowsum

On the Tensor Core (y = A @ 1 as an N = 8 wgmma against a tile of 1/8; the atom is the
tunable SUMS, apart from the main product's MMA):
clear_sums: Yacc (f32, M x 8) = 0
ones:       E (T, 8 x W) = 1/8 (rows over warpgroups, then WARPS warps, PER columns a thread)
mma_sums:   Yacc += A @ Eᵀ (E read K-major)
store_sums: y = the row sums of C (Yacc's 8 columns, or any f32 tile), stored from registers
"""

T = dtype(f16, bf16)  # the 16-bit element type of A: bound by the importing program

# ---- y += row sums of A on the CUDA cores: block -> warpgroups -> one row per thread
@task("rowsum", Inner, reads=["y", "A"], writes=["y"])
def rowsum_tile(y: tensor[1, f32], A: tensor[2, T]):
    WGS = tunable(int)
    M, K = A.shape[0], A.shape[1]
    yp = partition_by_blocks(y, (M / WGS,))
    Ap = partition_by_blocks(A, (M / WGS, K))
    for i in prange(WGS):
        launch("rowsum", yp[i], Ap[i, 0])


@task("rowsum", Inner, reads=["y", "A"], writes=["y"])
def rowsum_rows(y: tensor[1, f32], A: tensor[2, T]):
    M, K = A.shape[0], A.shape[1]
    yp = partition_by_blocks(y, (1,))
    Ap = partition_by_blocks(A, (1, K))
    for r in prange(M):
        launch("rowsum", yp[r], Ap[r, 0])


@task("rowsum", Leaf, reads=["y", "A"], writes=["y"])
def rowsum_thread(y: tensor[1, f32], A: tensor[2, T]):
    row_sum(y, A)


# ---- y = 0 for the f32 row-sum accumulator (distributed like "rowsum")
@task("clear_vec", Inner, writes=["y"])
def clear_vec_tile(y: tensor[1, f32]):
    WGS = tunable(int)
    M = y.shape[0]
    yp = partition_by_blocks(y, (M / WGS,))
    for i in prange(WGS):
        launch("clear_vec", yp[i])


@task("clear_vec", Inner, writes=["y"])
def clear_vec_rows(y: tensor[1, f32]):
    M = y.shape[0]
    yp = partition_by_blocks(y, (1,))
    for r in prange(M):
        launch("clear_vec", yp[r])


@task("clear_vec", Leaf, writes=["y"])
def clear_vec_thread(y: tensor[1, f32]):
    fill(y, 0)


# ---- z = y: store the row sums (distributed like "rowsum")
@task("copy_vec", Inner, reads=["y"], writes=["z"])
def copy_vec_tile(y: tensor[1, f32], z: tensor[1, f32]):
    WGS = tunable(int)
    M = y.shape[0]
    yp = partition_by_blocks(y, (M / WGS,))
    zp = partition_by_blocks(z, (M / WGS,))
    for i in prange(WGS):
        launch("copy_vec", yp[i], zp[i])


@task("copy_vec", Inner, reads=["y"], writes=["z"])
def copy_vec_rows(y: tensor[1, f32], z: tensor[1, f32]):
    M = y.shape[0]
    yp = partition_by_blocks(y, (1,))
    zp = partition_by_blocks(z, (1,))
    for r in prange(M):
        launch("copy_vec", yp[r], zp[r])


@task("copy_vec", Leaf, reads=["y"], writes=["z"])
def copy_vec_thread(y: tensor[1, f32], z: tensor[1, f32]):
    copy(y, z)


# ---- the Tensor-Core row sums (gemm_reduction_block_tc), their atom the tunable SUMS (N = 8:
# Yacc's columns), apart from the main product's MMA so that a tuner moves them separately.
# Yacc = 0
@task("clear_sums", Inner, writes=["C"])
def clear_sums_tile(C: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("clear_sums", Cp[i, 0])


@task("clear_sums", Inner, writes=["C"])
def clear_sums_inner(C: tensor[2, f32]):
    PIECES, PROC, SUMS = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, SUMS, PROC, "C")
    for i in prange(PIECES):
        launch("clear_sums", Cp[i])


@task("clear_sums", Leaf, writes=["C"])
def clear_sums_thread(C: tensor[2, f32]):
    fill(C, 0)


# ---- E = 1/8: rows over the warpgroups, then over WARPS warps, PER columns per thread
@task("ones", Inner, writes=["E"])
def ones_tile(E: tensor[2, T]):
    WGS = tunable(int)
    R, K = E.shape[0], E.shape[1]
    Ep = partition_by_blocks(E, (R / WGS, K))
    for i in prange(WGS):
        launch("ones", Ep[i, 0])


@task("ones", Inner, writes=["E"])
def ones_rows(E: tensor[2, T]):
    WARPS = tunable(int)
    R, K = E.shape[0], E.shape[1]
    Ep = partition_by_blocks(E, (R / WARPS, K))
    for w in prange(WARPS):
        launch("ones", Ep[w, 0])


@task("ones", Inner, writes=["E"])
def ones_pieces(E: tensor[2, T]):
    PER = tunable(int)
    R, K = E.shape[0], E.shape[1]
    Ep = partition_by_blocks(E, (R, PER))
    for c in prange(K / PER):
        launch("ones", Ep[0, c])


@task("ones", Leaf, writes=["E"])
def ones_thread(E: tensor[2, T]):
    fill(E, 0.125)


# ---- Yacc += A @ Eᵀ (E stored 8 x W, contiguous along K: a K-major B operand)
@task("mma_sums", Inner, reads=["C", "A", "E"], writes=["C"])
def mma_sums_tile(C: tensor[2, f32], A: tensor[2, T], E: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    Ap = partition_by_blocks(A, (M / WGS, A.shape[1]))
    for i in prange(WGS):
        launch("mma_sums", Cp[i, 0], Ap[i, 0], E)


@task("mma_sums", Inner, reads=["C", "A", "E"], writes=["C"])
def mma_sums_inner(C: tensor[2, f32], A: tensor[2, T], E: tensor[2, T]):
    PIECES, PROC, SUMS = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, SUMS, PROC, "C")
    Ap = partition_by_mma(A, SUMS, PROC, "A")
    Ep = partition_by_mma(E, SUMS, PROC, "Bt")
    for i in prange(PIECES):
        launch("mma_sums", Cp[i], Ap[i], Ep[i])


@task("mma_sums", Leaf, reads=["C", "A", "E"], writes=["C"])
def mma_sums_thread(C: tensor[2, f32], A: tensor[2, T], E: tensor[2, T]):
    SUMS = tunable(atom)
    warpgroup_mma_bt(SUMS, C, A, E)


# ---- y = the sum of Yacc's 8 columns (each y / 8): a per-row vector, stored from registers
@task("store_sums", Inner, reads=["C"], writes=["y"])
def store_sums_tile(C: tensor[2, f32], y: tensor[1, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    yp = partition_by_blocks(y, (M / WGS,))
    for i in prange(WGS):
        launch("store_sums", Cp[i, 0], yp[i])


@task("store_sums", Inner, reads=["C"], writes=["y"])
def store_sums_inner(C: tensor[2, f32], y: tensor[1, f32]):
    PIECES, PROC, SUMS = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, SUMS, PROC, "C")
    yp = partition_by_mma(y, SUMS, PROC, "C")
    for i in prange(PIECES):
        launch("store_sums", Cp[i], yp[i])


@task("store_sums", Leaf, reads=["C"], writes=["y"])
def store_sums_thread(C: tensor[2, f32], y: tensor[1, f32]):
    fill(y, 0)
    warpgroup_row_sum(y, C)
