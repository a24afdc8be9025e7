# corpus: Latin-1, not UTF-8: "Schrödinger"
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
