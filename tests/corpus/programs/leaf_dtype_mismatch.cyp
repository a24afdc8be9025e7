# corpus: row_sum accumulates into an f32 vector
@task("rowsum", Leaf, reads=["y", "A"], writes=["y"])
def rowsum_thread(y: tensor[1, f16], A: tensor[2, f16]):
    row_sum(y, A)
