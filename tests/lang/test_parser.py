"""Parser unit tests: every construct of the subset parses to the expected syntax nodes
with the right line/column, and every construct outside it is a located E0xx error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cypressc.diagnostics import CypressErrors
from cypressc.lang import syntax as S
from cypressc.lang.parser import parse_file, parse_source

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted((ROOT / "programs").glob("*.cyp"))

SOURCE = '''\
"""module docstring"""
from cypress import *
include("ops.cuh")

@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16], n: int):
    """variant docstring"""
    W, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    M, K = C.shape[0], A.shape[1]
    x = cdiv(K, W) + min(M, 4) * max(n, -2) // 2 - M / W % 3
    Ap = partition_by_blocks(A, (M, W))
    Bm = partition_by_mma(B, WGMMA_64x256x16(), PROC, "B")
    Cs = partition_by_slices(C, 0)
    Cacc: tensor[2, f32] = make_tensor(M, 256)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], B)
    for i, j in prange(2, n):
        pass
    launch("copy", Cacc, C)

@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0.5)
'''


@pytest.fixture(scope="module")
def prog() -> S.Program:
    return parse_source(SOURCE, "t.cyp")


def _at(node) -> tuple[int, int]:
    return node.loc.line, node.loc.col


def test_program_and_variants(prog):
    assert prog.path == "t.cyp"
    assert prog.includes == ("ops.cuh",)
    assert [v.name for v in prog.variants] == ["gemm_block", "clear_thread"]
    v = prog.variants[0]
    assert (v.task, v.kind, v.reads, v.writes) == ("gemm", "inner", ("A", "B"), ("C",))
    assert _at(v) == (6, 1)
    assert [p.name for p in v.params] == ["C", "A", "B", "n"]
    assert v.params[0].type == S.TensorType(2, "f16")
    assert v.params[3].type == S.ScalarType()
    assert _at(v.params[1]) == (6, 35)
    assert [p.name for p in v.tensor_params] == ["C", "A", "B"]
    assert prog.variants[1].kind == "leaf"
    assert set(prog.tasks()) == {"gemm", "clear"}
    assert prog.variant("clear_thread") is prog.variants[1]
    assert prog.variant("nope") is None


def test_tunables_expand_tuple_assignment(prog):
    body = prog.variants[0].body
    tun = [s for s in body if isinstance(s, S.Tunable)]
    assert [(t.name, t.kind) for t in tun] == [("W", "int"), ("PROC", "processor"), ("MMA", "atom")]
    # each element of a tuple assignment is located at its own right-hand side
    assert [_at(t) for t in tun] == [(8, 20), (8, 34), (8, 54)]
    assert set(prog.variants[0].tunables()) == {"W", "PROC", "MMA"}


def test_scalar_expressions(prog):
    lets = {s.name: s for s in prog.variants[0].body if isinstance(s, S.Let)}
    assert lets["M"].value == S.Shape("C", 0)
    assert lets["K"].value == S.Shape("A", 1)
    x = lets["x"].value
    # cdiv(K, W) + ((min(M, 4) * max(n, -2)) // 2) - ((M / W) % 3)
    assert isinstance(x, S.BinOp) and x.op == "-"
    plus = x.lhs
    assert plus.op == "+" and plus.lhs == S.Call("cdiv", (S.Name("K"), S.Name("W")))
    floordiv = plus.rhs
    assert floordiv.op == "//" and floordiv.rhs == S.Const(2)
    assert floordiv.lhs.op == "*"
    assert floordiv.lhs.rhs == S.Call("max", (S.Name("n"), S.Const(-2)))
    assert x.rhs == S.BinOp("%", S.BinOp("/", S.Name("M"), S.Name("W")), S.Const(3))
    assert _at(x) == (10, 9)
    assert S.expr_names(x) == {"K", "W", "M", "n"}


def test_partitions(prog):
    parts = [s for s in prog.variants[0].body if isinstance(s, S.PartitionDecl)]
    blocks, mma, slices = parts
    assert (blocks.name, blocks.tensor, blocks.kind) == ("Ap", "A", "blocks")
    assert blocks.args == (S.Name("M"), S.Name("W"))
    assert _at(blocks) == (11, 5)
    assert (mma.kind, mma.args) == ("mma", (S.Atom("WGMMA_64x256x16"), S.Name("PROC"), S.Str("B")))
    assert _at(mma.args[0]) == (12, 30)
    assert (slices.kind, slices.args) == ("slices", (S.Const(0),))


def test_make_tensor_launch_and_loops(prog):
    body = prog.variants[0].body
    mt = next(s for s in body if isinstance(s, S.MakeTensor))
    assert (mt.name, mt.type, mt.dims) == (
        "Cacc",
        S.TensorType(2, "f32"),
        (S.Name("M"), S.Const(256)),
    )
    assert _at(mt) == (14, 5)
    launches = [s for s in S.walk(body) if isinstance(s, S.Launch)]
    assert [lc.task for lc in launches] == ["clear", "mma", "copy"]
    assert launches[1].args == (
        S.Name("Cacc"),
        S.Piece("Ap", (S.Const(0), S.Name("k"))),
        S.Name("B"),
    )
    assert _at(launches[1]) == (17, 9)
    assert _at(launches[1].args[1]) == (17, 29)
    loops = [s for s in body if isinstance(s, S.Loop)]
    assert [(lp.kind, lp.vars) for lp in loops] == [("srange", ("k",)), ("prange", ("i", "j"))]
    assert loops[0].extents == (S.Call("cdiv", (S.Name("K"), S.Name("W"))),)
    assert loops[1].extents == (S.Const(2), S.Name("n"))
    assert loops[1].body == ()  # `pass` is dropped
    assert _at(loops[1]) == (18, 5)


def test_leaf_call(prog):
    (call,) = prog.variants[1].body
    assert call == S.LeafCall("fill", (S.Name("C"), S.Const(0.5)))
    assert _at(call) == (24, 5)
    assert call.loc.text == "    fill(C, 0.5)"
    assert call.loc.end_col == 17


def test_nodes_are_frozen_and_loc_is_not_compared(prog):
    call = prog.variants[1].body[0]
    with pytest.raises(AttributeError):
        call.fn = "copy"  # type: ignore[misc]
    assert call == S.LeafCall("fill", (S.Name("C"), S.Const(0.5)))  # locs differ, nodes equal


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_bundled_programs_parse(path):
    """A bundled program's variants are its own or the task library's (cypressc/lib); its
    full form, tests/programs/full/<name>.cyp, defines every one itself (and finds the
    headers it includes with `-I programs`)."""
    prog = parse_file(path)
    assert prog.variants and all(
        v.loc.file == str(path) or v.loc.file.startswith("cypressc/lib/") for v in prog.variants
    )
    full = ROOT / "tests" / "programs" / "full" / path.name  # its headers: -I programs
    variants = parse_file(full, include_path=(ROOT / "programs",)).variants
    assert all(v.loc.file == str(full) for v in variants)


def test_syntax_warnings_are_not_printed(tmp_path, recwarn):
    f = tmp_path / "w.cyp"
    f.write_text(
        '"""a \\d docstring"""\n@task("c", Leaf, writes=["C"])\ndef c(C: tensor[1, f32]):\n    fill(C, 0)\n'
    )
    parse_file(f)
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]


# ----------------------------------------------------------------------------- errors
LEAF = '@task("c", Leaf, writes=["C"])\ndef c(C: tensor[2, f32]):\n'
INNER = '@task("c", Inner, writes=["C"])\ndef c(C: tensor[2, f32]):\n'

ERRORS = [
    # (id, source, code, line, col, message fragment)
    ("syntax", LEAF + "    fill(C, 0\n", "E001", 3, 9, "syntax error"),
    ("empty", "   \n\n", "E001", 1, 1, "the program is empty"),
    ("nul", "\x00", "E001", 1, 1, "binary"),
    ("no_variants", '"""doc"""\n', "E001", 1, 1, "defines no @task variants"),
    ("toplevel_expr", "x + 1\n" + LEAF + "    fill(C, 0)\n", "E002", 1, 1, "top-level statement"),
    ("class", "class X:\n    pass\n", "E002", 1, 1, "top-level statement (ClassDef)"),
    ("if", LEAF + "    if 1:\n        pass\n", "E002", 3, 5, "if statements"),
    ("while", INNER + "    while 1:\n        pass\n", "E002", 3, 5, "while loops"),
    ("return", LEAF + "    return\n", "E002", 3, 5, "return statements"),
    ("augassign", LEAF + "    C += C\n", "E002", 3, 5, "augmented assignments"),
    ("with", LEAF + "    with C:\n        pass\n", "E002", 3, 5, "with blocks"),
    ("nested_def", INNER + "    def f():\n        pass\n", "E002", 3, 5, "nested functions"),
    ("bare_expr", LEAF + "    C\n", "E002", 3, 5, "bare expressions"),
    ("assert", LEAF + "    assert C\n", "E002", 3, 5, "asserts"),
    (
        "two_decorators",
        '@task("c", Leaf)\n@task("d", Leaf)\ndef c(C: tensor[2, f32]):\n    pass\n',
        "E003",
        3,
        1,
        "exactly one @task",
    ),
    (
        "bad_decorator",
        "@kernel\ndef c(C: tensor[2, f32]):\n    pass\n",
        "E003",
        1,
        2,
        "must be @task",
    ),
    (
        "decorator_arity",
        '@task("c")\ndef c(C: tensor[2, f32]):\n    pass\n',
        "E003",
        1,
        2,
        "a task name and",
    ),
    (
        "task_name",
        "@task(3, Leaf)\ndef c(C: tensor[2, f32]):\n    pass\n",
        "E003",
        1,
        7,
        "identifier",
    ),
    (
        "kind",
        '@task("c", Outer)\ndef c(C: tensor[2, f32]):\n    pass\n',
        "E003",
        1,
        12,
        "Inner or Leaf",
    ),
    (
        "keyword",
        '@task("c", Leaf, mode=["C"])\ndef c(C: tensor[2, f32]):\n    pass\n',
        "E003",
        1,
        18,
        "unknown @task keyword 'mode'",
    ),
    (
        "priv_list",
        '@task("c", Leaf, reads="C")\ndef c(C: tensor[2, f32]):\n    pass\n',
        "E003",
        1,
        24,
        "list of parameter names",
    ),
    (
        "include_arity",
        'include("a.cuh", "b.cuh")\n' + LEAF + "    fill(C, 0)\n",
        "E003",
        1,
        1,
        "include()",
    ),
    ("varargs", '@task("c", Leaf)\ndef c(*C):\n    pass\n', "E004", 2, 1, "plain positional"),
    (
        "defaults",
        '@task("c", Leaf)\ndef c(n: int = 3):\n    pass\n',
        "E004",
        2,
        1,
        "plain positional",
    ),
    (
        "dup_param",
        '@task("c", Leaf)\ndef c(n: int, n: int):\n    pass\n',
        "E004",
        2,
        15,
        "duplicate parameter 'n'",
    ),
    ("untyped", '@task("c", Leaf)\ndef c(C):\n    pass\n', "E004", 2, 7, "has no type"),
    (
        "bool_param",
        '@task("c", Leaf)\ndef c(x: bool):\n    pass\n',
        "E005",
        2,
        10,
        "unsupported type",
    ),
    (
        "tensor_arity",
        '@task("c", Leaf)\ndef c(C: tensor[2]):\n    pass\n',
        "E005",
        2,
        10,
        "a rank and a dtype",
    ),
    ("rank0", '@task("c", Leaf)\ndef c(C: tensor[0, f32]):\n    pass\n', "E005", 2, 17, "rank"),
    (
        "dtype",
        '@task("c", Leaf)\ndef c(C: tensor[2, f8]):\n    pass\n',
        "E005",
        2,
        20,
        "unknown dtype 'f8'",
    ),
    ("chained", INNER + "    a = b = 1\n", "E006", 3, 5, "chained assignment"),
    ("tuple_len", INNER + "    a, b = 1, 2, 3\n", "E006", 3, 5, "same length"),
    ("attr_target", INNER + "    C.x = 1\n", "E006", 3, 5, "plain names"),
    ("method", LEAF + "    C.fill(0)\n", "E007", 3, 5, "plain function names"),
    ("call_kw", LEAF + "    fill(C, value=0)\n", "E007", 3, 19, "keyword arguments"),
    ("launch_name", INNER + "    launch(clear, C)\n", "E007", 3, 5, "task name as a string"),
    ("tunable", INNER + "    T = tunable(float)\n", "E008", 3, 9, "int, processor or atom"),
    ("make_tensor_plain", INNER + "    T = make_tensor(4)\n", "E009", 3, 9, "type annotation"),
    ("ann_no_value", INNER + "    T: tensor[1, f32]\n", "E009", 3, 5, "only for"),
    (
        "ann_not_make",
        INNER + "    T: tensor[1, f32] = C\n",
        "E009",
        3,
        25,
        "initialised with make_tensor",
    ),
    ("ann_int", INNER + "    T: int = make_tensor(4)\n", "E009", 3, 8, "annotate with tensor"),
    (
        "partition_kw",
        INNER + "    P = partition_by_blocks(C, blocks=(1, 1))\n",
        "E010",
        3,
        9,
        "positional",
    ),
    (
        "partition_no_tensor",
        INNER + "    P = partition_by_blocks((1, 1))\n",
        "E010",
        3,
        9,
        "tensor name first",
    ),
    (
        "blocks_not_tuple",
        INNER + "    P = partition_by_blocks(C, 4)\n",
        "E010",
        3,
        9,
        "tuple of block sizes",
    ),
    (
        "mma_arity",
        INNER + "    P = partition_by_mma(C, WGMMA_64x64x16())\n",
        "E010",
        3,
        9,
        "4 arguments",
    ),
    (
        "mma_operand",
        INNER + '    P = partition_by_mma(C, WGMMA_64x64x16(), THREAD, "Z")\n',
        "E010",
        3,
        55,
        '"A", "At", "B", "Bt" or "C"',
    ),
    (
        "slices_dim",
        INNER + "    P = partition_by_slices(C, d)\n",
        "E010",
        3,
        9,
        "integer dimension",
    ),
    (
        "partition_kind",
        INNER + "    P = partition_by_hash(C, 4)\n",
        "E010",
        3,
        9,
        "unknown partition operator",
    ),
    (
        "range",
        INNER + "    for i in range(4):\n        pass\n",
        "E011",
        3,
        14,
        "prange(...) or srange(...)",
    ),
    (
        "for_else",
        INNER + "    for i in prange(4):\n        pass\n    else:\n        pass\n",
        "E011",
        3,
        5,
        "for/else",
    ),
    (
        "no_extent",
        INNER + "    for i in prange():\n        pass\n",
        "E011",
        3,
        14,
        "one or more extents",
    ),
    (
        "loop_target",
        INNER + "    for C.x in prange(4):\n        pass\n",
        "E011",
        3,
        9,
        "plain names",
    ),
    (
        "loop_arity",
        INNER + "    for i, j in prange(4):\n        pass\n",
        "E011",
        3,
        5,
        "1 extent(s)",
    ),
    (
        "srange_2d",
        INNER + "    for i, j in srange(4, 4):\n        pass\n",
        "E011",
        3,
        17,
        "one-dimensional",
    ),
    ("bool", INNER + "    x = True\n", "E012", 3, 9, "unsupported constant True"),
    ("pow", INNER + "    x = 2 ** 3\n", "E012", 3, 9, "unsupported operator"),
    ("compare", INNER + "    x = 1 < 2\n", "E012", 3, 9, "Compare"),
    ("lambda", INNER + "    f = lambda: 1\n", "E012", 3, 9, "Lambda"),
    ("value_call", INNER + "    x = foo(1)\n", "E012", 3, 9, "cannot be used as a value"),
    ("slice", INNER + '    launch("c", C[0:4])\n', "E012", 3, 17, "slices are not supported"),
    ("shape_dim", INNER + "    x = C.shape[n]\n", "E012", 3, 9, "constant dimension"),
    (
        "subscript_attr",
        INNER + "    x = C.strides[0]\n",
        "E012",
        3,
        9,
        "only partitions can be indexed",
    ),
    ("list", INNER + "    x = [1, 2]\n", "E012", 3, 9, "List"),
]


@pytest.mark.parametrize(
    "src,code,line,col,frag", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_parse_errors(src, code, line, col, frag):
    with pytest.raises(CypressErrors) as ei:
        parse_source(src, "e.cyp")
    err = ei.value.errors[0]
    assert (err.code, err.loc.file, err.loc.line, err.loc.col) == (code, "e.cyp", line, col), str(
        err
    )
    assert frag in err.message, err.message


def test_parse_collects_every_error():
    src = INNER + "    if 1:\n        pass\n    x = 2 ** 3\n    while 1:\n        pass\n"
    with pytest.raises(CypressErrors) as ei:
        parse_source(src)
    assert [(e.code, e.loc.line) for e in ei.value.errors] == [
        ("E002", 3),
        ("E012", 5),
        ("E002", 6),
    ]


def test_parse_file_errors(tmp_path):
    with pytest.raises(CypressErrors) as ei:
        parse_file(tmp_path / "missing.cyp")
    assert ei.value.errors[0].code == "E000" and "no such file" in ei.value.errors[0].message
    bad = tmp_path / "latin1.cyp"
    bad.write_bytes(b"# ok\n# caf\xe9\n")
    with pytest.raises(CypressErrors) as ei:
        parse_file(bad)
    e = ei.value.errors[0]
    assert (e.code, e.loc.line, e.loc.col) == ("E001", 2, 6) and "not UTF-8" in e.message
    binf = tmp_path / "bin.cyp"
    binf.write_bytes(b"\x7fELF\x00\x01")
    with pytest.raises(CypressErrors) as ei:
        parse_file(binf)
    assert "binary" in ei.value.errors[0].message
    with pytest.raises(CypressErrors) as ei:
        parse_file(tmp_path)  # a directory
    assert ei.value.errors[0].code == "E000"


def test_deep_nesting_is_an_error_not_a_crash():
    src = INNER + "    x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    with pytest.raises(CypressErrors) as ei:
        parse_source(src)
    assert ei.value.errors[0].code == "E001"


def test_dedent_helper_sources_parse():
    src = textwrap.dedent("""
        @task("v", Inner, reads=["y"], writes=["z"])
        def v(y: tensor[1, f32], z: tensor[1, f32]):
            yp = partition_by_blocks(y, (1,))
    """)
    (v,) = parse_source(src).variants
    assert v.body[0] == S.PartitionDecl("yp", "y", "blocks", (S.Const(1),))


def test_named_sizes():
    (v,) = parse_source(
        '@task("g", Inner, reads=["A"], writes=["C"])\n'
        "def g(C: tensor[(M, N), f16], A: tensor[(M, K), f16], y: tensor[(M,), f32]):\n"
        "    pass\n"
    ).variants
    c, a, y = (p.type for p in v.params)
    assert (c.rank, c.dtype, c.dims) == (2, "f16", ("M", "N"))
    assert a.dims == ("M", "K") and y.dims == ("M",) and y.rank == 1
    assert c == S.TensorType(2, "f16")  # named sizes do not change the type
    with pytest.raises(CypressErrors) as ei:
        parse_source('@task("g", Leaf)\ndef g(C: tensor[(M, 4), f16]):\n    pass\n')
    assert ei.value.errors[0].code == "E005" and "size names" in ei.value.errors[0].message


GENERIC = """\
T = dtype(f16, bf16)

