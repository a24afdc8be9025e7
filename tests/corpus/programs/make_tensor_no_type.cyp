# corpus: a make_tensor needs its type written out
@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]):
    Cacc = make_tensor(C.shape[0], C.shape[1])
