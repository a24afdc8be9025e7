"""The kernel's sizes are named where the entrypoint names them (issue #35): an entry that
reads its extents off the shapes (``M, N, K = C.shape[0], C.shape[1], A.shape[1]``) takes
three sizes, M, N and K — not six (``C_d0`` ... ``B_d1``) — with the shape names as aliases
that the ABI, the runtime and ``cypressc tune --size`` accept
(cypressc/passes/entry_sizes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cypressc.abi import KernelError, KernelInfo, infer_sizes, resolve_aliases
from cypressc.build import render_build
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file, parse_source
from cypressc.passes.entry_sizes import entry_sizes
from tests.compiled import tree

ROOT = Path(__file__).resolve().parents[2]
SHAPES = "tests/programs/gemm_shapes.cyp"
ALIASES = {"C_d0": "M", "A_d0": "M", "C_d1": "N", "B_d1": "N", "A_d1": "K", "B_d0": "K"}


def _entry(src: str, name: str):
    prog = check_program(parse_source(src, "t.cyp"))
    return entry_sizes(prog.variant(name))


def test_an_entry_that_names_its_sizes_from_the_shapes_has_three():
    es = entry_sizes(check_program(parse_file(ROOT / SHAPES)).variant("gemm_host"))
    assert es.sizes == ("M", "N", "K")
    assert es.dims == {"C": ("M", "N"), "A": ("M", "K"), "B": ("K", "N")}
    assert es.aliases == ALIASES


def test_the_build_and_its_abi_agree_with_programs_gemm():
    """The same kernel as programs/gemm.cyp (whose signature names M, N, K), its ABI M, N, K
    with the shape names as aliases; the harness takes three sizes."""
    mine = render_build(tree(SHAPES, "tests/mappings/full/gemm/h100_plain.yaml"))
    theirs = render_build(tree("gemm", "tests/mappings/full/gemm/h100_plain.yaml"))
    info = json.loads(mine.files["gemm_shapes.json"])
    assert info["sizes"] == ["M", "N", "K"] and info["aliases"] == ALIASES
    assert [p["dims"] for p in info["params"]] == [["M", "N"], ["M", "K"], ["K", "N"]]
    assert mine.files["gemm_shapes.cu"].replace("gemm_shapes", "gemm") == theirs.files["gemm.cu"]
    assert 'kSizes = {{"M", "N", "K"}};' in mine.files["main.h"]
    assert "aliases" not in json.loads(theirs.files["gemm.json"])  # named sizes: the info as before


def test_every_bundled_entrypoint_keeps_its_sizes():
    """The bundled programs name every entry dimension: their sizes are the signature's, in
    order, with no aliases (their kernels' ABI is unchanged)."""
    for path in sorted((ROOT / "programs").glob("*.cyp")):
        prog = check_program(parse_file(path))
        for v in prog.variants:
            tensors = [p for p in v.params if hasattr(p.type, "rank")]
            if not tensors or not all(p.type.dims for p in tensors):
                continue
            es = entry_sizes(v)
            names = [
                d
                for p in v.params
                for d in (
                    p.type.dims
                    if hasattr(p.type, "rank")
                    else (p.name,)
                    if str(p.type) == "int"
                    else ()
                )
            ]
            assert es.sizes == tuple(dict.fromkeys(names)), (path.name, v.name)
            assert es.aliases == {}, (path.name, v.name)


HEAD = """
@task("t", Inner, reads=["A", "B"], writes=["C"])
def host(C: tensor[2, f16], A: tensor[2, f16], B: tensor[2, f16]{extra}):
    U, V = tunable(int), tunable(int)
"""


@pytest.mark.parametrize(
    "body, sizes, dims",
    [
        # nothing ties them: six sizes, named after the shapes
        ('    launch("t", C, A, B)\n', ("C_d0", "C_d1", "A_d0", "A_d1", "B_d0", "B_d1"), None),
        # a let names a size; a loop over its blocks ties A's rows to it, and only those
        (
            (
                "    M = C.shape[0]\n    Cp = partition_by_blocks(C, (U, V))\n    Ap = partition_by_blocks(A, (U, V))\n"
                '    for i in prange(cdiv(M, U)):\n        launch("t", Cp[i, 0], Ap[i, 0], B)\n'
            ),
            ("M", "C_d1", "A_d1", "B_d0", "B_d1"),
            {"C": ("M", "C_d1"), "A": ("M", "A_d1")},
        ),
        # a block index that is not the loop variable ties nothing
        (
            (
                "    M = C.shape[0]\n    Cp = partition_by_blocks(C, (U, V))\n    Ap = partition_by_blocks(A, (U, V))\n"
                '    for i in prange(cdiv(M, U) - 1):\n        launch("t", Cp[i, 0], Ap[i + 1, 0], B)\n'
            ),
            ("M", "C_d1", "A_d0", "A_d1", "B_d0", "B_d1"),
            None,
        ),
        # blocks of another extent than the loop counts: not tied
        (
            (
                "    M = C.shape[0]\n    Cp = partition_by_blocks(C, (U, V))\n    Ap = partition_by_blocks(A, (V, V))\n"
                '    for i in prange(cdiv(M, U)):\n        launch("t", Cp[i, 0], Ap[i, 0], B)\n'
            ),
            ("M", "C_d1", "A_d0", "A_d1", "B_d0", "B_d1"),
            None,
        ),
        # one block of K rows is K rows
        (
            (
                "    K = A.shape[1]\n    Bp = partition_by_blocks(B, (K, V))\n"
                '    for j in srange(cdiv(B.shape[1], V)):\n        launch("t", C, A, Bp[0, j])\n'
            ),
            ("C_d0", "C_d1", "A_d0", "K", "B_d1"),
            {"B": ("K", "B_d1")},
        ),
    ],
)
def test_what_ties_sizes(body, sizes, dims):
    es = _entry(HEAD.format(extra="") + body, "host")
    assert es.sizes == sizes
    for t, d in (dims or {}).items():
        assert es.dims[t] == d


def test_an_int_parameter_and_a_fallback_name_do_not_collide():
    """An int parameter named C_d0 stays its own size: the unnamed dimension becomes C_d0_1."""
    es = _entry(HEAD.format(extra=", C_d0: int") + '    launch("t", C, A, B, C_d0)\n', "host")
    assert es.sizes[:2] == ("C_d0_1", "C_d1") and es.ints == {"C_d0": "C_d0"}
    assert "C_d0" not in es.aliases


def test_the_runtime_takes_an_alias_for_a_keyword_size():
    info = KernelInfo.from_dict(
        json.loads(
            render_build(tree(SHAPES, "tests/mappings/full/gemm/h100_plain.yaml")).files[
                "gemm_shapes.json"
            ]
        )
    )
    assert info.aliases == ALIASES
    assert infer_sizes(info, [(128, 64), (128, 32), (32, 64)], {"C_d0": 128}) == {
        "M": 128,
        "N": 64,
        "K": 32,
    }
    with pytest.raises(
        KernelError, match="dimension 0 \\(M\\) is 128, but M = 256 from the keyword"
    ):
        infer_sizes(info, [(128, 64), (128, 32), (32, 64)], {"A_d0": 256})
    with pytest.raises(KernelError, match="C_d0=128 and A_d0=256 name one size, M"):
        infer_sizes(info, [(128, 64), (128, 32), (32, 64)], {"C_d0": 128, "A_d0": 256})
    with pytest.raises(KernelError, match="also named C_d0"):
        infer_sizes(info, [(128, 64), (128, 32), (32, 64)], {"Z": 1})
    # the A tensor whose rows differ from C's is refused before launching (it was six sizes)
    with pytest.raises(KernelError, match="dimension 0 \\(M\\) is 256, but M = 128"):
        infer_sizes(info, [(128, 64), (256, 32), (32, 64)])
    assert resolve_aliases({"M": 1, "C_d0": 1, "K": 2}, info.aliases) == {"M": 1, "K": 2}
    assert KernelInfo.from_dict(info.to_dict()) == info


def test_the_info_refuses_bad_aliases():
    d = json.loads(
        render_build(tree(SHAPES, "tests/mappings/full/gemm/h100_plain.yaml")).files[
            "gemm_shapes.json"
        ]
    )
    for bad in ({"C_d0": "Q"}, {"M": "N"}, {"A": "M"}, {"1x": "M"}, ["C_d0"]):
        with pytest.raises(ValueError, match="aliases"):
            KernelInfo.from_dict({**d, "aliases": bad})
