# corpus: warpgroup_mma's operands are rank-2 tiles
@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[1, f32], A: tensor[2, f16], B: tensor[2, f16]):
    warpgroup_mma(WGMMA_64x256x16(), C, A, B)
