# corpus: comprehensions are not expressions of the language
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    sizes = [64 for _ in C.shape]
