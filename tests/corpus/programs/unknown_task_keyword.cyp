# corpus: @task knows reads= and writes= only
@task("clear", Leaf, writes=["C"], reduces=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
