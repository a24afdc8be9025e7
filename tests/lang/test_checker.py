"""Checker unit tests: the bundled programs check clean, and every static check
(E020–E036) fires, at the right place, on a minimal program that breaks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.diagnostics import CypressErrors
from cypressc.lang import syntax as S
from cypressc.lang.check_env import signature
from cypressc.lang.checker import check_program, variant_env
from cypressc.lang.parser import parse_file, parse_source

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted((ROOT / "programs").glob("*.cyp"))


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_bundled_programs_check_clean(path):
    prog = parse_file(path)
    assert check_program(prog) is prog


def test_the_four_programs_are_bundled():
    assert {p.stem for p in PROGRAMS} >= {"gemm", "batched_gemm", "dual_gemm", "gemm_reduction"}


def errors(src: str) -> list:
    with pytest.raises(CypressErrors) as ei:
        check_program(parse_source(src, "c.cyp"))
    return ei.value.errors


MMA_LEAF = """
@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, f16], B: tensor[2, f16]):
    warpgroup_mma(WGMMA_64x256x16(), C, A, B)
"""
CLEAR_LEAF = """
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
"""
ADD_LEAF = """
@task("add", Leaf, reads=["C", "X"], writes=["C"])
def add_thread(C: tensor[2, f32], X: tensor[2, f32]):
    add(C, X)
