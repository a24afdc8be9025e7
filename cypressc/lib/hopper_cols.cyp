"""cypressc's Hopper task library: hopper.cyp's block-level trees with the block's tile split
among the warpgroups by columns instead of rows.

`from hopper_cols import mma, clear, copy, store` (beside `from hopper import ...` of the same
tasks) adds a second BLOCK variant to each, `<task>_cols`: each of the WGS warpgroups takes all
M rows and N / WGS columns of the tile (mma's B split the same way, A whole), and below the
block the trees are hopper.cyp's.  For a tile of one 64-row atom that several warpgroups share,
e.g. the attention backward's dQ of a 64-query block.  The mapping picks the variant:
`{tree: mma, template: wgmma_cols, ...}` (cypressc/lib/hopper.yaml); each warpgroup's wgmma
then reads its own chunk of the B stage (tests/programs/gemm_cols.cyp).  The importing program
declares the dtype parameter `T`; the module shares its binding.
"""

T = dtype(f16, bf16)  # the 16-bit element type of the operands: bound by the importing program

@task("mma", Inner, reads=["A", "B", "C"], writes=["C"])
def mma_cols(C: tensor[2, f32], A: tensor[2, T], B: tensor[2, T]):
    WGS = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    Bp = partition_by_blocks(B, (K, N / WGS))
    for i in prange(WGS):
        launch("mma", Cp[0, i], A, Bp[0, i])


@task("clear", Inner, writes=["C"])
def clear_cols(C: tensor[2, f32]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    for i in prange(WGS):
        launch("clear", Cp[0, i])


@task("copy", Inner, reads=["C"], writes=["D"])
def copy_cols(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    Dp = partition_by_blocks(D, (M, N / WGS))
    for i in prange(WGS):
        launch("copy", Cp[0, i], Dp[0, i])


@task("store", Inner, reads=["C"], writes=["D"])
def store_cols(C: tensor[2, f32], D: tensor[2, T]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M, N / WGS))
    Dp = partition_by_blocks(D, (M, N / WGS))
    for i in prange(WGS):
        launch("store", Cp[0, i], Dp[0, i])
