# corpus: launch arguments are positional
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    launch("clear", C=C)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