"""


def inner(
    body: str,
    params: str = "C: tensor[2, f32]",
    reads: str = "",
    writes: str = '"C"',
    task: str = "t",
) -> str:
    return (
        f'@task("{task}", Inner, reads=[{reads}], writes=[{writes}])\n'
        f"def v({params}):\n" + "".join(f"    {line}\n" for line in body.strip().splitlines())
    )


CASES = [
    # (id, source, code, line, message fragment)
    ("E020", CLEAR_LEAF + CLEAR_LEAF, "E020", 7, "'clear_thread' is defined twice"),
    ("E021", inner('launch("mmaa", C)') + MMA_LEAF, "E021", 3, "no variant implements task 'mmaa'"),
    (
        "E022",
        inner('launch("clear", C, C)') + CLEAR_LEAF,
        "E022",
        3,
        "takes 1 argument(s), 2 given",
    ),
    (
        "E023_dtype",
        inner('launch("clear", C)', params="C: tensor[2, f16]") + CLEAR_LEAF,
        "E023",
        3,
        "is tensor[2, f16], expected tensor[2, f32]",
    ),
    (
        "E023_rank",
        inner('launch("clear", C)', params="C: tensor[3, f32]") + CLEAR_LEAF,
        "E023",
        3,
        "is tensor[3, f32]",
    ),
    (
        "E023_partition",
        inner('P = partition_by_blocks(C, (4, 4))\nlaunch("clear", P)') + CLEAR_LEAF,
        "E023",
        4,
        "'P' is a partition; pass one piece",
    ),
    ("E023_scalar", inner('n = 4\nlaunch("clear", n)') + CLEAR_LEAF, "E023", 4, "must be a tensor"),
    (
        "E024",
        CLEAR_LEAF + CLEAR_LEAF.replace("clear_thread", "clear2").replace("f32", "f16"),
        "E024",
        7,
        "has signature (tensor[2, f16]), but 'clear_thread' has (tensor[2, f32])",
    ),
    (
        "E025",
        CLEAR_LEAF.replace('writes=["C"]', 'writes=["C", "D"]'),
        "E025",
        3,
        "writes= names 'D', which is not a tensor parameter",
    ),
    ("E026_undefined", inner("x = y + 1"), "E026", 3, "'y' is not defined"),
    ("E026_twice", inner("x = 1\nx = 2"), "E026", 4, "'x' is already defined"),
    (
        "E026_loopvar_shadow",
        inner("i = 1\nfor i in srange(4):\n    pass"),
        "E026",
        4,
        "'i' is already defined",
    ),
    ("E026_shape", inner("x = D.shape[0]"), "E026", 3, "'D' is not defined"),
    (
        "E026_size_name",
        inner("pass", params="C: tensor[(C, N), f32]"),
        "E026",
        2,
        "size name 'C' is already defined",
    ),
    (
        "E026_partition_tensor",
        inner("P = partition_by_blocks(D, (1, 1))"),
        "E026",
        3,
        "'D' is not defined",
    ),
    ("E026_launch_arg", inner('launch("clear", D)') + CLEAR_LEAF, "E026", 3, "'D' is not defined"),
    (
        "E026_proc",
        inner('P = partition_by_mma(C, WGMMA_64x64x16(), LANE, "C")'),
        "E026",
        3,
        "'LANE' is not defined",
    ),
    (
        "E027_write",
        inner(
            'launch("add", C, X)',
            params="C: tensor[2, f32], X: tensor[2, f32]",
            reads='"C", "X"',
            writes='"C"',
        ).replace('launch("add", C, X)', 'launch("add", X, C)')
        + ADD_LEAF,
        "E027",
        3,
        "'add' writes its parameter 'C', but 'v' holds no write privilege on 'X'",
    ),
    (
        "E027_read",
        inner(
            'launch("add", C, X)',
            params="C: tensor[2, f32], X: tensor[2, f32]",
            reads='"C"',
            writes='"C"',
        )
        + ADD_LEAF,
        "E027",
        3,
        "'add' reads its parameter 'X', but 'v' holds no privilege on 'X'",
    ),
    ("E028", inner("fill(C, 0)"), "E028", 3, "Inner variant 'v' calls leaf function 'fill'"),
    (
        "E029_launch",
        CLEAR_LEAF.replace("fill(C, 0)", 'launch("clear", C)'),
        "E029",
        4,
        "cannot launch tasks",
    ),
    (
        "E029_loop",
        CLEAR_LEAF.replace("fill(C, 0)", "for i in srange(2):\n        fill(C, 0)"),
        "E029",
        4,
        "cannot contain loops",
    ),
    (
        "E029_partition",
        CLEAR_LEAF.replace("fill(C, 0)", "P = partition_by_blocks(C, (1, 1))"),
        "E029",
        4,
        "cannot partition tensors",
    ),
    (
        "E029_make",
        CLEAR_LEAF.replace("fill(C, 0)", "T: tensor[1, f32] = make_tensor(4)"),
        "E029",
        4,
        "cannot make tensors",
    ),
    (
        "E030_whole",
        inner('for i in prange(4):\n    launch("clear", C)') + CLEAR_LEAF,
        "E030",
        4,
        "every iteration of the prange writes all of 'C'",
    ),
    (
        "E030_missing_var",
        inner(
            "P = partition_by_blocks(C, (4, 4))\nfor i, j in prange(2, 2):\n"
            '    launch("clear", P[i, 0])'
        )
        + CLEAR_LEAF,
        "E030",
        5,
        "prange variable(s) j do not index the piece",
    ),
    (
        "E030_expr_index",
        inner(
            "P = partition_by_blocks(C, (4, 4))\nfor i in prange(2):\n"
            '    launch("clear", P[i + 1, 0])'
        )
        + CLEAR_LEAF,
        "E030",
        5,
        "prange variable(s) i do not index the piece",
    ),
    (
        "E030_outer_prange",
        inner(
            "P = partition_by_blocks(C, (4, 4))\nfor i in prange(2):\n"
            '    for k in srange(2):\n        launch("clear", P[k, 0])'
        )
        + CLEAR_LEAF,
        "E030",
        6,
        "prange variable(s) i",
    ),
    (
        "E030_mma_b",
        inner(
            'P = partition_by_mma(C, WGMMA_64x64x16(), THREAD, "B")\nfor i in prange(128):\n'
            '    launch("clear", P[i])'
        )
        + CLEAR_LEAF,
        "E030",
        5,
        "operand B overlap",
    ),
    (
        "E031_number",
        inner("PROC = tunable(processor)\nx = PROC + 1"),
        "E031",
        4,
        "'PROC' is a tunable processor, not a number",
    ),
    (
        "E031_atom",
        inner("MMA = tunable(atom)\nx = MMA * 2"),
        "E031",
        4,
        "'MMA' is a tunable atom, not a number",
    ),
    (
        "E031_proc",
        inner('N = tunable(int)\nP = partition_by_mma(C, WGMMA_64x64x16(), N, "C")'),
        "E031",
        4,
        "'N' must be a processor",
    ),
    (
        "E031_not_atom",
        inner('N = tunable(int)\nP = partition_by_mma(C, N, THREAD, "C")'),
        "E031",
        4,
        "'N' is not an atom",
    ),
    (
        "E032_unknown",
        CLEAR_LEAF.replace("fill(C, 0)", "memset(C, 0)"),
        "E032",
        4,
        "unknown leaf function 'memset'",
    ),
    (
        "E032_arity",
        CLEAR_LEAF.replace("fill(C, 0)", "fill(C)"),
        "E032",
        4,
        "fill() takes 2 argument(s), 1 given",
    ),
    (
        "E032_dtype",
        MMA_LEAF.replace("A: tensor[2, f16]", "A: tensor[2, f32]"),
        "E032",
        4,
        "'A' of warpgroup_mma() must be f16 or bf16, got f32",
    ),
    (
        "E032_rank",
        (
            '@task("r", Leaf, reads=["y", "A"], writes=["y"])\n'
            "def r(y: tensor[2, f32], A: tensor[2, f16]):\n    row_sum(y, A)\n"
        ),
        "E032",
        3,
        "'y' of row_sum() must have rank 1, got 2",
    ),
    (
        "E032_not_tensor",
        CLEAR_LEAF.replace("fill(C, 0)", "n = 3\n    fill(n, 0)"),
        "E032",
        5,
        "argument 'C' of fill() must be a tensor",
    ),
    (
        "E033_write",
        CLEAR_LEAF.replace('writes=["C"]', 'reads=["C"]'),
        "E033",
        4,
        "fill() writes 'C', but 'clear_thread' does not hold writes on 'C'",
    ),
    (
        "E033_read",
        ADD_LEAF.replace('reads=["C", "X"]', 'reads=["C"]'),
        "E033",
        4,
        "add() reads 'X', but 'add_thread' does not hold reads on 'X'",
    ),
    (
        "E034_blocks",
        inner("P = partition_by_blocks(C, (4,))"),
        "E034",
        3,
        "needs 2 block extents, got 1",
    ),
    (
        "E034_index_count",
        inner('P = partition_by_blocks(C, (4, 4))\nlaunch("clear", P[0])') + CLEAR_LEAF,
        "E034",
        4,
        "partition 'P' takes 2 index(es), got 1",
    ),
    (
        "E034_not_partition",
        inner('launch("clear", C[0, 0])') + CLEAR_LEAF,
        "E034",
        3,
        "'C' is not a partition and cannot be indexed",
    ),
    (
        "E034_partition_scalar",
        inner("n = 2\nP = partition_by_blocks(n, (1,))"),
        "E034",
        4,
        "'n' is not a tensor",
    ),
    (
        "E034_make_tensor",
        inner("T: tensor[2, f32] = make_tensor(4)"),
        "E034",
        3,
        "make_tensor gives 1 extent(s) for a rank-2 tensor",
    ),
    (
        "E034_slices_rank1",
        inner("P = partition_by_slices(C, 0)", params="C: tensor[1, f32]"),
        "E034",
        3,
        "partition_by_slices needs a dimension of a tensor of rank >= 2",
    ),
    ("E034_slices_dim", inner("P = partition_by_slices(C, 2)"), "E034", 3, "partition_by_slices"),
    (
        "E034_mma_rank",
        inner('P = partition_by_mma(C, WGMMA_64x64x16(), THREAD, "C")', params="C: tensor[3, f32]"),
        "E034",
        3,
        "partition_by_mma splits rank-2 tiles",
    ),
    (
        "E035_shape_rank",
        inner("x = C.shape[2]"),
        "E035",
        3,
        "'C' has rank 2; shape[2] is out of range",
    ),
    ("E035_tensor_number", inner("x = C + 1"), "E035", 3, "'C' is a tensor, not a number"),
    ("E035_min_arity", inner("x = min(1, 2, 3)"), "E035", 3, "min() takes two arguments"),
    ("E035_string", inner('x = "four"'), "E035", 3, "expected a scalar expression"),
    (
        "E035_shape_of_partition",
        inner("P = partition_by_blocks(C, (1, 1))\nx = P.shape[0]"),
        "E035",
        4,
        "'P' is not a tensor, it has no shape",
    ),
    (
        "E036_name",
        MMA_LEAF.replace("WGMMA_64x256x16", "WGMMA_64x260x16"),
        "E036",
        4,
        "unknown instruction atom 'WGMMA_64x260x16'",
    ),
    (
        "E036_partition",
        inner('P = partition_by_mma(C, HMMA_16x8x16(), THREAD, "C")'),
        "E036",
        3,
        "unknown instruction atom 'HMMA_16x8x16'",
    ),
    (
        "E036_not_atom",
        inner('P = partition_by_mma(C, 64, THREAD, "C")'),
        "E036",
        3,
        "expected an instruction atom",
    ),
]


@pytest.mark.parametrize("src,code,line,frag", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_errors(src, code, line, frag):
    errs = errors(src)
    first = next((e for e in errs if e.code == code), None)
    assert first is not None, "\n".join(map(str, errs))
    assert first.loc.file == "c.cyp" and first.loc.line == line, str(first)
    assert frag in first.message, first.message


def test_every_check_code_is_exercised():
    codes = {c[2] for c in CASES}
    assert codes == {f"E0{n}" for n in range(20, 37)}


def test_checker_collects_all_errors_sorted():
    src = inner("x = y + 1\nz = C + 1\nfill(C, 0)")
    assert [(e.code, e.loc.line) for e in errors(src)] == [("E026", 3), ("E035", 4), ("E028", 5)]


def test_error_locations_point_at_the_argument():
    (e,) = errors(inner('launch("clear", C)', params="C: tensor[2, f16]") + CLEAR_LEAF)
    assert (e.loc.line, e.loc.col, e.loc.end_col) == (3, 21, 22)
    assert e.notes == ()


def test_duplicate_variant_has_a_note():
    (e,) = errors(CLEAR_LEAF + CLEAR_LEAF)
    ((note, loc),) = e.notes
    assert note == "first defined here" and loc.line == 3


# ----------------------------------------------------------------------------- accepted
OK = [
    (
        "local_tensors_need_no_privilege",
        inner('T: tensor[2, f32] = make_tensor(4, 4)\nlaunch("clear", T)', writes="") + CLEAR_LEAF,
    ),
    (
        "prange_disjoint_2d",
        inner(
            "P = partition_by_blocks(C, (4, 4))\nfor i, j in prange(2, 2):\n"
            '    launch("clear", P[i, j])'
        )
        + CLEAR_LEAF,
    ),
    (
        "prange_reads_may_alias",
        inner(
            "T: tensor[2, f32] = make_tensor(4, 4)\n"
            "Tp = partition_by_blocks(T, (1, 4))\n"
            'for i in prange(4):\n    launch("add", Tp[i, 0], C)',
            reads='"C"',
            writes="",
        )
        + ADD_LEAF,
    ),
    (
        "mma_c_partition_in_prange",
        inner(
            'P = partition_by_mma(C, WGMMA_64x64x16(), THREAD, "C")\n'
            'for i in prange(128):\n    launch("clear", P[i])'
        )
        + CLEAR_LEAF,
    ),
    (
        "slices_in_prange",
        inner(
            "S = partition_by_slices(C, 0)\nfor l in prange(C.shape[0]):\n"
            '    launch("clear", S[l])',
            params="C: tensor[3, f32]",
        )
        + CLEAR_LEAF,
    ),
    ("srange_may_rewrite", inner('for k in srange(4):\n    launch("clear", C)') + CLEAR_LEAF),
    (
        "atom_tunable",
        MMA_LEAF.replace(
            "    warpgroup_mma(WGMMA_64x256x16(), C, A, B)",
            "    MMA = tunable(atom)\n    warpgroup_mma(MMA, C, A, B)",
        ),
    ),
    (
        "writes_imply_reads",
        ADD_LEAF.replace('reads=["C", "X"], writes=["C"]', 'reads=["X"], writes=["C"]'),
    ),
    (
        "named_sizes",
        inner(
            "P = partition_by_blocks(C, (M / 2, N))\nfor i in prange(2):\n"
            '    launch("clear", P[i, 0])',
            params="C: tensor[(M, N), f32]",
        )
        + CLEAR_LEAF,
    ),
    (
        "scalar_params",
        '@task("s", Inner, writes=["C"])\ndef s(C: tensor[2, f32], n: int):\n'
        '    P = partition_by_blocks(C, (n, max(n, 1)))\n    launch("clear", P[0, 0])\n'
        + CLEAR_LEAF,
    ),
]


@pytest.mark.parametrize("src", [o[1] for o in OK], ids=[o[0] for o in OK])
def test_accepted(src):
    check_program(parse_source(src, "ok.cyp"))


def test_signature_and_variant_env():
    prog = parse_file(ROOT / "programs" / "gemm.cyp")
    sigs = {v.name: signature(v) for v in prog.variants}
    assert str(sigs["gemm_host"]) == "(tensor[2, f16], tensor[2, f16], tensor[2, f16])"
    assert sigs["mma_tile"] == sigs["mma_thread"]
    env = variant_env(prog.variant("gemm_block"))
    assert env["W"].kind == "tunable_int"
    assert (
        env["Cacc"].kind == "tensor"
        and env["Cacc"].local
        and env["Cacc"].type == S.TensorType(2, "f32")
    )
    assert (env["Ap"].kind, env["Ap"].tensor, env["Ap"].pkind, env["Ap"].index_rank) == (
        "partition",
        "A",
        "blocks",
        2,
    )
    env = variant_env(prog.variant("mma_inner"))
    assert (env["Bp"].pkind, env["Bp"].operand, env["Bp"].index_rank) == ("mma", "B", 1)
    assert env["PROC"].kind == "tunable_processor" and env["MMA"].kind == "tunable_atom"


def test_slices_partition_drops_a_dimension():
    prog = parse_file(ROOT / "programs" / "batched_gemm.cyp")
    env = variant_env(prog.variant("batched_gemm_host"))
    assert env["Cs"].type == S.TensorType(2, "f16") and env["Cs"].index_rank == 1


@pytest.mark.parametrize(
    "path, why",
    [
        ("dir/my-gemm.cyp", "is not a C identifier"),
        ("1x.cyp", "is not a C identifier"),
        ("gémm.cyp", "is not a C identifier"),
        ("kernel.txt", "is not a C identifier"),
        ("int.cyp", "is a C++ keyword"),
        ("__global__.cyp", "is a C++ keyword"),
        ("main.cyp", "harness"),
    ],
)
def test_e037_a_file_name_that_cannot_name_the_kernel(path, why):
    """The kernel's C symbols and files take the file's name: one nvcc would reject (or the
    harness's main.cu would overwrite) is refused at the file, before anything is generated."""
    src = Path("programs/gemm.cyp").read_text()
    with pytest.raises(CypressErrors) as ei:
        check_program(parse_source(src, path))
    (e,) = ei.value.errors
    assert e.code == "E037" and why in e.message and e.loc.file == path and e.loc.line == 0
    assert check_program(parse_source(src, "dir/my_gemm.cyp")).kernel_name == "my_gemm"
    if path == "1x.cyp":  # docs/language.md's example
        assert (
            e.message == "the kernel takes its name from the file, and '1x' is not a C identifier"
        )
