# corpus: writes= names a scalar parameter; only tensor operands can be written
include("ext/ops.cuh")


@external("corpus_ops::scale_bias", writes=["x", "alpha"])
def scale_bias(x: tensor[2, f32], alpha: float):
    """x = 2 x + alpha."""


@task("act", Leaf, reads=["C", "bias"], writes=["C"])
def act_thread(C: tensor[2, f32], bias: tensor[1, f32]):
    scale_bias(C, 1.0)
