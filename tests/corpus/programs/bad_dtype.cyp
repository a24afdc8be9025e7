# corpus: f64 is not a dtype of the language
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f64]):
    fill(C, 0)
