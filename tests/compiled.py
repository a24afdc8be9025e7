"""Each (program, mapping, dtypes) through the passes once per test session (issue #34).

:func:`snapshots` compiles a program under a mapping and keeps the result twice: in this
process (a dict) and, for the other xdist workers, as a pickle in the session's directory
(``CYPRESSC_TEST_CACHE``, made by tests/conftest.py on the controller and removed at its
end).  The key is the content, not the path: the program and every file under its include
directory, the mapping's text, the dtypes, and the source of cypressc itself
-- a test that writes a mapping variant to a temporary file gets its own entry, and an
edit to the compiler never reads an old result.  Writes are atomic (a temporary file
renamed over the entry), so two workers that compile the same key at once both succeed.

A test that compiles under a monkeypatch (``no_ring_joins``) must not come here: the key
does not see the patch; nor a test that edits files under programs/ or a program's folder
during the session (their digests are taken once per process).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path

from cypressc.diagnostics import CypressError, CypressErrors
from cypressc.ir import nodes as N
from cypressc.frontend import front_end
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
_MEMO: dict[str, tuple[list[tuple[str, N.Module]], Exception | None]] = {}


@functools.cache
def _tree_digest(root: Path) -> str:
    """A digest of every file under ``root`` (names and bytes)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _path(program: str | Path) -> Path:
    """``gemm`` is programs/gemm.cyp; a path ending in .cyp is relative to the repository."""
    p = Path(program)
    if p.suffix != ".cyp":
        return PROGRAMS / f"{program}.cyp"
    return p if p.is_absolute() else ROOT / p


def _mapping(mapping: str | Path) -> Path:
    return Path(mapping) if Path(mapping).is_absolute() else ROOT / mapping


def tree(program: str | Path, mapping: str | Path, dtypes: dict[str, str] | None = None):
    """The task tree of ``program`` (a name under programs/ or a path ending in .cyp) under
    ``mapping`` (relative to the repository or absolute), ``dtypes`` bound, programs/ on the
    include path; raises what parsing, checking and instantiating raise."""
    return front_end(_path(program), _mapping(mapping), dtypes=dtypes, include_dirs=(PROGRAMS,))


def _key(program: Path, mapping: Path, dtypes: dict[str, str]) -> str:
    h = hashlib.sha256()
    for part in (
        _tree_digest(ROOT / "cypressc"),
        _tree_digest(PROGRAMS),
        _tree_digest(program.parent),
        program.as_posix(),
        program.read_text(),
        mapping.read_text(),
        repr(sorted(dtypes.items())),
    ):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _compile(program: Path, mapping: Path, dtypes: dict[str, str]) -> tuple[list, Exception | None]:
    """Every pass's snapshot, up to the first that raises a :class:`CypressError` (a
    refusal), and that error."""
    out: list[tuple[str, N.Module]] = []
    try:
        compile_module(
            tree(program, mapping, dtypes), hook=lambda name, m, _dt: out.append((name, m))
        )
    except (CypressError, CypressErrors) as e:
        return out, e
    return out, None


