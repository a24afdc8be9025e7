# corpus: tunable() takes int, processor or atom
@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]):
    U = tunable(float)
