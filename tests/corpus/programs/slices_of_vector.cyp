# corpus: partition_by_slices needs rank >= 2 (a slice of a vector would be a scalar)
@task("clear_vec", Inner, writes=["y"])
def clear_vec_tile(y: tensor[1, f32]):
    ys = partition_by_slices(y, 0)
