# corpus: the variant kind must be Inner or Leaf
@task("clear", Middle, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
