"""Any program name works in the generated CUDA (issue #36 item 3): the emitter writes the
program's names as symbols and spells them when the file is complete
(:mod:`cypressc.backend.names`), so a tensor or a size named like a local of the kernel or the
launcher (the old refused list: ``a``, ``e``, ``stream``, ``kb``, ``num_k``, …) is spelled
apart from it instead of being refused or, worse, captured by it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from cypressc.backend import emit
from cypressc.backend import plan as P
from cypressc.backend.emit import emit_cuda, emit_header
from cypressc.backend.names import choose_names, sym
from cypressc.build import render_build
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
# names of the kernel's and the launcher's own (the refused list before the name chooser)
CLASHING = {"C": "e", "A": "a", "B": "stream", "M": "kb", "N": "stage", "K": "num_k"}


def test_a_program_name_keeps_its_spelling_unless_the_code_has_that_word():
    text = f"int {sym('M')} = a; float {sym('a')}; // {sym('a')} in a comment\n"
    assert choose_names(text) == "int M = a; float a_1; // a_1 in a comment\n"


def test_every_word_a_name_makes_is_checked_with_its_prefix_and_suffix():
    # s_X and X_STAGE are the buffer's words: a kernel word s_B takes the buffer B's spelling
    text = f"uint8_t* s_{sym('B')} = s_B + {sym('B')}_STAGE;\n"
    assert choose_names(text) == "uint8_t* s_B_1 = s_B + B_1_STAGE;\n"
    # two program names whose words meet: the one that appears second moves
    assert choose_names(f"{sym('s_A')} + s_{sym('A')};") == "s_A + s_A_1;"


def test_members_qualified_names_strings_and_comments_take_no_name_away():
    text = (
        f'extern "C" int f(int {sym("K")}, int {sym("x")}, int {sym("C")});\n'
        "  g(cypress::Major::K, rc.x, p->index);  // K x C\n"
    )
    assert choose_names(text) == text.replace("\x01", "").replace("\x02", "")


def test_a_renamed_name_never_displaces_a_program_name_that_fits():
    text = f"int a; int {sym('a')}, {sym('a_1')};"
    assert choose_names(text) == "int a; int a_2, a_1;"  # a_1 keeps its own spelling
    assert choose_names(f"int {sym('for')}, {sym('threadIdx')};") == "int for_1, threadIdx_1;"
    assert choose_names(f"int {sym('M')};", avoid=["M"]) == "int M_1;"


def _program_names(p: P.KernelPlan) -> set[str]:
    staged = {st.tensor for st in p.epilogue if isinstance(st, (P.StageWrite, P.TmaStore))}
    return {
        *(t.name for t in p.tensors),
        *p.sizes,
        *p.floats,
        *(x.name for x in [*p.buffers, *p.fragments, *p.vectors, *p.row_vectors]),
        *(x.name for x in [*p.barriers, *p.maps]),
        *staged,
    }


@pytest.mark.parametrize("program", sorted(p.stem for p in (ROOT / "programs").glob("*.cyp")))
def test_every_program_name_in_the_kernel_is_a_symbol(program, monkeypatch):
    """The emitter writes each program name, alone or in a word of its own (``s_Q``,
    ``Q_STAGE``), through ``sym``: the text before names are chosen has none of them left
    outside the marks (a name printed as plain text would stay, and keep its spelling when
    the others move); and forbidding every name its spelling renames each one alike."""
    mapping = ROOT / "tests/mappings/full" / program / "h100.yaml"
    p = compiled.snapshots(program, mapping)[-1][1].kernel
    names = _program_names(p)
    monkeypatch.setattr(emit, "choose_names", lambda text, avoid=(): text)
    marked = emit.emit_cuda(p)
    monkeypatch.undo()
    assert set(re.findall(r"\x01([^\x02]*)\x02", marked)) == names
    for line in marked.splitlines():
        # the code outside the marks; a word there that is a name, or a name with a prefix or a
        # suffix the way the kernel's words are made (s_Q, Q_STAGE), is a name left unmarked
        code = re.sub(r"\x01[^\x02]*\x02", "@", _code(line))
        for m in re.finditer(r"[A-Za-z_]\w*", code):
            if code[: m.start()].endswith(("::", ".", "->")):
                continue  # a member or a qualified name: rc.y, cypress::Major::K
            for n in names:
                assert not re.fullmatch(rf"(?:[a-z]+_)?{re.escape(n)}(?:_[A-Z]+)?", m[0]), line
    # every word of the kernel forbidden: each name moves, alike everywhere, the rest stays
    plain = emit_cuda(p)
    ident = re.compile(r"[A-Za-z_]\w*")
    renamed = emit_cuda(p, avoid=tuple({w for ln in plain.splitlines() for w in ident.findall(ln)}))
    spelled: dict[str, str] = {}
    for a, b in zip(plain.splitlines(), renamed.splitlines(), strict=True):
        wa, wb = _words(a), _words(b)
        assert len(wa) == len(wb), (a, b)
        for x, y in zip(wa, wb):
            if x == y:
                continue
            # a name, or a word of one: the same word around the name's new spelling
            moved = [
                (n, y[len(pre) : len(y) - len(x) + len(pre) + len(n)])
                for n in names
                for pre in {x[: m.start()] for m in re.finditer(re.escape(n), x)}
                if re.fullmatch(rf"{re.escape(pre + n)}_\d+{re.escape(x[len(pre) + len(n) :])}", y)
            ]
            assert moved, (a, b)
            n, m = max(moved, key=lambda nm: len(nm[0]))  # HK, not its K
            assert spelled.setdefault(n, m) == m, (a, b)
    assert set(spelled) == names


def _code(line: str) -> str:
    """``line`` without its comment and the text of its string literals."""
    return re.sub(r'"[^"]*"', '""', line.split("//", 1)[0])


def _words(line: str) -> list[str]:
    """The words of ``line``'s code that C++ looks up unqualified (not ``rc.y``, ``Major::K``)."""
    code = _code(line)
    return [
        m[0]
        for m in re.finditer(r"[A-Za-z_]\w*", code)
        if not code[: m.start()].endswith(("::", ".", "->"))
    ]


