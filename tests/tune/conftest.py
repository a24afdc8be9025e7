"""A kernel cache shared by the tune tests (the torch tests reuse what the CLI test built)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def tune_cache(tmp_path_factory):
    """A fresh ``$CYPRESSC_CACHE_DIR`` for the session's tune tests."""
    d = tmp_path_factory.mktemp("cypressc-cache")
    old = os.environ.get("CYPRESSC_CACHE_DIR")
    os.environ["CYPRESSC_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("CYPRESSC_CACHE_DIR", None)
    else:
        os.environ["CYPRESSC_CACHE_DIR"] = old
