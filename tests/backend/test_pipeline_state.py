"""``cypress::PipelineState`` (cypress.cuh) gives every pipeline position the IR writes: after
``k`` steps (``advance()`` ``k`` times), the state ``c`` steps on has the stage
``(k + c) % D`` and the parity ``((k + c) // D + p) % 2`` that sync-insertion wrote and
:func:`cypressc.backend.sync_lower.counted` turned into ``(pipe + c).index`` and
``(pipe + c).phase ^ p`` -- the mbarrier indices and parities the kernel had before the type,
at every step.  The struct is compiled from the header's own text by the host compiler (its
``__device__`` qualifiers defined away): no GPU, no CUTLASS."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cypressc.backend.cexpr import PipeAt
from cypressc.backend.harness import RUNTIME_DIR
from cypressc.backend.sync_lower import counted
from cypressc.ir import nodes as N

DEPTHS = range(2, 6)
STEPS = 13  # a few passes of every ring


def _struct() -> str:
    text = (Path(RUNTIME_DIR) / "cypress.cuh").read_text()
    m = re.search(r"template <int Stages>\nstruct PipelineState \{.*?\n\};\n", text, re.S)
    assert m, "no PipelineState in cypress.cuh"
    return m.group()


_MAIN = """
#include <cstdio>
#define __device__
#define __forceinline__ inline
%s
template <int D> void table() {
  PipelineState<D> s;
  for (int k = 0; k < %d; ++k, s.advance())
    for (int c = 1 - D; c < D; ++c)
      std::printf("%%d %%d %%d %%d %%d\\n", D, k, c, (s + c).index, (s + c).phase);
}
int main() { table<2>(); table<3>(); table<4>(); table<5>(); }
"""


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> dict[tuple[int, int, int], tuple[int, int]]:
    """(depth, steps so far, c) -> (index, phase) of the state ``c`` steps on, as the header's
    struct computes them."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("pipe")
    (d / "t.cpp").write_text(_MAIN % (_struct(), STEPS))
    subprocess.run([cxx, "-std=c++17", "-O1", "-o", str(d / "t"), str(d / "t.cpp")], check=True)
    out = subprocess.run([str(d / "t")], capture_output=True, text=True, check=True).stdout
    rows = [tuple(map(int, line.split())) for line in out.splitlines()]
    assert len(rows) == sum(STEPS * (2 * n - 1) for n in DEPTHS)
    return {(n, k, c): (i, p) for n, k, c, i, p in rows}


def _eval(e: N.IExpr, k: int) -> int:
    """The IR's position expression at step ``k`` (Python's floor division, as the IR's)."""
    if isinstance(e, N.IConst):
        return e.value
    if isinstance(e, N.IVar):
        return k
    a, b = _eval(e.a, k), _eval(e.b, k)
    return {"+": a + b, "-": a - b, "%": a % b, "//": a // b}[e.op]


@pytest.mark.parametrize("depth", DEPTHS)
def test_the_state_c_steps_on_has_the_irs_stage_and_parity_at_every_step(states, depth):
    kv = N.IVar("k")
    for c in range(1 - depth, depth):
        stage = N.IBin("%", N.ibin("+", kv, N.IConst(c)), N.IConst(depth))
        assert counted(stage, "k", N.IVar("K"), depth, False, "pipe") == PipeAt("pipe", "index", c)
        for p in (0, 1):  # a full barrier's wait (p = 0) and an empty barrier's (p = 1)
            q = N.ibin(
                "+", N.IBin("//", N.ibin("+", kv, N.IConst(c)), N.IConst(depth)), N.IConst(p)
            )
            parity = N.IBin("%", q, N.IConst(2))
            got = counted(parity, "k", N.IVar("K"), depth, False, "pipe")
            assert got == (
                PipeAt("pipe", "phase", c)
                if p == 0
                else N.IBin("^", PipeAt("pipe", "phase", c), N.IConst(1))
            )
            for k in range(STEPS):
                index, phase = states[(depth, k, c)]
                assert index == _eval(stage, k), (depth, k, c)
                assert phase ^ p == _eval(parity, k), (depth, k, c, p)


def test_the_state_keeps_the_old_select_arithmetic(states):
    """The stage and parity before the type, written inline by the kernel for ``stage`` and
    ``phase`` after ``k`` steps: ``(stage + c < D ? stage + c : stage - (D - c))`` and
    ``(phase ^ (stage + c >= D))``, or stepping back, ``(stage >= -c ? stage + c : stage +
    (D + c))`` and ``(phase ^ (stage < -c))``."""
    for (depth, k, c), (index, phase) in states.items():
        stage, ph = k % depth, (k // depth) % 2
        if c >= 0:
            old = (
                stage + c if stage + c < depth else stage - (depth - c),
                ph ^ (stage + c >= depth),
            )
        else:
            old = (stage + c if stage >= -c else stage + (depth + c), ph ^ (stage < -c))
        assert (index, phase) == old, (depth, k, c)
