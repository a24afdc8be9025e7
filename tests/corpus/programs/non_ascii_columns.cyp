# corpus: non-ASCII text before the error on the same line; columns count characters
@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    Cp = partition_by_mma(C, WGMMA_64x256x16(), THREAD, "Ä")  # «Ä» is not an operand
    for i in prange(128):
        launch("clear", Cp[i])


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
