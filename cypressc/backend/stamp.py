"""The stamp of a build directory, :data:`STAMP`: what ``cypressc build`` wrote there (every
file at any depth with its SHA-256, the kernel whose Makefile products may sit beside them, the
program, the mapping and a hash of the inputs).  :mod:`cypressc.backend.outdir` replaces a
directory only when its stamp is valid and everything in it is what the stamp says.

Reading works through directory descriptors and never follows a symbolic link.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "STAMP",
    "Stamp",
    "products_of",
    "read_stamp",
    "stamp_at",
    "read_at",
    "sha256",
    "DIR_FLAGS",
]

STAMP = ".cypressc-build"  # JSON, but no .json suffix: a build directory's *.json is its kernel ABI
_TOOL = "cypressc"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def products_of(kernel: str) -> tuple[str, ...]:
    """The files the generated Makefile of kernel ``kernel`` builds (harness, shared library)."""
    return (kernel, f"lib{kernel}.so")


def sha256(data: bytes) -> str:
    """The SHA-256 of ``data``, hex."""
    return hashlib.sha256(data).hexdigest()


def _valid_rel(name: str) -> bool:
    """A stamp's file name: relative, POSIX, no ``.``/``..``/empty components."""
    parts = name.split("/")
    return (
        bool(name)
        and "\\" not in name
        and "\0" not in name
        and all(p not in ("", ".", "..") for p in parts)
        and not PurePosixPath(name).is_absolute()
    )


@dataclass(frozen=True)
class Stamp:
    """What a build directory holds.

    ``files`` maps each written file (POSIX path relative to the directory, any depth) to its
    SHA-256 (hex); ``kernel`` is the kernel's name (a C identifier), whose Makefile products
    (:func:`products_of`) are the only other files the directory may hold; ``inputs`` is the
    SHA-256 of the program text, the mapping text and the dtype bindings.
    """

    program: str
    mapping: str
    inputs: str
    files: dict[str, str]
    kernel: str

    @property
    def products(self) -> tuple[str, ...]:
        return products_of(self.kernel)

    def to_json(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("cypressc")
        except PackageNotFoundError:  # running from a source tree
            v = "unknown"
        return (
            json.dumps(
                {
                    "tool": _TOOL,
                    "version": v,
                    "program": self.program,
                    "mapping": self.mapping,
                    "inputs": self.inputs,
                    "kernel": self.kernel,
                    "files": self.files,
                    "products": list(self.products),
                },
                indent=2,
            )
            + "\n"
        )


def _parse_stamp(text: str) -> Stamp | None:
    """The stamp in ``text``, or None when it is not a well-formed cypressc stamp.

    The kernel is named by ``kernel`` (or, in stamps before #35, by ``products`` =
    ``[NAME, libNAME.so]``); it must be an identifier whose ``NAME.cu`` and ``Makefile`` the
    stamp lists, so a stamp can make no file a product but a kernel's harness and library.
    """
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("tool") != _TOOL:
        return None
    files = raw.get("files")
    if not (
        isinstance(files, dict)
        and all(
            isinstance(k, str) and _valid_rel(k) and isinstance(v, str) for k, v in files.items()
        )
    ):
        return None
    kernel = raw.get("kernel")
    if kernel is None:
        products = raw.get("products")
        if isinstance(products, list) and len(products) == 2 and isinstance(products[0], str):
            kernel = products[0]
            if products != list(products_of(kernel)):
                return None
    if not (
        isinstance(kernel, str)
        and kernel.isidentifier()
        and f"{kernel}.cu" in files
        and "Makefile" in files
    ):
        return None
    return Stamp(
        str(raw.get("program")),
        str(raw.get("mapping")),
        str(raw.get("inputs")),
        dict(files),
        kernel,
    )


def read_stamp(d: Path) -> Stamp | None:
    """The stamp of directory ``d``, or None when it has none or it is not cypressc's (a
    symbolic link, not a regular file, not JSON, another tool's, or naming a product that is
    not its kernel's).  Never raises."""
    try:
        fd = os.open(d, DIR_FLAGS)
    except OSError:
        return None
    try:
        return stamp_at(fd)
    finally:
        os.close(fd)


def stamp_at(dfd: int) -> Stamp | None:
    """The stamp of the directory open as ``dfd`` (see :func:`read_stamp`)."""
    try:
        data = read_at(dfd, STAMP)
    except OSError:
        return None
    if data is None:
        return None
    try:
        return _parse_stamp(data.decode())
    except UnicodeDecodeError:
        return None


def read_at(dfd: int, name: str) -> bytes | None:
    """The bytes of regular file ``name`` in directory ``dfd`` (None: not a regular file, e.g.
    a symbolic link or a directory)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)
