# corpus: a UTF-8 byte-order mark starts the file (Python accepts it); the error is f64
@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f64]):
    launch("clear", C)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
