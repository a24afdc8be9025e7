"""Built kernels by content: ``cypressc tune`` and ``cypressc.compile`` compile through here.

:func:`build_kernel` writes the `cypressc build` files of a task tree into a fresh
temporary directory, hashes what nvcc will read (the generated ``<name>.cu``/``.h``, the
Makefile and ABI json, the runtime header, the CUTLASS include directory, ``nvcc
--version`` and the ``NVCC*``/``CUDA_ARCH`` flags from the environment) and looks the key
up under ``<cache>/kernels/<key>/``; only a miss runs ``make lib<name>.so`` (or the same
nvcc command where make is missing), and the finished directory is renamed into place.
:func:`build_many` does that for many trees on every core (nvcc runs as a subprocess, so
threads suffice).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cypressc.runtime import KernelInfo
from cypressc.tuner.cache import cache_dir, digest

__all__ = [
    "BuildError",
    "Built",
    "nvcc_version",
    "cutlass_include",
    "nvcc_command",
    "build_kernel",
    "build_many",
    "make_library",
]

_FLAG_ENV = ("NVCC", "NVCCFLAGS", "EXTRA_NVCCFLAGS", "CUDA_ARCH", "CUTLASS_INCLUDE", "CUTLASS_INC")


class BuildError(RuntimeError):
    """nvcc (or make) failed, or is missing; ``log`` holds the tail of its output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Built:
    """A built kernel: ``dir`` holds ``<name>.json`` and ``lib<name>.so``; ``hit`` when it
    came from the cache; ``seconds`` spent (0 for a hit)."""

    dir: Path
    name: str
    key: str
    hit: bool
    seconds: float


@cache
def nvcc_version() -> str:
    """``nvcc --version``'s text; :class:`BuildError` when nvcc cannot be run."""
    nvcc = os.environ.get("NVCC", "nvcc")
    try:
        p = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(
            f"cannot run {nvcc}: {e}; install the CUDA toolkit (nvcc >= 12.4)"
        ) from None
    if p.returncode:
        raise BuildError(f"{nvcc} --version failed", p.stdout + p.stderr)
    return p.stdout.strip()


def cutlass_include() -> str:
    """What the generated Makefile uses: $CUTLASS_INCLUDE, $CUTLASS_INC, or the headers of the
    installed nvidia-cutlass package ("" when none)."""
    import importlib.util

    for v in (os.environ.get("CUTLASS_INCLUDE"), os.environ.get("CUTLASS_INC")):
        if v:
            return v
    spec = importlib.util.find_spec("cutlass_library")
    return os.path.join(spec.submodule_search_locations[0], "source", "include") if spec else ""


def nvcc_command(outdir: Path, name: str, target: str, extra: str = "") -> list[str]:
    """The generated Makefile's recipe for ``target`` (``<name>`` or ``lib<name>.so``), for
    machines without make.  tests/backend/test_harness.py checks it against ``make -n``."""
    from cypressc.backend.harness import RUNTIME_DIR

    info = KernelInfo.load_json(Path(outdir) / f"{name}.json")
    runtime = info.runtime_include
    if not (Path(runtime) / "cypress.cuh").exists():
        runtime = str(RUNTIME_DIR)
    arch = info.cuda_arch or "90a"
    cmd = [
        "nvcc",
        "-O3",
        "-std=c++17",
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
        *extra.split(),
        f"-I{runtime}",
        f"-I{cutlass_include()}",
    ]
    if target == f"lib{name}.so":
        return cmd + ["-Xcompiler", "-fPIC", "-shared", "-o", target, f"{name}.cu"]
    return cmd + ["-o", target, "main.cu", f"{name}.cu"]


def _key(d: Path, name: str) -> str:
    info = KernelInfo.load_json(d / f"{name}.json")
    runtime = Path(info.runtime_include) / "cypress.cuh"
    files = [d / f"{name}.cu", d / f"{name}.h", d / f"{name}.json", d / "Makefile"]
    return digest(
        "kernel-v1",
        *[f.name for f in files],
        *[f.read_bytes() if f.exists() else b"" for f in files],
        runtime.read_bytes() if runtime.exists() else b"",
        cutlass_include(),
        nvcc_version(),
        {k: os.environ.get(k, "") for k in _FLAG_ENV},
    )


def make_library(d: Path, name: str, timeout: float = 900) -> float:
    """Build ``d/lib<name>.so`` with the generated Makefile (or its nvcc command where make
    is missing); return the seconds taken; :class:`BuildError` with nvcc's output on failure."""
    t0 = time.perf_counter()
    if shutil.which("make"):
        cmd, cwd = ["make", "-s", "-C", str(d), f"lib{name}.so"], None
    else:
        cmd, cwd = nvcc_command(d, name, f"lib{name}.so", os.environ.get("EXTRA_NVCCFLAGS", "")), d
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"building lib{name}.so timed out after {timeout:.0f} s") from None
    except OSError as e:
        raise BuildError(f"cannot run {cmd[0]}: {e}") from None
    if p.returncode or not (d / f"lib{name}.so").exists():
        raise BuildError(
            f"building lib{name}.so failed (exit {p.returncode})", (p.stdout + p.stderr)[-4000:]
        )
    return time.perf_counter() - t0


# The passes are not thread-safe (their Z3 queries use Z3's default context): threads take
# turns running them; the front end and nvcc, the slow part, run in parallel.
_COMPILER = threading.Lock()


def build_kernel(tree, root: Path | None = None) -> Built:
    """Compile ``tree`` (a :class:`~cypressc.mapping.tasktree.TaskTree`) to a loadable kernel
    directory under ``root`` (default ``<cache>/kernels``), reusing an identical earlier
    build.  Raises the compiler's :class:`~cypressc.diagnostics.CypressError` for a refused
    mapping and :class:`BuildError` when nvcc fails.  Safe to call from several threads."""
    from cypressc.build import write_build

    root = Path(root) if root is not None else cache_dir() / "kernels"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        with _COMPILER:
            write_build(tree, tmp / "k")
        d = tmp / "k"
        name = next(d.glob("*.json")).stem
        key = _key(d, name)
        final = root / key
        if (final / f"lib{name}.so").exists():
            return Built(final, name, key, True, 0.0)
        seconds = make_library(d, name)
        try:
            d.rename(final)
        except OSError:  # another process finished the same kernel first: use theirs
            if not (final / f"lib{name}.so").exists():
                raise
        return Built(final, name, key, False, seconds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_many(
    jobs: Sequence[Callable[[], object]],
    *,
    workers: int | None = None,
    root: Path | None = None,
    on_done: Callable[[int, Built | BaseException], None] | None = None,
) -> list[Built | BaseException]:
    """:func:`build_kernel` of each ``jobs[i]()`` (a function returning the task tree) on
    ``workers`` threads (default: every core).  Each result is a :class:`Built` or the
    exception that job raised; ``on_done(i, result)`` reports progress.  A KeyboardInterrupt
    cancels the builds not started and re-raises."""
    workers = workers or os.cpu_count() or 1
    out: list[Built | BaseException | None] = [None] * len(jobs)

    def one(i: int) -> Built:
        return build_kernel(jobs[i](), root)

    pool = cf.ThreadPoolExecutor(max(1, min(workers, len(jobs))))
    try:
        futs = {pool.submit(one, i): i for i in range(len(jobs))}
        for f in cf.as_completed(futs):
            i = futs[f]
            try:
                out[i] = f.result()
            except Exception as e:  # noqa: BLE001 - reported per candidate
                out[i] = e
            if on_done:
                on_done(i, out[i])  # type: ignore[arg-type]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out  # type: ignore[return-value]
