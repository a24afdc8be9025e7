"""The task library and mapping templates (issue #37 items 1-3): ``from hopper import mma,
clear, copy`` brings in cypressc/lib's variants exactly as if written in the program, and a
mapping's ``tree:`` entries and shared ``tunables:`` expand to the paper's full rows.  Every
bundled program, programs/<name>.cyp, imports the library trees it can, and every bundled
mapping, mappings/<name>/<m>.yaml, uses templates; their full forms, as the Cypress paper
writes them, are tests/programs/full/<name>.cyp and tests/mappings/full/<name>/<m>.yaml.
Sugared program + sugared mapping and full program + full mapping render the same files
(CUDA, header, harness, Makefile, ABI), byte for byte, for every mapping, dtype T in f16 and
bf16, and every value of a choice parameter (``CYPRESSC_TEST_FULL=1``; the default run
renders each program's h100.yaml in f16, gemm and flash_attention3 in bf16 too, and compares
the instantiated task trees of every pair)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from cypressc.build import render_build
from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.mapping.tasktree import BLOCK_KNOBS
from tests.budget import FULL
from tests.compiled import snapshots, tree

ROOT = Path(__file__).resolve().parents[1]
FULL_FORMS = ROOT / "tests/programs/full"
FULL_MAPPINGS = ROOT / "tests/mappings/full"
PROGRAMS = sorted(p.stem for p in FULL_FORMS.glob("*.cyp"))
CHOICES = {"gemm_epilogue": ("ACT", ("bias_gelu", "bias_silu"))}


def _bindings(name: str) -> list[dict[str, str]]:
    """``--dtype T=...`` (f16, bf16) times each value of the program's choice parameter."""
    out = []
    for t in ("f16", "bf16"):
        param, values = CHOICES.get(name, (None, (None,)))
        for value in values:
            out.append({"T": t} | ({param: value} if param and value != values[0] else {}))
    return out


def _pairs(full: bool) -> list:
    """(program, mapping, bindings) to render: all under CYPRESSC_TEST_FULL, else h100.yaml in
    f16 for every program and in bf16 for gemm and flash_attention3."""
    out = []
    for name in PROGRAMS:
        for m in sorted((ROOT / "mappings" / name).glob("*.yaml")):
            for b in _bindings(name):
                default = m.name == "h100.yaml" and (
                    b == {"T": "f16"}
                    or (b == {"T": "bf16"} and name in ("gemm", "flash_attention3"))
                )
                if full or default:
                    out.append(
                        pytest.param(name, m.name, b, id=f"{name}-{m.stem}-{'-'.join(b.values())}")
                    )
    return out


def test_every_program_and_mapping_has_its_full_form() -> None:
    assert PROGRAMS == sorted(p.stem for p in (ROOT / "programs").glob("*.cyp"))
    for name in PROGRAMS:
        assert "\nfrom " in (ROOT / f"programs/{name}.cyp").read_text(), name
        sugared = sorted(m.name for m in (ROOT / "mappings" / name).glob("*.yaml"))
        assert sugared == sorted(m.name for m in (FULL_MAPPINGS / name).glob("*.yaml")), name
        for m in sugared:
            assert "{tree: " in (ROOT / "mappings" / name / m).read_text(), (name, m)


def _render(prog: Path, mapping: Path, dtypes: dict[str, str]):
    """The rendered files, or the refusal (code and message: where it points differs)."""
    try:
        return render_build(
            tree(prog, mapping, dtypes), snapshots(prog, mapping, dtypes=dtypes)
        ).files
    except CypressError as e:
        return (e.code, e.message)
    except CypressErrors as es:
        return [(e.code, e.message) for e in es.errors]


