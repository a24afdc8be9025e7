"""``cypressc tune``: search a mapping's knobs for the fastest correct kernel (docs/tuning.md).

space (the knobs) -> prune (every pass, static ranking) -> build (parallel nvcc, kernel
cache) -> timing (check and time on the GPUs) -> report (table, best mapping, tuning
cache); :mod:`cypressc.tuner.search` drives them.  ``cypressc.tune(...)`` is the function.
"""
