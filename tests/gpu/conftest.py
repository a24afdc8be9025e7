"""Every test under tests/gpu needs a CUDA device PyTorch can see and nvcc on PATH: marked
``gpu`` and skipped otherwise (CI has neither a GPU nor, necessarily, a CUDA PyTorch)."""

from __future__ import annotations

import shutil

import pytest


@pytest.hookimpl(tryfirst=True)  # before `-m gpu` selects by marker
def pytest_collection_modifyitems(config, items):
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    for item in items:
        if "tests/gpu/" not in str(item.path).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if not cuda:
            item.add_marker(pytest.mark.skip(reason="no CUDA device visible"))
        elif shutil.which("nvcc") is None:
            item.add_marker(pytest.mark.skip(reason="nvcc not on PATH"))
