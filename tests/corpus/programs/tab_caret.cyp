# corpus: tabs before the error on the same line; the caret sits under the token
@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    M, N =		C.shape[0],	C.shape[2]
    launch("clear", C)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
