# corpus: with-blocks are not part of the language
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    with C:
        fill(C, 0)
