"""The build directory: written whole, replaced atomically, and only ever over cypressc's own.

``cypressc build -o DIR`` must never destroy a user's files (issue #9).  Every build
directory carries a stamp file, :data:`STAMP`, naming cypressc, the program, the mapping, a
content hash of the inputs and the SHA-256 of every file the build wrote.  An existing
``DIR`` is replaced only when it is provably cypressc's own output:

* it is a real directory (not a symbolic link: a link is never followed out; not a file);
* it is empty, or its stamp is valid and every entry in it is a file the stamp lists, with
  the content the stamp records, or a product of the generated Makefile (``NAME``,
  ``libNAME.so``);
* it is neither the working directory nor one of its ancestors.

Anything else is refused with a located E062 that says which entry is in the way.  The new
files are written into a temporary sibling that replaces ``DIR`` only when everything was
written; files whose content did not change keep the old copy (and its modification time), and
so do the Makefile products when no source changed, so ``make`` after an unchanged rebuild is a
no-op.  Directories are created with the user's umask (not the 0700 of ``mkdtemp``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cypressc.diagnostics import CypressError, Loc

__all__ = ["REFUSED", "STAMP", "Stamp", "replace_build_dir", "check_output_dir", "read_stamp"]

REFUSED = "E062"  # an output path cypressc will not replace (build -o, tune -o)
STAMP = ".cypressc-build"  # JSON, but no .json suffix: a build directory's *.json is its kernel ABI
_TOOL = "cypressc"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Stamp:
    """What a build directory holds: ``files`` maps each written file to its SHA-256 (hex);
    ``products`` are the names the generated Makefile may add; ``inputs`` is the SHA-256 of
    the program text, the mapping text and the dtype bindings."""

    program: str
    mapping: str
    inputs: str
    files: dict[str, str]
    products: tuple[str, ...]

    def to_json(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("cypressc")
        except PackageNotFoundError:  # running from a source tree
            v = "unknown"
        return json.dumps({"tool": _TOOL, "version": v, "program": self.program, "mapping": self.mapping,
                           "inputs": self.inputs, "files": self.files, "products": list(self.products)},
                          indent=2) + "\n"


def read_stamp(d: Path) -> Stamp | None:
    """The stamp of directory ``d``, or None when it has none or it is not cypressc's."""
    p = d / STAMP
    try:
        if p.is_symlink() or not p.is_file():
            return None
        raw = json.loads(p.read_text())
        if not isinstance(raw, dict) or raw.get("tool") != _TOOL:
            return None
        files, products = raw["files"], raw["products"]
        if not (isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in files.items())
                and isinstance(products, list) and all(isinstance(x, str) for x in products)):
            return None
        return Stamp(str(raw["program"]), str(raw["mapping"]), str(raw["inputs"]), dict(files),
                     tuple(products))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refuse(outdir: Path, why: str, hint: str) -> CypressError:
    return CypressError(REFUSED, f"refusing to replace {outdir}: {why}", Loc(str(outdir)), hint=hint)


_HINT = "pass -o a new directory (or an empty one, or one an earlier `cypressc build` wrote)"


def check_output_dir(outdir: Path) -> Stamp | None:
    """Check that ``outdir`` (absolute, symlinks not resolved) may be written by a build.

    Returns the stamp of the earlier build there (None: nothing to replace).  Raises E062
    when the path is a symbolic link, a file, the working directory or an ancestor of it, or
    a non-empty directory that is not exactly an earlier build's output.
    """
    if outdir.is_symlink():
        raise _refuse(outdir, "it is a symbolic link (to "
                      f"{os.readlink(outdir)}); cypressc never follows a link out of the output path",
                      "pass -o the real directory, or a new one")
    if not outdir.exists():
        return None
    if not outdir.is_dir():
        raise _refuse(outdir, "it is a file, not a directory", _HINT)
    cwd = Path(os.path.abspath(os.getcwd()))
    if outdir == cwd or outdir in cwd.parents:
        raise _refuse(outdir, "it is the working directory or contains it", _HINT)
    entries = sorted(p.name for p in outdir.iterdir())
    if not entries:
        return None
    stamp = read_stamp(outdir)
    if stamp is None:
        shown = ", ".join(entries[:4]) + (f", … ({len(entries)} entries)" if len(entries) > 4 else "")
        raise _refuse(outdir, f"it is not empty ({shown}) and was not written by `cypressc build` "
                      f"(no {STAMP})", _HINT)
    for name in entries:
        p = outdir / name
        if name == STAMP:
            continue
        if name in stamp.files:
            if p.is_symlink() or not p.is_file() or _sha256(p) != stamp.files[name]:
                raise _refuse(outdir, f"{name} was changed after cypressc wrote it",
                              f"move {p} away (or delete it) if the change is not needed, or pass -o "
                              "another directory")
        elif name in stamp.products:
            if p.is_symlink() or not p.is_file():
                raise _refuse(outdir, f"{name} is not the file `make` builds", _HINT)
        else:
            raise _refuse(outdir, f"{name} was not written by cypressc",
                          f"move {p} away if it belongs to you, or pass -o another directory")
    return stamp


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_build_dir(outdir: Path, write: Callable[[Path], None], *, program: str, mapping: str,
                      inputs: str, products: tuple[str, ...]) -> None:
    """Write a build into ``outdir`` atomically.

    ``write(tmp)`` writes the build's files into the fresh directory ``tmp``; then the stamp
    is added and ``tmp`` takes ``outdir``'s place (the old build, checked by
    :func:`check_output_dir`, is removed only after the new one is in place).  Raises E062
    (see :func:`check_output_dir`) or E061 when the file system refuses; a failure leaves
    ``outdir`` as it was and no temporary directory behind.
    """
    outdir = Path(os.path.abspath(outdir))
    old = check_output_dir(outdir)
    tmp: Path | None = None
    trash: Path | None = None
    try:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
        os.chmod(tmp, 0o777 & ~_umask())
        write(tmp)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        if old is not None:
            _keep_unchanged(outdir, tmp, old, files, products)
        (tmp / STAMP).write_text(Stamp(program, mapping, inputs, files, products).to_json())
        if outdir.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.old.", dir=outdir.parent))
            os.replace(outdir, trash / "d")
        os.replace(tmp, outdir)
        tmp = None
    except OSError as e:
        if trash is not None and not outdir.exists() and (trash / "d").exists():
            os.replace(trash / "d", outdir)  # put the old build back
        raise CypressError("E061", f"cannot write the build directory {outdir}: "
                           f"{e.strerror or e}", Loc(str(outdir))) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)


def _keep_unchanged(outdir: Path, tmp: Path, old, files: dict[str, str],
                    products: tuple[str, ...]) -> None:
    """Move the old copy of every file whose content did not change into ``tmp`` (keeping
    its modification time), and the Makefile products too when no file changed."""
    unchanged = [n for n, h in files.items() if old.files.get(n) == h]
    for n in unchanged:
        os.replace(outdir / n, tmp / n)
    if len(unchanged) == len(files) and set(old.files) == set(files):
        for n in products:
            p = outdir / n
            if p.is_file() and not p.is_symlink():
                os.replace(p, tmp / n)  # moved with its sources' old copies: make stays a no-op
