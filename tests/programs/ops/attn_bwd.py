"""NumPy reference of tests/programs/ops/attn_bwd.cuh (what the cypressc interpreters run)."""

import numpy as np


def probs_t(s, lse, scale):
    return np.exp(s * scale - lse)


def dscores_t(ds, p, d):
    return p * (ds - d)
