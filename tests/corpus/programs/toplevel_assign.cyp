# corpus: a top-level assignment (globals are not part of the language)
TILE = 128

@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
