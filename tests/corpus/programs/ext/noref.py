"""corpus: the NumPy reference of ext/noref.cuh, which forgot add_bias."""


def sub_bias(x, bias):
    return x - bias
