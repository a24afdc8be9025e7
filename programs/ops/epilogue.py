"""NumPy references of programs/ops/epilogue.cuh: what the cypressc interpreters run for
each external leaf function (same name, operands as float64 arrays, returns the new value
of the written operand)."""

import numpy as np


def bias_gelu(x, bias):
    v = x + bias
    return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))


def bias_silu(x, bias):
    v = x + bias
    return v * 0.5 * (1.0 + np.tanh(0.5 * v))  # v * sigmoid(v), without exp overflow
