# corpus: ** is not index arithmetic
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    n = 2 ** 6
    Cp = partition_by_blocks(C, (n, n))
