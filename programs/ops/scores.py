"""NumPy reference of programs/ops/scores.cuh (what the cypressc interpreters run)."""

import numpy as np


def softcap(s, cap):
    return cap * np.tanh(s / cap)
