# corpus: a slice of a batch is rank 2; the rank-3 tensor itself is passed
@task("batched", Inner, reads=["A"], writes=["C"])
def batched_host(C: tensor[3, f32], A: tensor[3, f32]):
    Cs = partition_by_slices(C, 0)
    for l in prange(C.shape[0]):
        launch("add", Cs[l], A)


@task("add", Leaf, reads=["C", "X"], writes=["C"])
def add_thread(C: tensor[2, f32], X: tensor[2, f32]):
    add(C, X)
