"""The expressions over the sizes that a built kernel's info carries (``requires`` and
``flops``): typed in the plan, written as JSON trees next to their C text, evaluated by
:func:`cypressc.runtime.eval_expr` with the launcher's C semantics (issue #10, item 2).

The C side is real: g++ compiles the C text (the compiler's, for a built kernel) and its
values are compared with the tree evaluator's (skipped where g++ is missing)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc import runtime as rt
from cypressc.cli import main
from cypressc.tuner.prune import check_candidate, static_score

ROOT = Path(__file__).resolve().parents[2]
PROG, MAP = (
    ROOT / "programs" / "batched_gemm.cyp",
    ROOT / "tests/mappings/full" / "batched_gemm" / "h100_direct.yaml",
)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")

# The definitions of the launcher (cdiv) and of the harness's cyp_expr namespace (min, max).
PRELUDE = """#include <cstdint>
#include <cstdio>
#include <type_traits>
template <class A, class B> constexpr std::common_type_t<A, B> cdiv(A a, B b) { return (a + b - 1) / b; }
template <class A, class B> constexpr std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }
template <class A, class B> constexpr std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
static void show(bool v) { std::printf("i %d\\n", v ? 1 : 0); }
static void show(long long v) { std::printf("i %lld\\n", v); }
static void show(long v) { std::printf("i %ld\\n", v); }
static void show(double v) { std::printf("d %.17g\\n", v); }
"""


def tree(x) -> dict:
    """A tree from a compact form: a name, a number, or (op, a, b)."""
    if isinstance(x, str):
        return {"var": x}
    if isinstance(x, tuple):
        return {"op": x[0], "a": tree(x[1]), "b": tree(x[2])}
    return {"const": x}


def c_values(
    cases: list[tuple[str, dict]], envs: list[dict[str, int]], tmp: Path
) -> list[list[str]]:
    """What g++ computes for each C text at each environment (``int64_t`` sizes): one list
    per environment of ``"i <int>"`` / ``"d <double>"``, the type C gives the value."""
    names = sorted({n for e in envs for n in e})
    body = []
    for env in envs:
        body.append(
            "{ " + " ".join(f"const int64_t {n} = {env.get(n, 0)}; (void){n};" for n in names)
        )
        body += [f"  show({c});" for c, _ in cases]
        body.append("}")
    src = tmp / "exprs.cpp"
    src.write_text(PRELUDE + "int main() {\n" + "\n".join(body) + "\n}\n")
    exe = tmp / "exprs"
    p = subprocess.run(
        ["g++", "-std=c++17", "-o", str(exe), str(src)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    out = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split("\n")
    return [out[i * len(cases) : (i + 1) * len(cases)] for i in range(len(envs))]


def py_value(t: dict, env: dict[str, int]) -> str:
    v = rt.eval_expr(t, env)
    return f"i {v}" if isinstance(v, int) else f"d {float(repr(v)):.17g}"


HAND = [  # C text, tree: where Python's and C's integer arithmetic differ, and the mixed types
    ("M / 2", ("/", "M", 2)),
    ("M % 2", ("%", "M", 2)),
    ("N / M", ("/", "N", "M")),
    ("N % M", ("%", "N", "M")),
    ("M / N", ("/", "M", "N")),
    ("M % N", ("%", "M", "N")),
    ("cdiv(M, 2)", ("cdiv", "M", 2)),
    ("cdiv(N, 64)", ("cdiv", "N", 64)),
    ("min(M, 2.5)", ("min", "M", 2.5)),
    ("max(M, N)", ("max", "M", "N")),
    ("M / 2.0", ("/", "M", 2.0)),
    ("((2.0 * M) * N) * K", ("*", ("*", ("*", 2.0, "M"), "N"), "K")),
    ("(M + 7) % 8 == 0", ("==", ("%", ("+", "M", 7), 8), 0)),
    ("M - N < -3", ("<", ("-", "M", "N"), -3)),
    ("K >= 1", (">=", "K", 1)),
    ("K != 0", ("!=", "K", 0)),
    ("M <= -7", ("<=", "M", -7)),
]
ENVS = [
    {"M": -7, "N": 3, "K": 0},
    {"M": 7, "N": -2, "K": 5},
    {"M": 129, "N": 257, "K": 72},
    {"M": -1, "N": -64, "K": -3},
]


def test_integer_division_truncates_like_c():
    """Hand-checked values where Python's floor division would differ."""
    env = {"M": -7, "N": 2}
    assert rt.eval_expr(tree(("/", "M", "N")), env) == -3 and -7 // 2 == -4
    assert rt.eval_expr(tree(("%", "M", "N")), env) == -1 and -7 % 2 == 1
    assert rt.eval_expr(tree(("%", 7, -2)), env) == 1
    assert rt.eval_expr(tree(("cdiv", "M", "N")), env) == -3  # (-7 + 2 - 1) / 2
    assert rt.eval_expr(tree(("/", "M", 2.0)), env) == -3.5
    assert rt.eval_expr(tree(("==", ("%", "M", "N"), -1)), env) == 1
    with pytest.raises(ZeroDivisionError):
        rt.eval_expr(tree(("%", "M", 0)), env)
    with pytest.raises(ValueError, match="'%' on a double"):
        rt.eval_expr(tree(("%", "M", 2.0)), env)
    with pytest.raises(ValueError, match="'Q', which is not a size"):
        rt.eval_expr(tree(("+", "M", "Q")), env)
    assert rt.expr_names(tree(("*", ("cdiv", "M", 128), ("+", "N", "M")))) == ["M", "N", "M"]


