# corpus: an Inner variant computes on tensor data
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    fill(C, 0)
