"""The reduction privilege in the event IR (issue #38): tests/programs/reduce_rows.cyp
(split-K C += A·B: the blocks of one tile of C add their partial products into it with
``copy.add``) equals NumPy after every pass, in program order, latest-first and under random
schedules; the concurrent interpreter (values, every block) and the happens-before check are
clean; a plain write racing a reduction is reported as a race while two reductions commute
(teeth); the hazard analysis keeps no edge between two reductions; dependence analysis
refuses a private copy read before it is written (E052); the backend lowers a private copy in
shared memory to a TMA reduce-add and refuses one in global memory (E050)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cypressc.diagnostics import CypressError
from cypressc.frontend import front_end
from cypressc.ir import nodes as N
from cypressc.ir.subst import walk_ops
from cypressc.ir.check import random_inputs, run_module
from cypressc.ir.happens_before import check_happens_before
from cypressc.ir.hazards import Program
from cypressc.ir.interp import LATEST_FIRST
from cypressc.ir.printer import print_module
from cypressc.ir.reader import parse_module
from cypressc.ir.schedule_check import check_schedules
from cypressc.passes.dependence_state import REDUCE, WRITE, _Frame
from cypressc.pipeline import compile_module
from tests.compiled import modules

ROOT = Path(__file__).resolve().parents[2]
PROG = "tests/programs/reduce_rows.cyp"
MAP = "tests/mappings/reduce_rows_small.yaml"
# partial tiles everywhere; two K slices, so two blocks add into each tile of C
SIZES = dict(M=40, N=24, K=40)
TWO_BLOCKS = dict(M=64, N=32, K=64)  # one tile of C, two blocks reducing into it


def _snaps() -> dict[str, N.Module]:
    return modules(PROG, MAP, until="sync-insertion")


def _want(a: dict) -> np.ndarray:
    f64 = np.float64
    return a["C"].astype(f64) + a["A"].astype(f64) @ a["B"].astype(f64)


def test_every_pass_adds_the_product_into_c():
    snaps = _snaps()
    inputs = random_inputs(snaps["dependence-analysis"], SIZES, seed=7)  # C: what is added to
    want = _want(inputs)
    for name in ("dependence-analysis", "copy-elimination", "warp-specialization"):
        seeds = [None, LATEST_FIRST] + ([0, 1] if name == "warp-specialization" else [])
        for seed in seeds:
            got = run_module(snaps[name], SIZES, inputs, [], seed)["C"]
            err = np.abs(got - want).max() / np.abs(want).max()
            assert err < 1e-5, f"{name} seed {seed}: relative error {err}"


def test_the_reduction_is_a_copy_add_of_the_private_copy():
    m = _snaps()["dependence-analysis"]
    text = print_module(m)
    (line,) = [x for x in text.splitlines() if "copy.add" in x]
    assert "copy.add %C_block -> %Cp[%i, %j]" in line
    # the private copy has no copy-in (only the store tree's copy-out writes it)
    assert "copy %Cp[%i, %j] -> %C_block" not in text
    assert "-> %C_block {" in text


def test_concurrent_interpreter_and_happens_before_are_clean():
    snaps = _snaps()
    sync, ref = snaps["sync-insertion"], snaps["warp-specialization"]
    v = check_schedules(sync, ref, sizes=TWO_BLOCKS, schedules=4, value_every=1)
    assert v.finding is None, v.line("reduce_rows")
    for seed in range(3):
        assert check_happens_before(sync, seed=seed) is None
        assert check_happens_before(sync, TWO_BLOCKS, seed=seed) is None


def _with_second_copy(m: N.Module, reduce: str | None) -> N.Module:
    """``m`` with a copy of the reduction's source into its destination right after it,
    unordered with it (no event, no wait): a plain write (``reduce`` None) or another
    reduction."""
    red = next(o for o in m.body.ops if isinstance(o, N.Copy) and o.reduce)
    extra = replace(red, ev="racer", pre=(), reduce=reduce)
    ops = []
    for o in m.body.ops:
        ops.append(o)
        if o is red:
            ops.append(extra)
    roles = m.roles + (("racer", dict(m.roles)[red.ev]),)
    return replace(m, body=N.Block(tuple(ops), m.body.yields), roles=roles)


def test_teeth_a_plain_write_racing_a_reduction_is_a_race():
    sync = _snaps()["sync-insertion"]
    f = check_happens_before(_with_second_copy(sync, None), TWO_BLOCKS)
    assert f is not None and f.kind == "race", f
    assert "its write of %C is not ordered after the reduction by %e7" in f.message, f
    # two reductions into the same tile commute: no race
    assert check_happens_before(_with_second_copy(sync, "add"), TWO_BLOCKS) is None


HAND = """target h100
module @r(%C: [64] f32 @GLOBAL, %X: [64] f32 @GLOBAL) sizes() {{
  %T = tensor [64] f32 @SHARED
  %U = tensor [64] f32 @SHARED
  %e1: () = copy %X -> %T {{}}
  %e2: () = copy %X -> %U {{}}
  %e3: () = copy{r} %T -> %C {{%e1}}
  %e4: () = copy{r} %U -> %C {{%e2, %e3}}
}}
"""


@pytest.mark.parametrize("red", [".add", ""])
def test_two_reductions_into_one_view_need_no_order(red):
    m = parse_module(HAND.format(r=red), "r.ir")
    assert print_module(parse_module(print_module(m), "r2.ir")) == print_module(m)
    waw = [d for d in Program(m).deps() if d.src == "e3" and d.dst == "e4"]
    assert bool(waw) == (red == ""), waw


def test_the_reader_refuses_an_unknown_reduction():
    with pytest.raises(CypressError) as ei:
        parse_module(HAND.format(r=".mul"), "r.ir")
    assert ei.value.code == "E063" and "unknown reduction copy.mul" in ei.value.message


def _compile_variant(tmp_path: Path, old: str, new: str, until: str = "dependence-analysis"):
    src = (ROOT / PROG).read_text()
    assert old in src
    prog = tmp_path / "reduce_rows.cyp"
    prog.write_text(src.replace(old, new))
    tree = front_end(prog, ROOT / MAP, include_dirs=(ROOT / "programs",))
    return compile_module(tree, until=until)


def test_e052_a_private_copy_read_before_it_is_written(tmp_path):
    with pytest.raises(CypressError) as ei:
        _compile_variant(
            tmp_path,
            '    launch("store", Cacc, C)\n',
            '    launch("mma", C, Ap[0, 0], Bp[0, 0])\n    launch("store", Cacc, C)\n',
        )
    e = ei.value
    assert e.code == "E052" and e.loc.line == 37, str(e)
    assert "'partial_block' reduces into 'C', and 'mma' reads it before anything writes it" in (
        e.message
    )


def test_a_reduction_that_never_touches_its_argument_adds_nothing(tmp_path):
    """Without its store, 'partial' only hands C on (to nobody): no private copy, no copy.add
    (a reduction instance starts at the identity, and nothing is added to it)."""
    snaps = _compile_variant(tmp_path, '    launch("store", Cacc, C)\n', "")
    m = snaps[-1][1]
    assert not [o for o in walk_ops(m.body) if isinstance(o, N.Copy) and o.reduce]
    # the instance 'block' (variant partial_block) would own C_block
    assert not [o for o in walk_ops(m.body) if isinstance(o, N.Alloc) and o.name == "C_block"]


def test_the_backend_lowers_a_shared_private_copy_to_a_tma_reduce_add():
    from cypressc.backend.plan import TmaStore

    plan = compile_module(front_end(ROOT / PROG, ROOT / MAP, include_dirs=(ROOT / "programs",)))
    (st,) = [s for s in plan[-1][1].kernel.epilogue if isinstance(s, TmaStore)]
    assert st.reduce and st.whole and st.map.box == (64, 32)  # f32 boxes of 128-byte rows


def test_the_backend_refuses_a_reduction_from_global_memory_at_its_launch(tmp_path):
    """A private copy in GLOBAL (a scratch tensor added global to global): E050."""
    text = (ROOT / MAP).read_text()
    for old, new in (
        ("mems: [SHARED, GLOBAL, GLOBAL]", "mems: [GLOBAL, GLOBAL, GLOBAL]"),
        ("mems: [NONE, SHARED]", "mems: [NONE, GLOBAL]"),
        ("mems: [REGISTER, SHARED]}", "mems: [REGISTER, GLOBAL]}"),
    ):
        assert old in text
        text = text.replace(old, new)
    mapping = tmp_path / "reduce_rows_global.yaml"
    mapping.write_text(text)
    tree = front_end(ROOT / PROG, mapping, include_dirs=(ROOT / "programs",))
    with pytest.raises(CypressError) as ei:
        compile_module(tree)
    e = ei.value
    assert e.code == "E050" and e.loc.line == 24 and "a reduce copy (copy.add" in e.message


def test_dependence_state_reducers_commute():
    """Dependence analysis' per-allocation state: a reduction waits for the writers and
    readers but not for the other reducers; a read or write waits for the reducers; a
    sequential body that only reduces is one reducer to its loop's caller."""
    ev = {n: N.EvRef(n) for n in ("w", "r", "x1", "x2", "w2")}
    f = _Frame(None)
    f.did_write("C", ev["w"])
    f.did_read("C", ev["r"])
    assert f.reduce_deps("C") == [ev["w"], ev["r"]]
    f.did_reduce("C", ev["x1"])
    assert f.reduce_deps("C") == [ev["w"], ev["r"]]  # not x1: reductions commute
    f.did_reduce("C", ev["x2"])
    assert f.read_deps("C") == [ev["w"], ev["x1"], ev["x2"]]
    assert f.write_deps("C") == [ev["w"], ev["r"], ev["x1"], ev["x2"]]
    f.did_write("C", ev["w2"])
    assert f.reduce_deps("C") == [ev["w2"]]  # a write ends the reductions before it
    body = _Frame(f, sequential=True)
    assert body.reduce_deps("C") == [] and body.needs == [ev["w2"]]
    body.did_reduce("C", ev["x1"])
    body.did_reduce("C", ev["x2"])
    assert body.touched == {"C": REDUCE}
    body.read_deps("C")
    body.did_read("C", ev["r"])
    assert body.touched == {"C": WRITE}  # a read and a reduction: the loop's event is both


def test_every_snapshot_reads_back_and_the_next_pass_agrees():
    from cypressc.ir.verify import verify
    from cypressc.passes.manager import get_pass

    snaps = list(_snaps().items())
    for k, (name, m) in enumerate(snaps):
        text = print_module(m)
        back = parse_module(text, f"reduce_rows-{name}.ir")
        assert print_module(back) == text, name
        verify(back)
        if k + 1 < len(snaps):
            nxt, want = snaps[k + 1]
            got = get_pass(nxt).for_module(back).apply(back)
            assert print_module(got) == print_module(want), nxt
