# corpus: C += X reads like Python but is not a leaf-function call
@task("add", Leaf, reads=["C", "X"], writes=["C"])
def add_thread(C: tensor[2, f32], X: tensor[2, f32]):
    C += X
