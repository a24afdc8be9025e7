# corpus: an index expression nested 150 levels deep (at most 100), reported at its line
@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    M = C.shape[0]
    X = M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M + M
    launch("clear", C)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