@needs_gxx
def test_tree_evaluator_agrees_with_gxx(tmp_path):
    got = c_values(HAND, ENVS, tmp_path)
    for env, row in zip(ENVS, got):
        for (c, t), cval in zip(HAND, row):
            assert py_value(tree(t), env) == cval, (c, env)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """``cypressc build`` of the batched GEMM with stores from registers (an even-extent
    requirement besides the TMA ones): the real CLI, real files."""
    out = tmp_path_factory.mktemp("size_exprs") / "bg"
    r = CliRunner().invoke(
        main, ["build", str(PROG), "-m", str(MAP), "-o", str(out)], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    return out


def test_built_info_round_trips_and_explains_refusals(built):
    raw = json.loads((built / "batched_gemm.json").read_text())
    info = rt.KernelInfo.load_json(built / "batched_gemm.json")
    assert info.to_dict() == raw
    assert rt.KernelInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info
    # the launcher tests the same conditions, by their C text, with the same messages
    launcher = (built / "batched_gemm.cu").read_text()
    for r in info.requires:
        assert f"if (!({r.c})) return cudaErrorInvalidValue;  // {r.why}\n" in launcher
    assert [r.c for r in info.requires] == [
        "N % 2 == 0",
        "K % 8 == 0",
        "K > 0",
        "N % 8 == 0",
        "K > 0",
    ]
    assert info.failed_requires({"L": 2, "M": 64, "N": 64, "K": 64}) == []
    assert info.failed_requires({"L": 2, "M": 64, "N": 63, "K": 64}) == [
        "the innermost extent of C (N) must be even",
        "the innermost extent of B (N) must be a multiple of 8: TMA needs 16-byte row strides",
    ]
    assert info.failed_requires({"L": 2, "M": 64, "N": 64, "K": 0}) == [
        "A is read through TMA, which needs a non-empty tensor (K > 0)",
        "B is read through TMA, which needs a non-empty tensor (K > 0)",
    ]
    assert info.flops_at({"L": 2, "M": 3, "N": 5, "K": 7}) == 2.0 * 2 * 3 * 5 * 7
    # the runtime's checks before a launch refuse with those messages
    descs = [
        rt.TensorDesc("f16", "float16", s, ("cuda", 0), True, 1 << 20, 1)
        for s in [(2, 64, 62), (2, 64, 64), (2, 64, 62)]
    ]
    with pytest.raises(
        rt.KernelError, match=r"\(L=2, M=64, N=62, K=64\): the innermost extent of B \(N\) must"
    ):
        rt.validate(info, descs)


@needs_gxx
def test_built_trees_agree_with_their_c_text(built, tmp_path):
    """Each tree the compiler wrote computes what its C text computes, also at sizes the
    launcher refuses earlier (negative, zero)."""
    info = rt.KernelInfo.load_json(built / "batched_gemm.json")
    cases = [(info.flops, info.flops_tree)] + [(r.c, r.tree) for r in info.requires]
    envs = [
        {"L": 2, "M": 129, "N": 258, "K": 72},
        {"L": 1, "M": 1, "N": 63, "K": 0},
        {"L": 3, "M": -5, "N": -6, "K": -9},
    ]
    for env, row in zip(envs, c_values(cases, envs, tmp_path)):
        assert [py_value(t, env) for _, t in cases] == row, env


def test_old_info_without_trees_is_refused_clearly(built):
    raw = json.loads((built / "batched_gemm.json").read_text())
    raw["requires"] = [[r["c"], r["why"]] for r in raw["requires"]]  # the format before the trees
    with pytest.raises(
        ValueError,
        match=r"requires\[0\] must be an object .*written by an older cypressc: "
        r"rebuild the kernel with `cypressc build`",
    ):
        rt.KernelInfo.from_dict(raw)


def test_tuner_model_reads_the_trees():
    """``cypressc tune``'s static model evaluates the plan's grid, trip count and FLOPs."""
    v = check_candidate((str(PROG), {}, MAP.read_text(), str(MAP)))
    assert v["ok"], v
    feat = v["plan"]
    sizes = {"L": 2, "M": 1000, "N": 1000, "K": 1000}
    assert [rt.eval_expr(g, sizes) for g in feat["grid"]] == [
        2,
        8,
        4,
    ]  # L, cdiv(M, 128), cdiv(N, 256)
    assert rt.eval_expr(feat["trip_count"], sizes) == 16  # cdiv(K, 64)
    assert json.loads(json.dumps(feat)) == feat  # the verdict cache stores JSON
    assert static_score(feat, sizes, 132, 232448) > 0


@pytest.mark.parametrize(
    "program, mapping, sizes, flops",
    [
        # C = A @ Bᵀ, B stored N x K: the FLOPs are 2·M·N·K, not 2·M·K·K (B's last extent is K)
        (
            "programs/gemm_bt.cyp",
            "tests/mappings/full/gemm_bt/h100.yaml",
            {"M": 3, "N": 5, "K": 7},
            2.0 * 3 * 5 * 7,
        ),
        # O = T(Q[:, :64] @ K[:, :64]ᵀ) @ V: 2·M·N·64 for S, 2·M·N·E for O (a K-major B, then a register A)
        (
            "tests/programs/chain_gemm.cyp",
            "tests/mappings/chain_gemm.yaml",
            {"M": 3, "E": 5, "D": 64, "N": 11},
            2.0 * 3 * 11 * 64 + 2.0 * 3 * 11 * 5,
        ),
        # two main loops: 2·M·N·K + 2·M·N·J
        (
            "tests/programs/gemm_two_loops.cyp",
            "tests/mappings/gemm_two_loops.yaml",
            {"M": 3, "N": 5, "K": 7, "J": 11},
            2.0 * 3 * 5 * 7 + 2.0 * 3 * 5 * 11,
        ),
    ],
)
def test_flops_of_k_major_and_multi_loop_kernels(tmp_path, program, mapping, sizes, flops):
    out = tmp_path / "k"
    r = CliRunner().invoke(
        main,
        ["build", str(ROOT / program), "-m", str(ROOT / mapping), "-o", str(out)],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    info = rt.KernelInfo.load_json(next(p for p in out.glob("*.json")))
    assert info.flops_at(sizes) == flops
