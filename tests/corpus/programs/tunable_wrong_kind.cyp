# corpus: a processor tunable used as a number
@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    PIECES, PROC = tunable(int), tunable(processor)
    Cp = partition_by_mma(C, WGMMA_64x256x16(), PIECES, "C")
    for i in prange(PROC):
        launch("clear", Cp[i])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
