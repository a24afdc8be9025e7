# corpus: srange is one-dimensional
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    Cp = partition_by_blocks(C, (64, 64))
    for i, j in srange(2, 2):
        launch("clear", Cp[i, j])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
