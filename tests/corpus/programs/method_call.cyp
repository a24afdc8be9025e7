# corpus: methods cannot be called; leaves call leaf functions on tensors
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    C.fill(0)
