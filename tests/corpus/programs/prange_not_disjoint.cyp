# corpus: every column block j writes the same piece of y: not provably disjoint
@task("rowsum", Inner, reads=["A"], writes=["y"])
def rowsum_host(y: tensor[1, f32], A: tensor[2, f16]):
    U, V = tunable(int), tunable(int)
    yp = partition_by_blocks(y, (U,))
    Ap = partition_by_blocks(A, (U, V))
    for i, j in prange(cdiv(A.shape[0], U), cdiv(A.shape[1], V)):
        launch("rowsum", yp[i], Ap[i, j])


@task("rowsum", Leaf, reads=["y", "A"], writes=["y"])
def rowsum_thread(y: tensor[1, f32], A: tensor[2, f16]):
    row_sum(y, A)
