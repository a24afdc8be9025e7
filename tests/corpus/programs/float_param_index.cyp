# corpus: a float parameter is a value for a leaf's scalar operand, never an extent or index
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32], alpha: float):
    Cp = partition_by_blocks(C, (64, C.shape[1] * alpha))
    for i in prange(2):
        launch("clear", Cp[i, 0], alpha)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32], alpha: float):
    fill(C, alpha)