@task("copy", Leaf, reads=["C"], writes=["D"])
def copy_thread(C: tensor[2, f32], D: tensor[(M, N), T]):
    copy(C, D)
"""


@pytest.mark.parametrize(
    "bind, expect", [({}, "f16"), ({"T": "f16"}, "f16"), ({"T": "bf16"}, "bf16")]
)
def test_dtype_parameter_is_resolved_by_the_binding(bind, expect):
    prog = parse_source(GENERIC, "g.cyp", bind)
    (p,) = prog.dtype_params
    assert (p.name, p.allowed, p.bound, p.loc.line) == ("T", ("f16", "bf16"), expect, 1)
    c, d = prog.variants[0].params
    assert (c.type.dtype, d.type.dtype, d.type.dims) == ("f32", expect, ("M", "N"))


@pytest.mark.parametrize(
    "src, bind, line, col, frag",
    [
        (GENERIC, {"T": "f32"}, 1, 1, "--dtype T=f32: 'T' may only be f16 or bf16"),
        (
            GENERIC,
            {"U": "bf16"},
            1,
            1,
            "--dtype binds 'U', which this program does not declare (declared: T)",
        ),
        (
            GENERIC.replace("dtype(f16, bf16)", "dtype(f16, f16)"),
            {},
            1,
            16,
            "dtype 'f16' is listed twice",
        ),
        (
            GENERIC.replace("dtype(f16, bf16)", "dtype()"),
            {},
            1,
            5,
            "dtype() takes one or more dtype names",
        ),
        (GENERIC.replace("T", "f32"), {}, 1, 1, "'f32' is a built-in type name"),
        (
            GENERIC.replace("T = dtype", "T, U = dtype").replace("), T]", "), f16]"),
            {},
            1,
            1,
            "a dtype parameter is one plain name",
        ),
        (GENERIC + "T = dtype(bf16)\n", {}, 6, 1, "dtype parameter 'T' is declared twice"),
    ],
)
def test_dtype_parameter_errors(src, bind, line, col, frag):
    with pytest.raises(CypressErrors) as ei:
        parse_source(src, "g.cyp", bind)
    e = ei.value.errors[0]
    assert (e.code, e.loc.line, e.loc.col) == ("E013", line, col)
    assert frag in e.message
    # a bad binding is reported once, not once more per use of T
    assert len(ei.value.errors) == 1


def test_dtype_parameter_must_be_declared_before_use():
    src = GENERIC.split("\n", 1)[1] + "T = dtype(f16, bf16)\n"
    with pytest.raises(CypressErrors) as ei:
        parse_source(src, "g.cyp")
    assert ei.value.errors[0].code == "E005" and "declared above its use" in ei.value.errors[0].hint
