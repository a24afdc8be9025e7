# corpus: an external may not take the name of a built-in leaf function
include("ext/ops.cuh")


@external("corpus_ops::scale_bias", writes=["x"])
def copy(x: tensor[2, f32], bias: tensor[1, f32]):
    """x = 2 x + bias."""


@task("act", Leaf, reads=["C", "bias"], writes=["C"])
def act_thread(C: tensor[2, f32], bias: tensor[1, f32]):
    copy(C, bias)
