# corpus: the header has a NumPy reference next to it (noref.py), but without this function
include("ext/noref.cuh")


@external("corpus_ops::add_bias", writes=["x"])
def add_bias(x: tensor[2, f32], bias: tensor[1, f32]):
    """x = x + bias."""


@task("act", Leaf, reads=["C", "bias"], writes=["C"])
def act_thread(C: tensor[2, f32], bias: tensor[1, f32]):
    add_bias(C, bias)