@pytest.mark.parametrize(("name", "mapping", "dtypes"), _pairs(FULL))
def test_library_program_renders_byte_identical(name: str, mapping: str, dtypes: dict) -> None:
    full = _render(FULL_FORMS / f"{name}.cyp", FULL_MAPPINGS / name / mapping, dtypes)
    lib = _render(ROOT / f"programs/{name}.cyp", ROOT / "mappings" / name / mapping, dtypes)
    if not isinstance(full, dict):
        assert lib == full
        return
    assert isinstance(lib, dict), lib
    assert sorted(lib) == sorted(full)
    for f, text in full.items():
        assert lib[f] == text, f
    if dtypes["T"] == "bf16":
        assert "__nv_bfloat16" in lib[f"{name}.cu"]


def _norm(x, seen=None):
    """``x`` with every source location dropped (the two forms differ only there): nested
    dataclasses, lists, tuples and dicts as tuples."""
    if isinstance(x, Loc):
        return None
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(_norm(getattr(x, f.name)) for f in dataclasses.fields(x))
    if isinstance(x, (list, tuple)):
        return tuple(_norm(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, _norm(v)) for k, v in x.items())
    return x


def _node_key(n) -> tuple:
    """A task-tree node without its instance's name (a template names its rows) and without
    atom tunables (a sugared mapping may leave them to be derived from the tile, which only
    the compile decides: the render test compares those kernels)."""
    atoms = {t for t, d in n.variant.tunables().items() if d.kind == "atom"}
    return (
        n.variant.name,
        n.proc,
        tuple(n.mems.items()),
        tuple((k, v) for k, v in n.tunables.items() if k not in atoms),
        tuple(_norm(getattr(n.instance, k)) for k in BLOCK_KNOBS),
        tuple((_norm(s), _node_key(c)) for s, c in n.children),
    )


def _tree_key(t) -> tuple:
    """The instantiated tree (every node: variant, processor, memories, tunables, block
    knobs, launches) and the program's declarations, locations dropped; the variants by
    name (the forms list them in another order)."""
    prog = t.program
    return (
        _node_key(t.root),
        tuple(sorted((v.name, _norm(v)) for v in prog.variants)),
        tuple(sorted((e.name, _norm(e)) for e in prog.externals)),
        _norm(prog.dtype_params),
        _norm(prog.choices),
        tuple(w.code for w in t.warnings),
    )


@functools.cache
def _checked(path: Path):
    """``path`` parsed and checked once per session (programs/ on the include path)."""
    from cypressc.lang.checker import check_program
    from cypressc.lang.parser import parse_file

    return check_program(parse_file(path, include_path=(ROOT / "programs",)))


@pytest.mark.parametrize(
    ("name", "mapping"),
    [(n, m.name) for n in PROGRAMS for m in sorted((ROOT / "mappings" / n).glob("*.yaml"))],
)
def test_library_program_instantiates_the_same_tree(name: str, mapping: str) -> None:
    """Every program x mapping, front end only (what ``front_end`` does: the program parsed
    and checked, the mapping loaded once, each instantiated): the same task tree."""
    from cypressc.mapping.loader import load_mapping
    from cypressc.mapping.tasktree import instantiate

    keys = [
        _tree_key(instantiate(_checked(p), load_mapping(m)))
        for p, m in (
            (FULL_FORMS / f"{name}.cyp", FULL_MAPPINGS / name / mapping),
            (ROOT / f"programs/{name}.cyp", ROOT / "mappings" / name / mapping),
        )
    ]
    assert keys[0] == keys[1]


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
    assert "drop the task from the import" in dup[0].hint


def test_e020_points_at_the_programs_variant_when_the_import_follows_it(tmp_path: Path) -> None:
    errs = _errors(
        tmp_path,
        {
            "main.cyp": "T = dtype(f16)\n"
            + LEAF.format(task="clear", name="clear_thread")
            + "from hopper import clear\n"
        },
    )
    dup = [e for e in errs if e.code == "E020"]
    assert [(Path(e.loc.file).name, e.loc.line) for e in dup] == [("main.cyp", 3)]
    assert dup[0].notes == (("imported from here", dup[0].notes[0][1]),)
    assert dup[0].notes[0][1].file == "cypressc/lib/hopper.cyp"


