# corpus: there is no leaf function zero(); it is fill(C, 0)
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    zero(C)
