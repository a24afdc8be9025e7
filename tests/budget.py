"""How much the randomized checks run: ``make test`` (the default, CI's ten minutes on two
cores) or ``make test-full`` (``CYPRESSC_TEST_FULL=1``: releases and changes to the passes
or the backend, an hour).  Issue #34: the fast counts are the ones the teeth tests show
still catch every removed edge and sync op."""

from __future__ import annotations

import os

FULL = os.environ.get("CYPRESSC_TEST_FULL", "") not in ("", "0")


def pick(fast, full):
    """``full`` under ``make test-full``, else ``fast``."""
    return full if FULL else fast
