# corpus: k += 1 rebinds a scalar name, which Cypress binds once
@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]):
    k = C.shape[0]
    k += 1
