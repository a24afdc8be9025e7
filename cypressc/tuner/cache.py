"""The caches of ``cypressc tune`` and ``cypressc.compile`` (docs/tuning.md, "The caches").

Everything lives under one directory, ``$CYPRESSC_CACHE_DIR`` (default
``~/.cache/cypressc``)::

    kernels/<key>/     built kernels: the `cypressc build` files + lib<name>.so, keyed by the
                       sha256 of the generated sources, nvcc's version, the flags and headers
    prune/<k>/<key>.json   the compiler's verdict on one candidate mapping
    tune/<k>/<key>.json    a tuning result, keyed by (program and mapping content, compiler,
                           device name, dtypes, sizes)

Entries are written to a temporary name and renamed into place, so concurrent tunes never
see half an entry; deleting the directory is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "digest", "compiler_fingerprint", "JsonStore"]


def cache_dir() -> Path:
    """``$CYPRESSC_CACHE_DIR``, else ``~/.cache/cypressc`` (not created here)."""
    env = os.environ.get("CYPRESSC_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "cypressc"


def digest(*parts: Any) -> str:
    """sha256 hex of the parts (str, bytes, or anything JSON-serializable), length-framed so
    that ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for p in parts:
        b = (
            p
            if isinstance(p, bytes)
            else p.encode()
            if isinstance(p, str)
            else json.dumps(p, sort_keys=True, default=str).encode()
        )
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


@cache
def compiler_fingerprint() -> str:
    """A hash of cypressc's own sources, runtime headers and machine models: a verdict or a
    tuning result is reused only by the compiler that made it."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(p for pat in ("**/*.py", "**/*.cuh", "**/*.yaml") for p in root.glob(pat))
    return digest(*[str(p.relative_to(root)) for p in files], *[p.read_bytes() for p in files])


class JsonStore:
    """A directory of small JSON documents by hex key (``<dir>/<key[:2]>/<key>.json``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        """The document, or ``None`` when absent or unreadable (a torn or foreign file)."""
        try:
            return json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, doc: Any) -> None:
        """Write atomically; a cache that cannot be written is skipped, never an error."""
        p = self.path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, p)
        except OSError:
            pass
