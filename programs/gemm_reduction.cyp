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

The mma, clear and copy trees come from cypressc's library (cypressc/lib/hopper.cyp), the row
sums too (cypressc/lib/reduction.cyp); the program with every tree written out is
tests/programs/full/gemm_reduction.cyp.
"""

T = dtype(f16, bf16)  # the 16-bit element type of A, B and C: --dtype T=bf16

from hopper import mma, clear, copy                           # block -> warpgroups -> warps -> threads
from reduction import rowsum, clear_vec, copy_vec              # the SIMT row sums
from reduction import clear_sums, ones, mma_sums, store_sums  # the Tensor-Core row sums (_tc)

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
