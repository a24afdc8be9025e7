"""Run a compiled module on random data in the interpreter and compare with NumPy.

Used by the tests (every pass preserves the program's result under random
schedules, against a NumPy reference the test supplies per program) and by
``cypressc`` developers.
"""

from __future__ import annotations

import numpy as np

from cypressc.ir import interp
from cypressc.ir import nodes as N
from cypressc.lang.intrinsics import NUMPY_DTYPES, round_to

__all__ = ["random_inputs", "run_module"]


def random_inputs(m: N.Module, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Fresh normal random arrays for every module parameter (outputs poisoned with NaN)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in m.params:
        shape = tuple(int(interp.evaluate(s, sizes)) for s in p.shape)
        dt = NUMPY_DTYPES[p.dtype]
        out[p.name] = round_to(rng.standard_normal(shape), p.dtype).astype(dt)
    return out


def run_module(
    m: N.Module,
    sizes: dict[str, int],
    arrays: dict[str, np.ndarray],
    written: list[str],
    seed: int | None,
) -> dict[str, np.ndarray]:
    """Run on copies of ``arrays`` (``written`` params start as NaN); return all arrays."""
    data = {k: v.copy() for k, v in arrays.items()}
    for w in written:
        data[w][...] = np.nan
    interp.run(m, sizes, data, seed)
    return data
