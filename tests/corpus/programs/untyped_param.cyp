# corpus: every parameter needs a type
@task("clear", Leaf, writes=["C"])
def clear_thread(C):
    fill(C, 0)