def snapshots(
    program: str | Path,
    mapping: str | Path,
    *,
    until: str | None = None,
    dtypes: dict[str, str] | None = None,
) -> list[tuple[str, N.Module]]:
    """``compile_module(instantiate(...), until=until)`` for ``program`` (a name under
    programs/ or a path ending in .cyp) under ``mapping`` (a path, relative to the
    repository or absolute), with ``dtypes`` bound (``--dtype``), programs/ on the include
    path: the (pass name, module) pairs.  The whole pipeline runs at most once per session
    for the three; ``until`` takes a prefix.  Raises the :class:`CypressError` compiling
    raised where the prefix reaches the pass that raised it."""
    program, mapping, dtypes = _path(program), _mapping(mapping), dict(dtypes or {})
    key = _key(program, mapping, dtypes)
    hit = _MEMO.get(key)
    if hit is None:
        shared = os.environ.get("CYPRESSC_TEST_CACHE")
        entry = Path(shared) / f"{key}.pickle" if shared else None
        if entry is not None and entry.exists():
            hit = pickle.loads(entry.read_bytes())
        else:
            hit = _compile(program, mapping, dtypes)
            # a refusal stays in this process (CypressError does not survive pickling), and so
            # does a module holding a user function's NumPy semantics (a closure)
            if entry is not None and entry.parent.is_dir() and hit[1] is None:
                try:
                    data = pickle.dumps(hit, protocol=pickle.HIGHEST_PROTOCOL)
                except (pickle.PicklingError, AttributeError, TypeError):
                    data = None
                if data is not None:
                    fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    os.replace(tmp, entry)
        _MEMO[key] = hit
    snaps, error = hit
    names = [n for n, _ in snaps]
    if until is not None and until in names:
        return snaps[: names.index(until) + 1]
    if error is not None:
        raise error
    if until is not None:
        raise KeyError(f"no pass named {until!r}")
    return list(snaps)  # a copy: the caller may change its list, never the cache's


def modules(program: str | Path, mapping: str | Path, **kw) -> dict[str, N.Module]:
    """:func:`snapshots` as a dict by pass name."""
    return dict(snapshots(program, mapping, **kw))


def rendered(program: str | Path, mapping: str | Path):
    """What ``cypressc check`` renders for ``program`` under ``mapping`` (every backend step:
    CUDA, header, harness, Makefile, ABI; :func:`cypressc.build.render_build`), from
    the session's compile."""
    from cypressc.build import render_build

    return render_build(tree(program, mapping), snapshots(program, mapping))


def ptxas_report(cu: Path, out: Path, host: bool = False) -> str:
    """Compile CUDA file ``cu`` for sm_90a with cypressc's runtime and the CUTLASS headers, as a
    kernel build does, ``-Xptxas -v``, into ``out``; return nvcc's stderr (ptxas's registers,
    spills, C75xx warnings).  ``out`` is a shared library when it ends in ``.so``, an object
    file with ``host`` (the launcher compiled too), else the device code alone (a cubin: a
    third of the time, for the tests that read only ptxas).  Fails the calling test when nvcc
    does."""
    import subprocess

    from cypressc.backend.harness import RUNTIME_DIR
    from cypressc.tuner.build import cutlass_include

    if out.suffix == ".so":
        kind = ["-Xcompiler", "-fPIC", "-shared"]
    else:
        kind = ["-c"] if host else ["-cubin"]
    c = subprocess.run(
        [
            "nvcc",
            "-O3",
            "-std=c++17",
            "-gencode=arch=compute_90a,code=sm_90a",
            f"-I{RUNTIME_DIR}",
            f"-I{cutlass_include()}",
            *kind,
            "-Xptxas",
            "-v",
            "-o",
            str(out),
            str(cu),
        ],
        capture_output=True,
        text=True,
    )
    assert c.returncode == 0, c.stderr[-4000:]
    return c.stderr


def spill_lines(files: dict[str, str], folder: Path, cu: str) -> list[str]:
    """Write a build's ``files`` (name -> text, as :func:`cypressc.build.render_build` gives
    them) under ``folder``, compile its ``cu`` to a cubin with :func:`ptxas_report`, and return
    ptxas's "spill stores" line of each entry function."""
    for name, text in files.items():  # the .cu and its copy of the user's header
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    report = ptxas_report(folder / cu, folder / "k.cubin")
    return [ln for ln in report.splitlines() if "spill stores" in ln]


def ring_joins_off(mp) -> None:
    """Compile with no ring joins (:mod:`cypressc.passes.rings`) while ``mp`` is active."""
    import cypressc.passes.resource_allocation as ra
    import cypressc.passes.warp_specialization as ws

    mp.setattr(ra, "ring_joins", lambda m, warpspecialize: {})
    mp.setattr(ws, "ring_joins", lambda m, warpspecialize: {})