def test_a_module_imported_by_two_statements_is_parsed_once(tmp_path: Path, monkeypatch) -> None:
    from cypressc.lang import parser

    calls = []
    real = parser.parse_module_file
    monkeypatch.setattr(
        parser, "parse_module_file", lambda path, *a: calls.append(path) or real(path, *a)
    )
    (tmp_path / "main.cyp").write_text(
        "T = dtype(f16)\nfrom hopper import clear\nfrom hopper import copy\n"
    )
    prog = parser.parse_file(tmp_path / "main.cyp")
    assert [v.task for v in prog.variants] == ["clear"] * 3 + ["copy"] * 3
    assert [p.name for p in calls] == ["hopper.cyp"]


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


def test_star_alias_and_relative_imports_are_e016(tmp_path: Path) -> None:
    for stmt in (
        "from hopper import *",
        "from hopper import clear as c",
        "from .hopper import clear",
    ):
        errs = _errors(tmp_path, {"main.cyp": f"T = dtype(f16)\n{stmt}\n"})
        assert [e.code for e in errs] == ["E016"], stmt


EXT = (
    'include("ops.cuh")\n@external("my::zero_ext", writes=["C"])\n'
    "def zero_ext(C: tensor[2, f32]): ...\n"
    '@task("z", Leaf, writes=["C"])\ndef z_thread(C: tensor[2, f32]):\n    zero_ext(C)\n'
)


def test_a_module_brings_its_externals_with_headers_beside_it(tmp_path: Path) -> None:
    """A module's @external declarations come with any import from it, once however many
    statements import it; its include() resolves beside the module, not the program."""
    from cypressc.lang.checker import check_program
    from cypressc.lang.parser import parse_file

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "ops.cuh").write_text("// my::zero_ext\n")
    (tmp_path / "lib" / "ext.cyp").write_text(EXT + LEAF.format(task="y", name="y_thread"))
    (tmp_path / "prog.cyp").write_text("from ext import z\nfrom ext import y\n")
    prog = check_program(parse_file(tmp_path / "prog.cyp", include_path=(tmp_path / "lib",)))
    assert [v.name for v in prog.variants] == ["z_thread", "y_thread"]
    assert [(e.name, e.header_path) for e in prog.externals] == [
        ("zero_ext", str((tmp_path / "lib" / "ops.cuh").resolve()))
    ]


def test_a_module_external_the_program_declares_again_is_e014(tmp_path: Path) -> None:
    (tmp_path / "ops.cuh").write_text("// my::zero_ext\n")
    errs = _errors(
        tmp_path,
        {
            "ext.cyp": EXT,
            "prog.cyp": "from ext import z\n"
            + EXT.replace("z_thread", "w_thread").replace('"z"', '"w"'),
        },
        main="prog.cyp",
    )
    assert [(e.code, e.loc.line) for e in errs] == [("E014", 1)], errs


def test_a_module_choice_is_e016(tmp_path: Path) -> None:
    (tmp_path / "ops.cuh").write_text("// my::zero_ext\n")
    errs = _errors(
        tmp_path,
        {"ext.cyp": EXT + "F = choice(zero_ext)\n", "prog.cyp": "from ext import z\n"},
        main="prog.cyp",
    )
    assert [(e.code, e.loc.line) for e in errs] == [("E016", 1)], errs
    assert "declares choice parameter 'F'" in errs[0].message


