# corpus: a rank-2 tensor partitioned with one block extent
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    Cp = partition_by_blocks(C, (64,))
    for i in prange(2):
        launch("clear", Cp[i, 0])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
