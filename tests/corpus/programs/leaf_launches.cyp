# corpus: a Leaf variant launches a task
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    launch("clear", C)
