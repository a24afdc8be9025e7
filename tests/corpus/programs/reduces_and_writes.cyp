# corpus: a reduction privilege only adds into its tensor; it cannot also be written
@task("clear", Leaf, writes=["C"], reduces=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
