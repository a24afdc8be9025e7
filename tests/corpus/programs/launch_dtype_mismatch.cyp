# corpus: the f16 output passed where "mma" wants its f32 accumulator
@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]):
    launch("mma", C, A, B)


@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, f16], B: tensor[2, f16]):
    warpgroup_mma(WGMMA_64x256x16(), C, A, B)
