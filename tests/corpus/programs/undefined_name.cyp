# corpus: K is never defined
@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]):
    W = tunable(int)
    Ap = partition_by_blocks(A, (C.shape[0], W))
    for k in srange(cdiv(K, W)):
        pass
