# corpus: N = 300 is not a wgmma shape (8..256 in steps of 8)
@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, f16], B: tensor[2, f16]):
    warpgroup_mma(WGMMA_64x300x16(), C, A, B)