def test_a_module_calls_the_programs_choice_by_name(tmp_path: Path) -> None:
    """epilogue.cyp's leaf calls ACT: the program's choice, bound by --param, or its
    @external of that name; a program declaring neither gets E016 at the imported name."""
    from cypressc.lang.checker import check_program
    from cypressc.lang.parser import parse_file

    (tmp_path / "ops.cuh").write_text("// my::f my::g\n")
    decl = (
        'include("ops.cuh")\nBIAS = dtype(f32)\n'
        '@external("my::f", writes=["x"])\ndef f(x: tensor[2, f32], b: tensor[1, BIAS]): ...\n'
        '@external("my::g", writes=["x"])\ndef g(x: tensor[2, f32], b: tensor[1, BIAS]): ...\n'
    )
    (tmp_path / "prog.cyp").write_text(decl + "ACT = choice(f, g)\nfrom epilogue import epilogue\n")
    for binding, want in (({}, "f"), ({"ACT": "g"}, "g")):
        prog = check_program(parse_file(tmp_path / "prog.cyp", binding))
        leaf = next(v for v in prog.variants if v.name == "epilogue_thread")
        assert [s.fn for s in leaf.body] == [want]
    (tmp_path / "prog.cyp").write_text(
        decl.replace("def f(", "def ACT(") + "from epilogue import epilogue\n"
    )
    leaf = next(
        v
        for v in check_program(parse_file(tmp_path / "prog.cyp")).variants
        if v.name == "epilogue_thread"
    )
    assert [s.fn for s in leaf.body] == ["ACT"]
    errs = _errors(
        tmp_path, {"prog.cyp": decl + "from epilogue import epilogue\n"}, main="prog.cyp"
    )
    assert [(e.code, e.loc.line, e.loc.col) for e in errs] == [("E016", 7, 22)], errs
    assert "calls leaf function 'ACT', which this program does not declare" in errs[0].message
    assert "ACT = choice(f, g)" in errs[0].hint
    assert errs[0].notes[0][1].file == "cypressc/lib/epilogue.cyp"


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
    prog = (ROOT / "programs/gemm.cyp").read_text().replace("from hopper", "from mylib")
    assert "from mylib" in prog
    (tmp_path / "gemm.cyp").write_text(prog)
    mapping = ROOT / "mappings/gemm/h100.yaml"
    t = front_end(tmp_path / "gemm.cyp", mapping)
    assert source_files(t.program) == (tmp_path / "gemm.cyp", tmp_path / "mylib.cyp")
    before = _inputs_hash(t, None)
    (tmp_path / "mylib.cyp").write_text(lib + "\n# edited\n")
    assert _inputs_hash(front_end(tmp_path / "gemm.cyp", mapping), None) != before
    shipped = front_end(ROOT / "programs/gemm.cyp", mapping)
    assert source_files(shipped.program)[1] == LIB_DIR / "hopper.cyp"  # a file, wherever run


def test_a_module_importing_the_epilogue_passes_the_programs_choice_through(
    tmp_path: Path,
) -> None:
    """mid.cyp imports epilogue from the library; the program imports it from mid.cyp: ACT
    is the program's choice, resolved in the innermost module and checked by the program."""
    from cypressc.lang.checker import check_program
    from cypressc.lang.parser import parse_file

    (tmp_path / "ops.cuh").write_text("// my::f\n")
    (tmp_path / "mid.cyp").write_text(
        "BIAS = dtype(f32, f16, bf16)\nfrom epilogue import epilogue\n"
        + LEAF.format(task="noop", name="noop_thread")
    )
    decl = (
        'include("ops.cuh")\nBIAS = dtype(f32, f16, bf16)\n'
        '@external("my::f", writes=["x"])\ndef f(x: tensor[2, f32], b: tensor[1, BIAS]): ...\n'
    )
    (tmp_path / "prog.cyp").write_text(decl + "ACT = choice(f)\nfrom mid import epilogue\n")
    prog = check_program(parse_file(tmp_path / "prog.cyp"))
    leaf = next(v for v in prog.variants if v.name == "epilogue_thread")
    assert [s.fn for s in leaf.body] == ["f"]
    errs = _errors(tmp_path, {"prog.cyp": decl + "from mid import epilogue\n"}, main="prog.cyp")
    assert [(e.code, e.loc.line) for e in errs] == [("E016", 5)], errs
