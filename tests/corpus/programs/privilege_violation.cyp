# corpus: the caller only reads A but launches a task that writes it
@task("scale", Inner, reads=["A"], writes=["C"])
def scale_tile(C: tensor[2, f32], A: tensor[2, f32]):
    launch("add", A, C)


@task("add", Leaf, reads=["C", "X"], writes=["C"])
def add_thread(C: tensor[2, f32], X: tensor[2, f32]):
    add(C, X)
