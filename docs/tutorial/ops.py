"""NumPy references of ops.cuh: what the cypressc interpreters run for each external leaf
function (same name, operands as float64 arrays, returns the written operand's new value)."""

import numpy as np


def bias_gelu(x, bias, alpha):
    v = alpha * x + bias
    return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))


def softcap(s, scale, cap):
    return cap * np.tanh(s * scale / cap)
