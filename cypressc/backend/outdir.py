"""The build directory: written whole, replaced atomically, and only ever over cypressc's own.

``cypressc build -o DIR`` must never destroy a user's files (issues #9 and #35).  Every build
directory carries a stamp file, :data:`STAMP`, naming cypressc, the program, the mapping, the
kernel, a content hash of the inputs and the SHA-256 of every file the build wrote, at any
depth (a call-external program's ``include/``).  An existing ``DIR`` is replaced only when it
is provably cypressc's own output:

* it is a real directory (not a symbolic link: a link is never followed out; not a file);
* it is empty, or its stamp is valid and every entry in it is a file the stamp lists, with the
  content the stamp records, a directory holding such files, or one of the two products of the
  generated Makefile for the stamp's kernel (``NAME``, ``libNAME.so``: ELF files, as nvcc
  writes them; a stamp cannot name anything else a product);
* it is neither the working directory nor one of its ancestors (compared as files, by device
  and inode, so a symlinked path to the working directory is caught too).

Anything else is refused with a located E062 that says which entry is in the way.

Races: the directory is opened once (``O_NOFOLLOW``) and every later step works through that
descriptor, so a file only ever leaves the directory that was checked, even if ``DIR`` is
swapped for a symbolic link or another directory meanwhile; the final swap checks that what it
moved aside is that same directory (device and inode) and puts it back otherwise (E062).  The
old build is deleted entry by entry, only the entries that were checked; whatever appeared in it
meanwhile is left where it is.

The new files are written into a temporary sibling (a short name: ``DIR``'s own name may be as
long as the file system allows) that replaces ``DIR`` only when everything was written; files
whose content did not change keep the old copy (and its modification time), and so do the
Makefile products when no source changed, so ``make`` after an unchanged rebuild is a no-op.
Directories are created with the user's umask.  A name or path the OS refuses is a located E061.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cypressc.backend.stamp import DIR_FLAGS, STAMP, Stamp, read_at, read_stamp, sha256, stamp_at
from cypressc.diagnostics import CypressError, Loc

__all__ = ["REFUSED", "STAMP", "Stamp", "replace_build_dir", "read_stamp"]

REFUSED = "E062"  # an output path cypressc will not replace (build -o, tune -o)
_ELF = b"\x7fELF"
_HINT = "pass -o a new directory (or an empty one, or one an earlier `cypressc build` wrote)"
_ID = tuple[int, int]  # (st_dev, st_ino): a file's identity


def _refuse(outdir: Path, why: str, hint: str = _HINT) -> CypressError:
    return CypressError(
        REFUSED, f"refusing to replace {outdir}: {why}", Loc(str(outdir)), hint=hint
    )


def _ident(st: os.stat_result) -> _ID:
    return (st.st_dev, st.st_ino)


@dataclass
class _Checked:
    """An existing output directory that passed :func:`_check`: ``fd`` is open on it; ``entries``
    maps each checked entry (relative path) to its identity, ``dirs`` lists its subdirectories
    (parents first); ``stamp`` is None for an empty directory."""

    ident: _ID
    fd: int
    stamp: Stamp | None
    entries: dict[str, _ID] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)


def _walk(dfd: int, prefix: str = ""):
    """(relative path, lstat) of every entry under directory ``dfd``, parents before children,
    never following a symbolic link."""
    with os.scandir(dfd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        rel = prefix + name
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        yield rel, st
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, DIR_FLAGS, dir_fd=dfd)
            try:
                if _ident(os.fstat(sub)) == _ident(st):
                    yield from _walk(sub, rel + "/")
            finally:
                os.close(sub)


def _open_rel(dfd: int, rel: str) -> int:
    """A new descriptor on directory ``rel`` (relative, '' for ``dfd`` itself) under ``dfd``,
    no component followed if it is a symbolic link."""
    fd = os.dup(dfd)
    for part in [p for p in rel.split("/") if p]:
        try:
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _split(rel: str) -> tuple[str, str]:
    head, _, tail = rel.rpartition("/")
    return head, tail


def _cwd_and_ancestors() -> set[_ID]:
    """Identities of the working directory and each of its ancestors."""
    out = set()
    p = os.path.realpath(os.getcwd())
    while True:
        try:
            out.add(_ident(os.stat(p)))
        except OSError:
            pass
        parent = os.path.dirname(p)
        if parent == p:
            return out
        p = parent


def _check(outdir: Path, pfd: int) -> _Checked | None:
    """Check that ``outdir`` (the entry ``outdir.name`` of directory ``pfd``) may be replaced by
    a build; None when it does not exist.  Raises E062 (see the module docstring)."""
    name = outdir.name
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            to = f" (to {os.readlink(name, dir_fd=pfd)})"
        except OSError:  # no longer a link: it is being swapped
            to = ""
        raise _refuse(
            outdir,
            f"it is a symbolic link{to}; cypressc never follows a link out of the output path",
            "pass -o the real directory, or a new one",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(outdir, "it is a file, not a directory")
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=pfd)
    except OSError as e:
        if e.errno == errno.ELOOP:  # became a link since the stat
            raise _refuse(
                outdir,
                "it is a symbolic link; cypressc never follows a link out of the output path",
                "pass -o the real directory, or a new one",
            ) from None
        raise
    try:
        return _check_open(outdir, fd)
    except BaseException:
        os.close(fd)
        raise


def _check_open(outdir: Path, fd: int) -> _Checked:
    ident = _ident(os.fstat(fd))
    if ident in _cwd_and_ancestors():
        raise _refuse(outdir, "it is the working directory or contains it")
    listing = list(_walk(fd))
    if not listing:
        return _Checked(ident, fd, None)
    stamp = stamp_at(fd)
    if stamp is None:
        top = [rel for rel, _ in listing if "/" not in rel]
        shown = ", ".join(top[:4]) + (f", … ({len(top)} entries)" if len(top) > 4 else "")
        raise _refuse(
            outdir,
            f"it is not empty ({shown}) and was not written by `cypressc build` (no valid {STAMP})",
        )
    dirs_needed = {
        "/".join(f.split("/")[:i]) for f in stamp.files for i in range(1, f.count("/") + 1)
    }
    checked = _Checked(ident, fd, stamp)
    for rel, st in listing:
        p = outdir / rel
        if rel == STAMP:
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(outdir, f"{STAMP} is not a file")
        elif stat.S_ISDIR(st.st_mode) and rel in dirs_needed:
            checked.dirs.append(rel)
        elif rel in stamp.files:
            head, tail = _split(rel)
            sub = _open_rel(fd, head)
            try:
                data = read_at(sub, tail)
            finally:
                os.close(sub)
            if stat.S_ISLNK(st.st_mode) or data is None or sha256(data) != stamp.files[rel]:
                raise _refuse(
                    outdir,
                    f"{rel} was changed after cypressc wrote it",
                    f"move {p} away (or delete it) if the change is not needed, or pass -o "
                    "another directory",
                )
        elif rel in stamp.products:
            if not stat.S_ISREG(st.st_mode) or not _starts_with_elf(fd, rel):
                raise _refuse(
                    outdir,
                    f"{rel} is not the file `make` builds (an ELF executable or library)",
                    f"move {p} away if it belongs to you, or pass -o another directory",
                )
        else:
            raise _refuse(
                outdir,
                f"{rel} was not written by cypressc",
                f"move {p} away if it belongs to you, or pass -o another directory",
            )
        if not stat.S_ISDIR(st.st_mode):
            checked.entries[rel] = _ident(st)
    return checked


def _starts_with_elf(dfd: int, name: str) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except OSError:
        return False
    try:
        return os.read(fd, 4) == _ELF
    finally:
        os.close(fd)


def _mkdir_fresh(pfd: int, prefix: str) -> str:
    """A new directory in ``pfd`` named ``prefix`` + 8 random hex digits (short, so that any
    name the file system takes for ``DIR`` has room beside it)."""
    while True:
        name = f"{prefix}{secrets.token_hex(4)}"
        try:
            os.mkdir(name, 0o777, dir_fd=pfd)  # the umask applies, as for any directory
            return name
        except FileExistsError:
            continue


def _write_files(tfd: int, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        head, tail = _split(rel)
        dfd = os.dup(tfd)
        try:
            for part in [p for p in head.split("/") if p]:
                try:
                    os.mkdir(part, 0o777, dir_fd=dfd)
                except FileExistsError:
                    pass
                nxt = os.open(part, DIR_FLAGS, dir_fd=dfd)
                os.close(dfd)
                dfd = nxt
            fd = os.open(
                tail, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=dfd
            )
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        finally:
            os.close(dfd)


def _move_if_same(src: int, dst: int, rel: str, ident: _ID) -> None:
    """Move entry ``rel`` from directory ``src`` to the same place under ``dst``, when it is
    still the file that was checked (``ident``)."""
    head, tail = _split(rel)
    s, d = _open_rel(src, head), _open_rel(dst, head)
    try:
        if _ident(os.stat(tail, dir_fd=s, follow_symlinks=False)) == ident:
            os.replace(tail, tail, src_dir_fd=s, dst_dir_fd=d)
    except FileNotFoundError:
        pass
    finally:
        os.close(s)
        os.close(d)


def _keep_unchanged(old: _Checked, tfd: int, files: dict[str, str]) -> None:
    """Move the old copy of every file whose content did not change into the new build (keeping
    its modification time), and the Makefile products too when no file changed (make stays a
    no-op)."""
    assert old.stamp is not None
    unchanged = [n for n, h in files.items() if old.stamp.files.get(n) == h and n in old.entries]
    for n in unchanged:
        _move_if_same(old.fd, tfd, n, old.entries[n])
    if len(unchanged) == len(files) and set(old.stamp.files) == set(files):
        for n in old.stamp.products:
            if n in old.entries:
                _move_if_same(old.fd, tfd, n, old.entries[n])


def _in_parent(root: int, rel: str, action: Callable[[int, str], None]) -> None:
    """``action(fd, name)`` on entry ``rel`` under directory ``root`` (``fd`` open on its
    parent); nothing when the parent is gone or the action fails (the entry stays)."""
    head, tail = _split(rel)
    try:
        d = _open_rel(root, head)
    except OSError:
        return
    try:
        action(d, tail)
    except OSError:
        pass
    finally:
        os.close(d)


def _delete_checked(old: _Checked) -> bool:
    """Delete what was checked in the old build (through its descriptor, wherever it now is);
    True when it is now empty.  Entries that changed or appeared since are left."""
    for rel, ident in old.entries.items():

        def unlink_same(d: int, name: str, ident: _ID = ident) -> None:
            if _ident(os.stat(name, dir_fd=d, follow_symlinks=False)) == ident:
                os.unlink(name, dir_fd=d)

        _in_parent(old.fd, rel, unlink_same)
    for rel in reversed(old.dirs):
        _in_parent(old.fd, rel, lambda d, name: os.rmdir(name, dir_fd=d))
    with os.scandir(old.fd) as it:
        return next(iter(it), None) is None


def replace_build_dir(
    outdir: Path, files: dict[str, str], *, program: str, mapping: str, inputs: str, kernel: str
) -> list[Path]:
    """Write a build into ``outdir`` atomically.

    ``files`` maps each file of the build (POSIX path relative to ``outdir``) to its text; the
    stamp is added and the new directory takes ``outdir``'s place; the old build (checked as
    the module docstring says) is removed only after the new one is in place.  ``kernel``
    names the kernel (its Makefile's products are ``kernel`` and ``libkernel.so``).  Returns the
    paths left behind: an old build's directory that something wrote into during the build
    (normally empty).  Raises E062 when ``outdir`` may not be replaced, E061 when the file
    system refuses (a name too long, no permission, no space); a failure leaves ``outdir`` as
    it was and no temporary directory behind.
    """
    outdir = Path(os.path.abspath(outdir))
    if not outdir.name:
        raise _refuse(outdir, "it is the file system's root")
    try:
        return _replace(outdir, files, program, mapping, inputs, kernel)
    except OSError as e:
        what = e.strerror or str(e)
        hint = None
        if e.errno == errno.ENAMETOOLONG:
            hint = (
                "the file system refuses a name that long (at most 255 bytes a component, "
                "4096 a path on Linux); pass -o a shorter path"
            )
        raise CypressError(
            "E061",
            f"cannot write the build directory {outdir}: {what}",
            Loc(str(outdir)),
            hint=hint,
        ) from None


def _replace(
    outdir: Path, files: dict[str, str], program: str, mapping: str, inputs: str, kernel: str
) -> list[Path]:
    outdir.parent.mkdir(parents=True, exist_ok=True)
    pfd = os.open(outdir.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    name = outdir.name
    old: _Checked | None = None
    tmp = trash = None
    tfd = xfd = -1
    left: list[Path] = []
    try:
        old = _check(outdir, pfd)
        data = {rel: text.encode() for rel, text in files.items()}
        hashes = {rel: sha256(b) for rel, b in sorted(data.items())}
        tmp = _mkdir_fresh(pfd, ".cyp-")
        tfd = os.open(tmp, DIR_FLAGS, dir_fd=pfd)
        _write_files(tfd, data)
        _write_files(
            tfd, {STAMP: Stamp(program, mapping, inputs, hashes, kernel).to_json().encode()}
        )
        if old is None:
            # a directory renamed over anything but an empty directory fails: nothing is lost
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            tmp = None
            return left
        trash = _mkdir_fresh(pfd, ".cyp-old-")
        xfd = os.open(trash, DIR_FLAGS, dir_fd=pfd)

        def put_back() -> None:
            """What was moved aside goes back to DIR; when DIR is taken again, it stays aside,
            whole (and ``left`` says where)."""
            try:
                os.rename("d", name, src_dir_fd=xfd, dst_dir_fd=pfd)
            except OSError:
                left.append(outdir.parent / trash / "d")

        try:
            os.rename(name, "d", src_dir_fd=pfd, dst_dir_fd=xfd)
        except FileNotFoundError:
            raise _refuse(
                outdir,
                "it was moved away while cypressc was writing it",
                "run the build again when nothing else writes there",
            ) from None
        if _ident(os.stat("d", dir_fd=xfd, follow_symlinks=False)) != old.ident:
            put_back()  # DIR was swapped after the check: touch nothing else
            raise _refuse(
                outdir,
                "it was replaced by another file while cypressc was writing it"
                + (f" (it is now {left[0]})" if left else ""),
                "run the build again when nothing else writes there",
            )
        try:
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except OSError as e:
            put_back()  # the old build
            if left:
                e.strerror = f"{e.strerror or e}; the old build is now {left[0]}"
            raise
        tmp = None
        # the new build is complete and in place; old copies of unchanged files replace their
        # fresh twins through the two descriptors, wherever either directory is by now
        if old.stamp is not None:
            _keep_unchanged(old, tfd, hashes)
        if _delete_checked(old):
            os.rmdir("d", dir_fd=xfd)
        else:
            left.append(outdir.parent / trash / "d")
        return left
    finally:
        for fd in (tfd, xfd, old.fd if old is not None else -1):
            if fd >= 0:
                os.close(fd)
        if tmp is not None:  # the temporary directory this build made
            shutil.rmtree(tmp, dir_fd=pfd, ignore_errors=True)
        if trash is not None and not left:
            try:
                os.rmdir(trash, dir_fd=pfd)
            except OSError:
                pass
        os.close(pfd)
