"""The ABI of a kernel built by ``cypressc build`` (``<name>.json``) and the plain-Python checks
of a call against it: element types, errors, size expressions, the info schema, argument
checking and size inference.  :mod:`cypressc.runtime` adds the ctypes launcher and PyTorch on
top and re-exports all of it (the public import path).

This package imports only the standard library and its own modules (relative imports), so a
copy of it next to a copy of ``cypressc/runtime.py`` loads without the rest of cypressc:
bench/old_kernels.sh copies both so that bench/old_new.py reads each side's kernels with
that side's own loader.
"""

from __future__ import annotations

from .args import TensorDesc, arg_label, infer_sizes, resolve_aliases, split_keywords, validate
from .dtypes import DTYPES, DType
from .errors import KernelError, LaunchError, cuda_error_name
from .exprs import eval_expr, expr_names
from .info import KernelInfo, Param, Requirement

__all__ = [
    "DTYPES",
    "DType",
    "Param",
    "KernelInfo",
    "KernelError",
    "LaunchError",
    "TensorDesc",
    "infer_sizes",
    "split_keywords",
    "validate",
    "eval_expr",
    "expr_names",
    "Requirement",
    "cuda_error_name",
    "arg_label",
    "resolve_aliases",
]
