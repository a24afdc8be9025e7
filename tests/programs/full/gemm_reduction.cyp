"""GEMM + reduction: C = A @ B and y[i] = sum_k A[i, k], fused (the Cypress paper's §5.2
GEMM+Reduction).

A: M x K, B: K x N, C: M x N, all row-major T (f16 or bf16); y: M, f32.  C accumulates in f32.

The reduction runs on the CUDA cores (SIMT) over the A tiles the Tensor Core reads
anyway, so it overlaps the asynchronous wgmma chain.  Each thread block owns a U x V
tile of C and keeps an f32 accumulator Cacc (U x V) and an f32 vector yacc (U), both
in registers: it clears both, and in its K loop launches "mma" (Cacc += A_k @ B_k) and
"rowsum" (yacc += row sums of A_k, read from the same shared-memory tile); then it
copies Cacc to its tile of C and yacc to its piece of y.  "rowsum" splits the A tile's
rows over the WGS warpgroups and then one row per thread (partition_by_blocks by (1,)
and (1, K)); "clear_vec" and "copy_vec" distribute yacc the same way.

Variant gemm_reduction_block_tc sums on the Tensor Core instead (an N = 8 wgmma per step
against a shared tile of 1/8; mappings h100_tc, h100_tc_plain): measured slower than the SIMT
sums on an H100 at 4096³ (bench/NOTES.md, session 11), kept as the mapping's choice.

The column tiles are an srange on the HOST around a prange over row tiles, not one 2-D
prange as in programs/gemm.cyp: every column tile j of a row i writes the same piece
y[i], so a 2-D prange's writes are not disjoint (E030), and the language has no way to
say "only column 0 writes y" or "these writes are equal".  Sequentially the last column
tile's y survives; the backend keeps only that store and skips the SIMT row sums whose
value no other column tile stores.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

@task("gemm_reduction", Inner, reads=["A", "B"], writes=["C", "y"])
def gemm_reduction_host(C: tensor[(M, N), T], y: tensor[(M,), f32], A: tensor[(M, K), T],
                        B: tensor[(K, N), T]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    yp = partition_by_blocks(y, (U,))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (K, V))
    for j in srange(cdiv(N, V)):
        for i in prange(cdiv(M, U)):
            launch("gemm_reduction", Cp[i, j], yp[i], Ap[i, 0], Bp[0, j])


@task("gemm_reduction", Inner, reads=["A", "B"], writes=["C", "y"])
def gemm_reduction_block(C: tensor[2, T], y: tensor[1, f32], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    yacc: tensor[1, f32] = make_tensor(M)
    launch("clear", Cacc)
    launch("clear_vec", yacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
        launch("rowsum", yacc, Ap[0, k])
    launch("copy", Cacc, C)
    launch("copy_vec", yacc, y)


@task("gemm_reduction", Inner, reads=["A", "B"], writes=["C", "y"])
def gemm_reduction_block_tc(C: tensor[2, T], y: tensor[1, f32], A: tensor[2, T], B: tensor[2, T]):
    """The same block with the row sums on the Tensor Core: y = A @ 1.

    E is an 8 x W tile holding 1/8 everywhere (SHARED, written once before the K loop); every
    step also launches "mma_sums" (Yacc += A_k @ Eᵀ, an N = 8 wgmma reading the shared A
    tile the main wgmma reads), so each of Yacc's 8 columns (M x 8, f32 registers) holds
    the running row sum / 8.  "store_sums" adds the 8 equal columns into y's rows (held in
    registers, stored per row).  Scaling by a power of two commutes with rounding, and 8 equal values sum exactly
    in the order either machine uses (pairs, then pairs of pairs), so y is the sum the
    Tensor Core accumulated, with inf and NaN propagating as in a plain sum.  A ragged
    last K tile is zero-filled by its load, so padding adds nothing."""
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    Yacc: tensor[2, f32] = make_tensor(M, 8)
    E: tensor[2, T] = make_tensor(8, W)
    launch("clear", Cacc)
    launch("clear_sums", Yacc)
    launch("ones", E)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
        launch("mma_sums", Yacc, Ap[0, k], E)
    launch("copy", Cacc, C)
    launch("store_sums", Yacc, y)


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
