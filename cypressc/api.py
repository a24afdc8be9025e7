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
    a mapping (``{"T": "bf16"}``) binds each named parameter; ``None`` keeps the defaults.

    Raises ``ValueError`` for a dtype no parameter allows (``"f64"``), a name that is no
    dtype parameter of the program, or a value its parameter does not allow (the message
    lists what each parameter allows); the program's own errors as
    :class:`~cypressc.diagnostics.CypressErrors`."""
    if dtype is None:
        return {}
    from cypressc.lang.parser import parse_file

    params = {d.name: tuple(d.allowed) for d in parse_file(str(program), {}).dtype_params}
    allowed = "; ".join(f"{n}: {', '.join(a)}" for n, a in params.items()) or "none"
    if isinstance(dtype, str):
        bound = {n: dtype for n, a in params.items() if dtype in a}
        if not bound:
            raise ValueError(
                f"dtype={dtype!r}: no dtype parameter of {program} allows it "
                f"(its dtype parameters allow {allowed})"
            )
        return bound
    if not isinstance(dtype, Mapping):
        raise ValueError(
            f"dtype must be a dtype name or a mapping of dtype parameter to name, not "
            f"{type(dtype).__name__}"
        )
    for n, v in dtype.items():
        if n not in params:
            raise ValueError(
                f"dtype={{{n!r}: ...}}: {program} has no dtype parameter {n!r} "
                f"(its dtype parameters allow {allowed})"
            )
        if v not in params[n]:
            raise ValueError(f"dtype={{{n!r}: {v!r}}}: {n} allows {', '.join(params[n])}")
    return dict(dtype)


def compile(
    program: str | Path,
    mapping: str | Path,
    dtype: str | Mapping[str, str] | None = None,
    *,
    sizes: Mapping[str, int] | None = None,
    tuned: bool = False,
    kernel_root: str | Path | None = None,
    **tune_options: Any,
):
    """Build ``program`` under ``mapping`` (or take the identical kernel from the cache under
    ``$CYPRESSC_CACHE_DIR``) and load it: returns a :class:`cypressc.runtime.Kernel`.

    With ``tuned=True`` and ``sizes``, the mapping is first replaced by the best one the
    tuning cache holds for (program, mapping, this GPU, dtypes, sizes), tuning now (on the
    GPU, ``tune_options`` as for :func:`tune`) when it holds none.  Raises the compiler's
    :class:`~cypressc.diagnostics.CypressErrors`/``CypressError`` for a bad program or
    mapping (a missing or unreadable mapping file included: M000, as ``cypressc check`` says),
    ``ValueError`` for a dtype the program does not allow (:func:`bind_dtypes`), ``TypeError``
    for a keyword :func:`tune` does not take (or any tuning keyword without ``tuned=True``) and
    :class:`~cypressc.tuner.build.BuildError` when nvcc fails.  Needs nvcc; loading needs no
    GPU, calling the kernel does."""
    from dataclasses import fields

    from cypressc import runtime
    from cypressc.mapping.loader import read_mapping_text
    from cypressc.tuner.build import build_kernel
    from cypressc.frontend import front_end
    from cypressc.tuner.search import Options

    if tune_options and not tuned:
        raise TypeError(
            f"compile() got tuning keyword(s) {', '.join(sorted(tune_options))} without tuned=True"
        )
    unknown = set(tune_options) - {f.name for f in fields(Options)}
    if unknown:
        raise TypeError(
            f"compile() got unexpected keyword argument(s): {', '.join(sorted(unknown))}"
        )
    dtypes = bind_dtypes(program, dtype)
    text = read_mapping_text(mapping)
    if tuned:
        if not sizes:
            raise ValueError(
                "compile(tuned=True) needs sizes=, e.g. {'M': 4096, 'N': 4096, 'K': 4096}"
            )
        from cypressc.tuner.report import cached_result, store_result, best_yaml
        from cypressc.tuner.search import _device_name, bind_sizes, kernel_sizes

        sizes = bind_sizes(
            sizes, *kernel_sizes(front_end(program, mapping, dtypes=dtypes, mapping_text=text))
        )
        hit = cached_result(Path(program).read_text(), text, _device_name(), dtypes, dict(sizes))
        if hit is None:
            res = tune(program, mapping, sizes, dtype=dtypes, **tune_options)
            if res.best is None:
                raise RuntimeError(f"tuning {mapping} found no correct candidate")
            store_result(
                res,
                Path(program).read_text(),
                text,
                best_yaml(res, str(program), str(mapping)) or "",
            )
            text = res.best.text
        else:
            text = hit["best"]["mapping"]
    tree = front_end(program, mapping, dtypes=dtypes, mapping_text=text)
    built = build_kernel(tree, Path(kernel_root) if kernel_root else None)
    return runtime.load(built.dir, built.name)


def tune(
    program: str | Path,
    mapping: str | Path,
    sizes: Mapping[str, int],
    dtype: str | Mapping[str, str] | None = None,
    **options: Any,
):
    """Search ``mapping``'s knobs for ``program`` at ``sizes`` (see ``cypressc tune`` and
    :class:`cypressc.tuner.search.Options` for ``options``: ``compile_only``, ``budget``,
    ``rounds``, ``reps``, ``workers``, ``reference`` ("FILE.py:FUNC"), ``floats`` (the values
    of the kernel's ``float`` parameters, ``{"scale": 0.125}``), ...).  Returns a
    :class:`cypressc.tuner.search.Result` (``best``, ``ranked``, ``counts()``, ``seconds``)."""
    from cypressc.tuner.search import Options, search

    opts = Options(
        sizes={k: int(v) for k, v in sizes.items()}, dtypes=bind_dtypes(program, dtype), **options
    )
    return search(str(program), str(mapping), opts)
