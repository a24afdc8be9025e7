# corpus: a missing colon after the def line
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32])
    fill(C, 0)
