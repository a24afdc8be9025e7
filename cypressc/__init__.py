"""cypressc: a compiler for the Cypress task-based tensor programming model (PLDI 2025).

``cypressc.compile(program, mapping, dtype=...)`` builds (or takes from the cache) and
loads a kernel; ``cypressc.tune(...)`` searches a mapping's knobs (docs/tuning.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["compile", "tune"]


def compile(*args: Any, **kwargs: Any):
    """See :func:`cypressc.api.compile`."""
    from cypressc.api import compile as _compile

    return _compile(*args, **kwargs)


def tune(*args: Any, **kwargs: Any):
    """See :func:`cypressc.api.tune`."""
    from cypressc.api import tune as _tune

    return _tune(*args, **kwargs)
