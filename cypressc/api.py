"""The Python entry points: :func:`compile` (build or take from the cache, then load) and
:func:`tune` (``cypressc tune`` as a function).  ``cypressc.compile`` and ``cypressc.tune``
are these."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["compile", "tune", "bind_dtypes"]


def bind_dtypes(program: str | Path, dtype: str | Mapping[str, str] | None) -> dict[str, str]:
    """``dtype="bf16"`` binds every dtype parameter of ``program`` that allows bf16;
    a mapping (``{"T": "bf16"}``) is taken as is; ``None`` keeps the defaults."""
    if dtype is None:
        return {}
    if not isinstance(dtype, str):
        return dict(dtype)
    from cypressc.lang.parser import parse_file

    prog = parse_file(str(program), {})
    return {d.name: dtype for d in prog.dtype_params if dtype in d.allowed}


def compile(program: str | Path, mapping: str | Path, dtype: str | Mapping[str, str] | None = None, *,
            sizes: Mapping[str, int] | None = None, tuned: bool = False, kernel_root: str | Path | None = None,
            **tune_options: Any):
    """Build ``program`` under ``mapping`` (or take the identical kernel from the cache under
    ``$CYPRESSC_CACHE_DIR``) and load it: returns a :class:`cypressc.runtime.Kernel`.

    With ``tuned=True`` and ``sizes``, the mapping is first replaced by the best one the
    tuning cache holds for (program, mapping, this GPU, dtypes, sizes), tuning now (on the
    GPU, ``tune_options`` as for :func:`tune`) when it holds none.  Raises the compiler's
    :class:`~cypressc.diagnostics.CypressErrors`/``CypressError`` for a bad program or
    mapping and :class:`~cypressc.tuner.build.BuildError` when nvcc fails.  Needs nvcc; loading
    needs no GPU, calling the kernel does."""
    from cypressc import runtime
    from cypressc.tuner.build import build_kernel
    from cypressc.tuner.search import _front_from_text

    dtypes = bind_dtypes(program, dtype)
    text = Path(mapping).read_text()
    if tuned:
        if not sizes:
            raise ValueError("compile(tuned=True) needs sizes=, e.g. {'M': 4096, 'N': 4096, 'K': 4096}")
        from cypressc.tuner.report import cached_result, store_result, best_yaml
        from cypressc.tuner.search import _device_name

        hit = cached_result(Path(program).read_text(), text, _device_name(), dtypes, dict(sizes))
        if hit is None:
            res = tune(program, mapping, sizes, dtype=dtypes, **tune_options)
            if res.best is None:
                raise RuntimeError(f"tuning {mapping} found no correct candidate")
            store_result(res, Path(program).read_text(), text, best_yaml(res, str(program), str(mapping)) or "")
            text = res.best.text
        else:
            text = hit["best"]["mapping"]
    tree = _front_from_text(str(program), text, str(mapping), dtypes)
    built = build_kernel(tree, Path(kernel_root) if kernel_root else None)
    return runtime.load(built.dir, built.name)


def tune(program: str | Path, mapping: str | Path, sizes: Mapping[str, int],
         dtype: str | Mapping[str, str] | None = None, **options: Any):
    """Search ``mapping``'s knobs for ``program`` at ``sizes`` (see ``cypressc tune`` and
    :class:`cypressc.tuner.search.Options` for ``options``: ``compile_only``, ``budget``,
    ``rounds``, ``reps``, ``workers``, ``reference`` ("FILE.py:FUNC"), ``floats`` (the values
    of the kernel's ``float`` parameters, ``{"scale": 0.125}``), ...).  Returns a
    :class:`cypressc.tuner.search.Result` (``best``, ``ranked``, ``counts()``, ``seconds``)."""
    from cypressc.tuner.search import Options, search

    opts = Options(sizes={k: int(v) for k, v in sizes.items()}, dtypes=bind_dtypes(program, dtype), **options)
    return search(str(program), str(mapping), opts)
