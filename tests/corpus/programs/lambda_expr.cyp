# corpus: lambdas are not expressions of the language
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    half = lambda n: n / 2
    Cp = partition_by_blocks(C, (half(C.shape[0]), C.shape[1]))
