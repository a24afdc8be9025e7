"""Shared test fixtures: the ``golden`` file fixture (``--update-golden`` rewrites them)."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.compiled import ring_joins_off

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture
def mapping_variant(tmp_path):
    """``variant(base, old, new, *more)``: a copy of mapping file ``base`` in ``tmp_path`` with
    every ``old`` (which must occur) replaced by ``new`` -- one knob changed, the rest as shipped;
    ``more`` gives further ``(old, new)`` pairs, applied in order."""

    def variant(base: Path, old: str, new: str, *more: tuple[str, str]) -> Path:
        text = base.read_text()
        for o, n in ((old, new), *more):
            assert o in text, o
            text = text.replace(o, n)
        m = tmp_path / "m.yaml"
        m.write_text(text)
        return m

    return variant


@pytest.fixture
def no_ring_joins(monkeypatch):
    """Compile with no ring joins (:mod:`cypressc.passes.rings`): FlashAttention-3's peeled K
    tile and last V tile keep buffers of their own, as for the tests of what such buffers
    need (byte sharing, free and next-tile barriers) that no other program reaches."""
    ring_joins_off(monkeypatch)


@pytest.fixture
def wall_clock():
    """A stand-in for ``cypressc.tuner.timing.interleaved`` on the CPU: the same rounds and the
    same result shape (ms per call, by name), timed with the wall clock instead of CUDA events."""

    def timed(torch_, fns, rounds, reps):
        out = {k: [] for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                out[k].append((time.perf_counter() - t0) * 1e3 + 1e-6)
        return out

    return timed


@pytest.fixture
def clean_ptxas():
    """``check(build_dir, target)``: ``make target`` in a cypressc build directory with ptxas
    verbose, asserting it builds, ptxas injects no wgmma waits (C7517/C7519) and nothing
    spills.  For ``lib<name>.so`` only the device code is compiled (a cubin, a third of the
    time: the launcher's host code is what the golden files' builds and the harness compile)."""
    from tests.compiled import ptxas_report

    def check(out: Path, target: str) -> None:
        if target.startswith("lib") and target.endswith(".so"):
            name = target.removeprefix("lib").removesuffix(".so")
            log = ptxas_report(out / f"{name}.cu", out / f"{name}.cubin")
        else:
            r = subprocess.run(
                ["make", "-C", str(out), target, "EXTRA_NVCCFLAGS=-Xptxas -v"],
                capture_output=True,
                text=True,
            )
            assert r.returncode == 0, r.stderr[-3000:]
            log = r.stdout + r.stderr
        assert "C7517" not in log and "C7519" not in log, log[-3000:]
        assert "0 bytes spill stores" in log
        assert not re.search(r"[1-9]\d* bytes spill stores", log)

    return check


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current output (then read the diff!)",
    )


def pytest_configure(config):
    """The session's caches, made by the controller before any worker starts (the workers
    inherit the environment) and removed at its end: compiled modules (tests/compiled.py)
    and nvcc's outputs (tests/tools/nvcc, put first on PATH)."""
    if os.environ.get("CYPRESSC_TEST_CACHE") or hasattr(config, "workerinput"):
        return
    config._cypressc_env = dict(os.environ)
    config._cypressc_cache = tempfile.mkdtemp(prefix="cypressc-test-cache-")
    os.environ["CYPRESSC_TEST_CACHE"] = str(Path(config._cypressc_cache) / "modules")
    os.mkdir(os.environ["CYPRESSC_TEST_CACHE"])
    real = shutil.which("nvcc")
    if real is not None:
        os.environ["CYPRESSC_REAL_NVCC"] = real
        os.environ["CYPRESSC_NVCC_CACHE"] = str(Path(config._cypressc_cache) / "nvcc")
        os.mkdir(os.environ["CYPRESSC_NVCC_CACHE"])
        os.environ["PATH"] = str(ROOT / "tests" / "tools") + os.pathsep + os.environ["PATH"]


def pytest_unconfigure(config):
    made = getattr(config, "_cypressc_cache", None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.clear()
        os.environ.update(config._cypressc_env)


def pytest_collection_modifyitems(config, items):
    """``--update-golden`` runs only the tests that read a golden file (``make golden``): the
    rest of the suite has nothing to rewrite.  Without ``CYPRESSC_TEST_FULL`` the tests marked
    ``full`` are deselected (``make test``'s ten minutes: compiles another test already covers)."""
    from tests.budget import FULL

    if not FULL:
        full = [it for it in items if it.get_closest_marker("full")]
        if full:
            config.hook.pytest_deselected(items=full)
            items[:] = [it for it in items if it not in full]
    if not config.getoption("--update-golden"):
        return
    keep = [it for it in items if "golden" in getattr(it, "fixturenames", ())]
    config.hook.pytest_deselected(items=[it for it in items if it not in keep])
    items[:] = keep


class Golden:
    """Compare text against ``tests/golden/<rel>``; a mismatch fails with a unified diff."""

    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, rel: str, actual: str) -> None:
        path = GOLDEN / rel
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text() != actual:
                path.write_text(actual)
            return
        if not path.exists():
            pytest.fail(
                f"missing golden file {path.relative_to(ROOT)}; run `make golden` and read it"
            )
        expected = path.read_text()
        if expected != actual:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(True), actual.splitlines(True), f"golden/{rel}", "actual"
                )
            )
            pytest.fail(f"output differs from golden/{rel}:\n{diff}")


@pytest.fixture
def golden(request) -> Golden:
    return Golden(request.config.getoption("--update-golden"))


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def gc():
    """bench/gpu_check.py, imported once (bench/ on ``sys.path`` while it loads): the tests that
    check its tables, references and ``prepare`` hooks on the CPU."""
    import importlib
    import sys

    bench = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, bench)
    try:
        yield importlib.import_module("gpu_check")
    finally:
        sys.path.remove(bench)
