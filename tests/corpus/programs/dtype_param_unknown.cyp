# corpus: a dtype parameter may only stand for dtypes of the language
T = dtype(f16, f64)


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, T]):
    fill(C, 0)
