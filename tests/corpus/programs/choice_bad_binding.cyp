# corpus: --param ACT=gelu_bias binds a function the choice does not list
include("ext/ops.cuh")


@external("corpus_ops::scale_bias", writes=["x"])
def scale_bias(x: tensor[2, f32], bias: tensor[1, f32]):
    """x = 2 x + bias."""


@external("corpus_ops::relu_bias", writes=["x"])
def relu_bias(x: tensor[2, f32], bias: tensor[1, f32]):
    """x = max(x + bias, 0)."""


ACT = choice(scale_bias, relu_bias)


@task("act", Leaf, reads=["C", "bias"], writes=["C"])
def act_thread(C: tensor[2, f32], bias: tensor[1, f32]):
    ACT(C, bias)
