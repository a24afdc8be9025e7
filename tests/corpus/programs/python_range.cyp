# corpus: loops iterate over prange/srange, not range
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    Cp = partition_by_blocks(C, (64, C.shape[1]))
    for i in range(2):
        launch("clear", Cp[i, 0])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