def _clashing_gemm(tmp_path: Path) -> Path:
    """programs/gemm.cyp with its entry task's tensors and sizes named like kernel locals."""
    lines = (ROOT / "programs/gemm.cyp").read_text().split("\n")
    host = next(i for i, ln in enumerate(lines) if "def gemm_host" in ln)
    end = next(i for i in range(host + 1, len(lines)) if lines[i].startswith("@task"))
    for i in range(host - 1, end):  # the @task line names the tensors too
        for old, new in CLASHING.items():
            lines[i] = re.sub(rf"\b{old}\b", new, lines[i])
    prog = tmp_path / "gemm.cyp"
    prog.write_text("\n".join(lines))
    return prog


@pytest.fixture(scope="module")
def clashing(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    tree = compiled.tree(_clashing_gemm(d), ROOT / "tests/mappings/full/gemm/h100.yaml")
    return d, render_build(tree)


def test_names_like_the_kernels_locals_build_and_keep_the_abi(clashing):
    _, r = clashing
    cu, info = r.files["gemm.cu"], json.loads(r.files["gemm.json"])
    # the ABI and the header keep the program's names; the kernel spells the clashing ones apart
    assert [x["name"] for x in info["params"]] == ["e", "a", "stream"]
    assert info["sizes"] == ["kb", "stage", "num_k"]
    assert r.files["gemm.h"] == emit_header(r.plan)
    assert (
        "(void* e, const void* a, const void* stream_1, int64_t kb, int64_t stage,"
        in r.files["gemm.h"]
    )
    assert (
        'extern "C" int gemm_launch(void* e_1, const void* a_1, const void* stream_1, '
        "int64_t kb_1, int64_t stage, int64_t num_k_1, cudaStream_t stream) {"
    ) in cu
    assert "__half* __restrict__ e_1, int kb_1, int stage, int num_k_1) {" in cu
    # the trip count reads the size K (spelled num_k_1) into the kernel's own num_k
    assert "const int num_k = cdiv(num_k_1, 64);" in cu
    assert "for (int kb = 0; kb < num_k; ++kb)" in cu
    assert "cudaError_t e;" in cu and "if ((e = cypress::make_tma_map(&tm_a_128x64, a_1," in cu
    # main.h (included by main.cu) declares the launcher with the ABI's names, its own `stream` kept apart
    assert (
        "const void* stream_1, int64_t kb, int64_t stage, int64_t num_k, cudaStream_t stream);"
        in (r.files["main.h"])
    )


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_names_like_the_kernels_locals_compile(clashing):
    d, r = clashing
    cu = d / "gemm.cu"
    cu.write_text(r.files["gemm.cu"])
    log = compiled.ptxas_report(cu, d / "gemm.o")
    assert re.search(r"Used \d+ registers", log) and " 0 bytes spill stores" in log
