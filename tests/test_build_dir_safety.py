"""``cypressc build -o DIR`` loses no user file to a forged stamp, a race, a symlinked path or a
long name, and rebuilds a call-external program into its own output (issue #35 section 1).

Real directories, the real CLI (click's runner, in-process) and, for the races, a real second
thread that swaps ``DIR`` for a symbolic link to a directory of user files."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.backend.outdir import STAMP, replace_build_dir
from cypressc.cli import main
from cypressc.diagnostics import CypressError
from tests import compiled

ROOT = Path(__file__).resolve().parent.parent
PROG, MAP = (
    str(ROOT / "programs" / "gemm.cyp"),
    str(ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"),
)
EPI = (
    str(ROOT / "programs" / "gemm_epilogue.cyp"),
    str(ROOT / "tests/mappings/full" / "gemm_epilogue" / "h100.yaml"),
)


def build(*extra: str, prog: str = PROG, mapping: str = MAP):
    return CliRunner().invoke(main, ["build", prog, "-m", mapping, *extra], catch_exceptions=False)


def tree(d: Path) -> dict[str, bytes]:
    """Every entry under ``d`` with its bytes (symbolic links not followed)."""
    return {
        str(p.relative_to(d)): (
            p.read_bytes()
            if p.is_file() and not p.is_symlink()
            else b"<link>"
            if p.is_symlink()
            else b"<dir>"
        )
        for p in sorted(d.rglob("*"))
    }


def refused(r, code: str, why: str) -> None:
    assert r.exit_code == 1, r.output
    first = r.stderr.splitlines()[0]
    assert f"error[{code}]" in first and why in first, first
    assert "Traceback" not in r.stderr


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    """A user's directory whose files carry the names a build writes."""
    d = tmp_path / "mine"
    d.mkdir()
    for n in ("Makefile", "gemm.cu", "gemm.json", "main.cu", "thesis.tex", "data.bin"):
        (d / n).write_text(f"the user's {n}\n")
    return d


# -- 1. a forged stamp -----------------------------------------------------------------------


def test_a_stamp_cannot_make_user_files_products(tmp_path, mine):
    """The review's forged stamp listed thesis.tex and data.bin as products: both were deleted."""
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    for n in ("thesis.tex", "data.bin"):
        shutil.copy(mine / n, out / n)
    stamp = json.loads((out / STAMP).read_text())
    stamp["products"] = ["thesis.tex", "data.bin"]
    del stamp["kernel"]
    (out / STAMP).write_text(json.dumps(stamp))
    before = tree(out)
    refused(build("-o", str(out)), "E062", "was not written by `cypressc build`")
    assert tree(out) == before


def test_a_stamp_naming_another_kernel_removes_no_user_file(tmp_path):
    """A stamp whose kernel is ``thesis`` still only lists ELF files named like a kernel's
    products; the user's ``thesis`` (text) is not one."""
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    stamp = json.loads((out / STAMP).read_text())
    stamp["kernel"] = "thesis"
    (out / STAMP).write_text(json.dumps(stamp))
    (out / "thesis").write_text("chapter 1\n")
    before = tree(out)
    refused(
        build("-o", str(out)), "E062", "was not written by `cypressc build`"
    )  # thesis.cu unlisted
    stamp["files"]["thesis.cu"] = stamp["files"]["gemm.cu"]
    (out / "thesis.cu").write_bytes((out / "gemm.cu").read_bytes())
    (out / STAMP).write_text(json.dumps(stamp))
    before = tree(out)
    refused(build("-o", str(out)), "E062", "thesis is not the file `make` builds")
    assert tree(out) == before


def test_a_product_that_is_not_what_nvcc_writes_is_refused(tmp_path):
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    (out / "libgemm.so").write_text("my notes, named badly\n")
    before = tree(out)
    refused(build("-o", str(out)), "E062", "libgemm.so is not the file `make` builds")
    assert tree(out) == before
    (out / "libgemm.so").write_bytes(b"\x7fELF....")  # what nvcc writes: the build's own
    assert build("-o", str(out)).exit_code == 0


# -- 2. races --------------------------------------------------------------------------------


def _files() -> dict[str, str]:
    return compiled.rendered("gemm", "tests/mappings/full/gemm/h100.yaml").files


class _SwapWhenRead(str):
    """A file's text that, the moment the build encodes it (after the output directory was
    checked, before anything moves), swaps the directory for a link to the user's files."""

    swap = None

    def encode(self, *a, **k):  # noqa: D102
        if _SwapWhenRead.swap is not None:
            _SwapWhenRead.swap()
            _SwapWhenRead.swap = None
        return str.encode(self, *a, **k)


def test_a_swap_after_the_check_moves_no_user_file(tmp_path, mine):
    """Between the check and the replacement DIR becomes a link to the user's directory: the
    build is refused, the user's files stay where they were, the old build whole beside them."""
    out, aside = tmp_path / "out", tmp_path / "aside"
    files = _files()
    replace_build_dir(out, files, program="p", mapping="m", inputs="i", kernel="gemm")
    (out / "gemm").write_bytes(b"\x7fELF built by make")
    build_before, mine_before = tree(out), tree(mine)

    def swap():
        os.rename(out, aside)
        out.symlink_to(mine)

    _SwapWhenRead.swap = swap
    poisoned = {n: _SwapWhenRead(t) for n, t in files.items()}
    with pytest.raises(CypressError) as e:
        replace_build_dir(out, poisoned, program="p", mapping="m", inputs="i", kernel="gemm")
    assert e.value.code == "E062" and "replaced by another file" in str(e.value)
    assert tree(mine) == mine_before and out.is_symlink() and os.readlink(out) == str(mine)
    assert tree(aside) == build_before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "aside",
        "mine",
        "out",
    ]  # nothing left over


