"""The task library (issue #37 item 1): ``from hopper import mma, clear, copy`` brings in
cypressc/lib/hopper.cyp's variants exactly as if written in the program, so
tests/programs/lib/gemm.cyp (programs/gemm.cyp with those trees imported) renders the same
files, byte for byte, as programs/gemm.cyp."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.build import render_build
from tests.compiled import rendered, snapshots, tree

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mapping", ["h100.yaml", "h100_128x128.yaml"])
def test_imported_gemm_renders_byte_identical(mapping: str) -> None:
    full = rendered(ROOT / "programs/gemm.cyp", ROOT / "mappings/gemm" / mapping)
    lib = rendered(ROOT / "tests/programs/lib/gemm.cyp", ROOT / "mappings/gemm" / mapping)
    assert sorted(lib.files) == sorted(full.files)
    for name, text in full.files.items():
        assert lib.files[name] == text, name


def test_imported_gemm_shares_the_dtype_binding() -> None:
    """``--dtype T=bf16`` binds the library's T too: the bf16 builds match as well."""
    m, bf16 = ROOT / "mappings/gemm/h100.yaml", {"T": "bf16"}
    out = []
    for prog in (ROOT / "programs/gemm.cyp", ROOT / "tests/programs/lib/gemm.cyp"):
        out.append(render_build(tree(prog, m, bf16), snapshots(prog, m, dtypes=bf16)).files)
    assert out[0] == out[1]
    assert "__nv_bfloat16" in out[1]["gemm.cu"]


def _errors(tmp_path: Path, files: dict[str, str], main: str = "main.cyp", **kw) -> list:
    from cypressc.diagnostics import CypressErrors
    from cypressc.lang.checker import check_program
    from cypressc.lang.parser import parse_file

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    try:
        check_program(parse_file(tmp_path / main, **kw))
    except CypressErrors as e:
        return e.errors
    return []


LEAF = '@task("{task}", Leaf, writes=["C"])\ndef {name}(C: tensor[2, f32]):\n    fill(C, 0)\n'


def test_a_module_beside_the_program_comes_first_then_i_folders(tmp_path: Path) -> None:
    from cypressc.lang.parser import parse_file

    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "mine.cyp").write_text(LEAF.format(task="zero", name="zero_thread"))
    (tmp_path / "main.cyp").write_text("from mine import zero\n")
    prog = parse_file(tmp_path / "main.cyp", include_path=(tmp_path / "inc",))
    assert [v.name for v in prog.variants] == ["zero_thread"]
    (tmp_path / "mine.cyp").write_text(LEAF.format(task="zero", name="zero_beside"))
    prog = parse_file(tmp_path / "main.cyp", include_path=(tmp_path / "inc",))
    assert [v.name for v in prog.variants] == ["zero_beside"]


def test_imported_variants_sit_at_the_import_and_a_program_adds_its_own(tmp_path: Path) -> None:
    from cypressc.lang.parser import parse_file

    (tmp_path / "main.cyp").write_text(
        LEAF.format(task="first", name="first_thread")
        + "T = dtype(f16, bf16)\nfrom hopper import clear\n"
        + LEAF.format(task="clear", name="clear_mine")
    )
    names = [v.name for v in parse_file(tmp_path / "main.cyp").variants]
    assert names == ["first_thread", "clear_tile", "clear_inner", "clear_thread", "clear_mine"]


def test_a_variant_defined_in_the_program_and_the_module_is_e020(tmp_path: Path) -> None:
    errs = _errors(
        tmp_path,
        {
            "main.cyp": "T = dtype(f16)\nfrom hopper import clear\n"
            + LEAF.format(task="clear", name="clear_thread")
        },
    )
    dup = [e for e in errs if e.code == "E020"]
    assert [(Path(e.loc.file).name, e.loc.line) for e in dup] == [("main.cyp", 4)]
    assert dup[0].notes[0][1].file == "cypressc/lib/hopper.cyp"


def test_a_cycle_through_two_modules_is_e018(tmp_path: Path) -> None:
    errs = _errors(
        tmp_path,
        {
            "main.cyp": "from a import x\n",
            "a.cyp": "from b import y\n" + LEAF.format(task="x", name="x_thread"),
            "b.cyp": "from a import x\n" + LEAF.format(task="y", name="y_thread"),
        },
    )
    assert [(e.code, Path(e.loc.file).name, e.loc.line) for e in errs] == [("E018", "b.cyp", 1)]
    assert "main.cyp -> a.cyp -> b.cyp -> a.cyp" in errs[0].message


def test_a_dtype_the_module_does_not_allow_is_e013_at_the_import(tmp_path: Path) -> None:
    errs = _errors(
        tmp_path,
        {
            "main.cyp": "T = dtype(f16, bf16, f32)\nfrom hopper import clear\n",
        },
        dtypes={"T": "f32"},
    )
    assert [(e.code, e.loc.line) for e in errs] == [("E013", 2)]
    assert "'T' is f32 here, but module 'hopper' allows only f16 or bf16" in errs[0].message


def test_star_alias_relative_and_externals_are_e016(tmp_path: Path) -> None:
    for stmt in (
        "from hopper import *",
        "from hopper import clear as c",
        "from .hopper import clear",
    ):
        errs = _errors(tmp_path, {"main.cyp": f"T = dtype(f16)\n{stmt}\n"})
        assert [e.code for e in errs] == ["E016"], stmt
    (tmp_path / "ops.cuh").write_text("// zero_ext\n")
    errs = _errors(
        tmp_path,
        {
            "ext.cyp": 'include("ops.cuh")\n@external("zero_ext", writes=["C"])\n'
            "def zero_ext(C: tensor[2, f32]): ...\n" + LEAF.format(task="z", name="z_thread"),
            "main.cyp": "from ext import z\n",
        },
    )
    assert [(e.code, e.loc.line) for e in errs] == [("E016", 1)], errs


def test_from_cypress_import_star_is_still_ignored() -> None:
    from cypressc.lang.parser import parse_source

    prog = parse_source(
        "from cypress import *\nimport cypress\n" + LEAF.format(task="z", name="z_thread")
    )
    assert [v.name for v in prog.variants] == ["z_thread"]


def test_imported_modules_are_inputs_of_the_build_and_the_tuning_key(tmp_path: Path) -> None:
    """A build's inputs hash (its stamp) and ``cypressc tune``'s cache key read the modules a
    program imports: editing the library is a new input, not a cache hit."""
    from cypressc.build import _inputs_hash
    from cypressc.frontend import front_end
    from cypressc.lang.imports import LIB_DIR, source_files

    lib = (LIB_DIR / "hopper.cyp").read_text()
    (tmp_path / "mylib.cyp").write_text(lib)
    prog = (ROOT / "tests/programs/lib/gemm.cyp").read_text().replace("from hopper", "from mylib")
    assert "from mylib" in prog
    (tmp_path / "gemm.cyp").write_text(prog)
    mapping = ROOT / "mappings/gemm/h100.yaml"
    t = front_end(tmp_path / "gemm.cyp", mapping)
    assert source_files(t.program) == (tmp_path / "gemm.cyp", tmp_path / "mylib.cyp")
    before = _inputs_hash(t, None)
    (tmp_path / "mylib.cyp").write_text(lib + "\n# edited\n")
    assert _inputs_hash(front_end(tmp_path / "gemm.cyp", mapping), None) != before
    shipped = front_end(ROOT / "tests/programs/lib/gemm.cyp", mapping)
    assert source_files(shipped.program)[1] == LIB_DIR / "hopper.cyp"  # a file, wherever run
