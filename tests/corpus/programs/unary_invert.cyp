# corpus: ~X is not index arithmetic (unary minus is: -X means 0 - X)
@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    M = C.shape[0]
    X = -M + ~M
    launch("clear", C)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