def test_a_swapper_thread_loses_no_user_file(tmp_path, mine):
    """A second thread swaps DIR for a link to the user's directory and back, at random moments,
    while builds run: over 200 builds no user file is lost or changed."""
    out, aside = tmp_path / "out", tmp_path / "aside"
    files = _files()
    replace_build_dir(out, files, program="p", mapping="m", inputs="i", kernel="gemm")
    mine_before = tree(mine)
    stop = threading.Event()
    rng = random.Random(35)

    def swapper():
        while not stop.is_set():
            try:
                os.rename(out, aside)
            except OSError:
                pass
            try:
                out.symlink_to(mine)
            except OSError:
                pass
            stop.wait(rng.random() * 2e-4)
            try:
                if out.is_symlink():
                    out.unlink()
            except OSError:
                pass
            try:
                os.rename(aside, out)
            except OSError:
                pass
            stop.wait(rng.random() * 4e-4)

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    outcomes: dict[str, int] = {}
    try:
        for i in range(200):
            # unchanged and changed rebuilds alternate: both the keep and the replace paths run
            fs = files if i % 2 else {**files, "gemm.cu": files["gemm.cu"] + f"// {i}\n"}
            try:
                replace_build_dir(out, fs, program="p", mapping="m", inputs="i", kernel="gemm")
                outcomes["built"] = outcomes.get("built", 0) + 1
            except CypressError as e:
                outcomes[e.code] = outcomes.get(e.code, 0) + 1
            assert tree(mine) == mine_before, (i, outcomes)
    finally:
        stop.set()
        t.join()
    assert tree(mine) == mine_before
    assert outcomes.get("built", 0) > 0 and outcomes.get("E062", 0) > 0, outcomes
    assert set(outcomes) <= {"built", "E062", "E061"}, outcomes


# -- 3. identities, not path text --------------------------------------------------------------


def test_the_working_directory_through_a_symlinked_parent_is_refused(tmp_path, monkeypatch):
    (tmp_path / "real" / "proj").mkdir(parents=True)
    (tmp_path / "real" / "proj" / "notes.txt").write_text("mine\n")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path / "real" / "proj")
    before = tree(tmp_path / "real")
    refused(build("-o", str(tmp_path / "via" / "proj")), "E062", "working directory")
    assert tree(tmp_path / "real") == before


def test_a_build_you_stand_in_is_not_replaced_through_a_symlinked_path(tmp_path, monkeypatch):
    out = tmp_path / "real" / "b"
    assert build("-o", str(out)).exit_code == 0
    (tmp_path / "via").symlink_to(tmp_path / "real")
    monkeypatch.chdir(out)
    before = tree(out)
    refused(build("-o", str(tmp_path / "via" / "b")), "E062", "working directory")
    assert tree(out) == before


# -- 4. long names ---------------------------------------------------------------------------


def test_a_name_of_255_bytes_builds_and_256_is_a_located_error(tmp_path):
    ok = tmp_path / ("n" * 255)
    assert build("-o", str(ok)).exit_code == 0
    assert (ok / "gemm.cu").is_file()
    assert build("-o", str(ok)).exit_code == 0  # and rebuilds over itself
    long = tmp_path / ("n" * 256)
    r = build("-o", str(long))
    refused(r, "E061", "File name too long")
    assert r.stderr.startswith(f"{long}: error[E061]") and "shorter path" in r.stderr
    deep = tmp_path.joinpath(*["d" * 200] * 25)  # over PATH_MAX
    refused(build("-o", str(deep)), "E061", "File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n" * 255]  # nothing made, nothing left


# -- 5. files at any depth -------------------------------------------------------------------


def test_a_call_external_program_rebuilds_into_its_own_output(tmp_path):
    """gemm_epilogue's build copies the user's header to include/: the stamp lists it and a
    rebuild replaces it (it was refused: "include was not written by cypressc")."""
    out = tmp_path / "e"
    r = build("-o", str(out), prog=EPI[0], mapping=EPI[1])
    assert r.exit_code == 0, r.stderr
    stamp = json.loads((out / STAMP).read_text())
    nested = [f for f in stamp["files"] if "/" in f]
    assert nested and all((out / f).is_file() for f in nested), stamp["files"]
    r = build("-o", str(out), prog=EPI[0], mapping=EPI[1])
    assert r.exit_code == 0, r.stderr
    # an edited copy, or a file of the user's beside it, is still refused
    header = out / nested[0]
    header.write_text(header.read_text() + "// mine\n")
    before = tree(out)
    refused(build("-o", str(out), prog=EPI[0], mapping=EPI[1]), "E062", f"{nested[0]} was changed")
    assert tree(out) == before
    header.write_text(header.read_text().removesuffix("// mine\n"))
    (header.parent / "notes.h").write_text("// mine\n")
    refused(
        build("-o", str(out), prog=EPI[0], mapping=EPI[1]),
        "E062",
        f"{header.parent.name}/notes.h was not written by cypressc",
    )
    assert (header.parent / "notes.h").read_text() == "// mine\n"
