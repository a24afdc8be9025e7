# corpus: Python slices; tensors are split with partitions
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    launch("clear", C[0:64, :])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
