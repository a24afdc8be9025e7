"""``cypressc build -o DIR`` never destroys what it did not write (issue #9, item 1), and
``build`` without ``-o`` writes ``build/<name>`` in the working directory (item 7).

Every case uses real directories and the real CLI (click's runner, in-process)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.backend.outdir import STAMP
from cypressc.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROG, MAP = (
    str(ROOT / "programs" / "gemm.cyp"),
    str(ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"),
)
BUILT = {"gemm.cu", "gemm.h", "main.cu", "main.h", "Makefile", "gemm.json", STAMP}


def build(*extra: str):
    return CliRunner().invoke(main, ["build", PROG, "-m", MAP, *extra], catch_exceptions=False)


def tree(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` with its bytes (symlinks not followed)."""
    return {
        str(p.relative_to(d)): (
            p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir/link>"
        )
        for p in sorted(d.rglob("*"))
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder: JSON files, code and a subfolder."""
    p = tmp_path / "proj"
    (p / "sub").mkdir(parents=True)
    (p / "package.json").write_text('{"name": "mine"}\n')
    (p / "settings.json").write_text("{}\n")
    (p / "important.py").write_text("print('keep me')\n")
    (p / "sub" / "x.txt").write_text("x\n")
    return p


def refused(r, path: Path, why: str) -> None:
    assert r.exit_code == 1, r.output
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{path}: error[E062]: refusing to replace {path}: "), first
    assert why in first, first
    assert "Traceback" not in r.stderr


def test_project_folder_with_json_files_is_refused_and_untouched(project):
    before = tree(project)
    refused(build("-o", str(project)), project, "was not written by `cypressc build`")
    assert tree(project) == before
    assert [p.name for p in project.parent.iterdir()] == ["proj"]  # no temporary directory left


def test_working_directory_is_refused(project, monkeypatch):
    monkeypatch.chdir(project)
    before = tree(project)
    refused(build("-o", "."), project, "working directory")
    assert tree(project) == before


def test_an_ancestor_of_the_working_directory_is_refused(project, monkeypatch):
    monkeypatch.chdir(project / "sub")
    before = tree(project)
    refused(build("-o", ".."), project, "working directory")
    assert tree(project) == before


def test_symlink_to_elsewhere_is_not_followed(project, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(project)
    before = tree(project)
    refused(build("-o", str(link)), link, "symbolic link")
    assert tree(project) == before and link.is_symlink()


def test_symlink_to_an_earlier_build_is_not_followed(tmp_path):
    assert build("-o", str(tmp_path / "real")).exit_code == 0
    (tmp_path / "link").symlink_to(tmp_path / "real")
    before = tree(tmp_path / "real")
    refused(build("-o", str(tmp_path / "link")), tmp_path / "link", "symbolic link")
    assert tree(tmp_path / "real") == before


def test_a_file_is_refused(project):
    f = project / "important.py"
    refused(build("-o", str(f)), f, "it is a file")
    assert f.read_text() == "print('keep me')\n"


def test_new_directory_is_created_with_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        r = build("-o", str(tmp_path / "a" / "b"))
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "a" / "b"
    assert {p.name for p in out.iterdir()} == BUILT
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in out.iterdir())
    stamp = json.loads((out / STAMP).read_text())
    assert stamp["tool"] == "cypressc" and stamp["program"].endswith("programs/gemm.cyp")
    assert set(stamp["files"]) == BUILT - {STAMP} and len(stamp["inputs"]) == 64


def test_empty_directory_is_used(tmp_path):
    (tmp_path / "e").mkdir()
    assert build("-o", str(tmp_path / "e")).exit_code == 0
    assert {p.name for p in (tmp_path / "e").iterdir()} == BUILT


def test_build_over_a_build_replaces_it_and_keeps_make_products(tmp_path):
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    # what `make` adds is the build's own; an unchanged rebuild keeps it (make stays a no-op)
    (out / "gemm").write_bytes(b"\x7fELF binary")
    (out / "libgemm.so").write_bytes(b"\x7fELF lib")
    mtime = (out / "gemm.cu").stat().st_mtime_ns
    assert build("-o", str(out)).exit_code == 0
    assert (out / "gemm").read_bytes() == b"\x7fELF binary" and (
        out / "gemm.cu"
    ).stat().st_mtime_ns == mtime
    # a different build replaces the sources and drops the stale products
    r = build("-o", str(out), "--dtype", "T=bf16")
    assert r.exit_code == 0, r.stderr
    assert {p.name for p in out.iterdir()} == BUILT and "__nv_bfloat16" in (
        out / "gemm.cu"
    ).read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "b"
    ]  # no temporary or trash directory left


def test_stale_build_with_a_user_file_is_refused(tmp_path):
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    (out / "notes.txt").write_text("mine\n")
    before = tree(out)
    refused(build("-o", str(out)), out, "notes.txt was not written by cypressc")
    assert tree(out) == before


def test_stale_build_with_an_edited_file_is_refused(tmp_path):
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    with (out / "gemm.cu").open("a") as f:
        f.write("// my experiment\n")
    before = tree(out)
    refused(build("-o", str(out)), out, "gemm.cu was changed after cypressc wrote it")
    assert tree(out) == before


def test_a_forged_or_broken_stamp_does_not_make_a_directory_ours(project):
    (project / STAMP).write_text('{"tool": "somebody-else", "files": {}, "products": []}')
    refused(build("-o", str(project)), project, "was not written by `cypressc build`")
    (project / STAMP).write_text("not json")
    refused(build("-o", str(project)), project, "was not written by `cypressc build`")
    assert (project / "important.py").exists()


def test_failed_build_leaves_the_old_build(tmp_path):
    """A program the compiler refuses never replaces a good build with a half-written one."""
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    before = tree(out)
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(MAP).read_text().replace("pipeline: 3", "pipeline: 8"))
    r = CliRunner().invoke(
        main, ["build", PROG, "-m", str(bad), "-o", str(out)], catch_exceptions=False
    )
    assert r.exit_code == 1 and "error[E046]" in r.stderr, r.stderr
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "bad.yaml"]


def test_default_output_is_build_name_in_the_working_directory(tmp_path, monkeypatch):
    """`cypressc build gemm.cyp -m h100.yaml`, exactly as the README says, works."""
    monkeypatch.chdir(tmp_path)
    r = build()
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "build" / "gemm"
    assert r.stdout.splitlines()[0] == f"built gemm into {out}"
    assert {p.name for p in out.iterdir()} == BUILT


def test_the_stamp_is_not_mistaken_for_the_kernel_abi(tmp_path):
    """Tools find a build's kernel ABI as its only ``*.json`` (cypressc.runtime.load, the
    tuner, the benches); the stamp must not be one (the first tune of dual_gemm read it)."""
    out = tmp_path / "b"
    assert build("-o", str(out)).exit_code == 0
    assert [p.name for p in out.glob("*.json")] == ["gemm.json"]
