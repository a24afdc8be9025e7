# corpus: a choice lists a function that is neither built in nor declared @external
include("ext/ops.cuh")


@external("corpus_ops::scale_bias", writes=["x"])
def scale_bias(x: tensor[2, f32], bias: tensor[1, f32]):
    """x = 2 x + bias."""


ACT = choice(scale_bias, gelu_bias)


@task("act", Leaf, reads=["C", "bias"], writes=["C"])
def act_thread(C: tensor[2, f32], bias: tensor[1, f32]):
    ACT(C, bias)
