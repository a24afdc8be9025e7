# corpus: @external names a C++ function that no included header defines (a typo)
include("ext/ops.cuh")


@external("corpus_ops::scale_bais", writes=["x"])
def scale_bias(x: tensor[2, f32], bias: tensor[1, f32]):
    """x = 2 x + bias."""


@task("act", Leaf, reads=["C", "bias"], writes=["C"])
def act_thread(C: tensor[2, f32], bias: tensor[1, f32]):
    scale_bias(C, bias)
