# corpus: control flow on run-time values is not part of the language
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    if C.shape[0] > 0:
        fill(C, 0)
