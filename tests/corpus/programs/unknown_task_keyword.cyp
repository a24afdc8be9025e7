# corpus: @task knows reads=, writes= and reduces= only
@task("clear", Leaf, writes=["C"], atomic=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
