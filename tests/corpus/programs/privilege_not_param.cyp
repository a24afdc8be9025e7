# corpus: writes= names a tensor that is not a parameter
@task("clear", Leaf, writes=["D"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
