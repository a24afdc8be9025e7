# corpus: every iteration writes all of C
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    for i in prange(4):
        launch("clear", C)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
