"""The *free* mbarrier of a persistent block (sync-insertion's ``_freed_channel``): a TMA copy
outside every loop into bytes that earlier tensors of the same tile share
(``module.resources.war``) waits, with parity 0, on a one-stage barrier of this tile that the
readers of those earlier tensors release once their reads are over.

Resource allocation only ever pairs FlashAttention-3's peeled K tile with its last V tile; the
tests here force other pairings (as tests/backend/test_persistent_attention.py and
tests/ir/test_shared_bytes.py do) to reach what that one pairing does not:

* two earlier tensors (the Q panel, read in every step of the key loop, and the peeled K tile,
  read once before it) in the bytes of one copy (the last V tile): one free barrier whose
  releases carry the edges of the readers of both;
* the refusal (E050) of such an edge in a block without a producer role, where the copy
  cannot wait on a release of its own role's reads.

Not covered, because nothing in programs/ or tests/programs/ reaches it even with a forced
pairing: an earlier tensor read by thread code (no program with a TMA copy outside every loop
has thread code reading a SHARED tensor; only gemm_reduction's row sums read one, inside its
loop, and it has no copy outside a loop), and the refusals of ``_tile_release`` /
``_after_store`` (every TMA store of such a program is its last op, outside every loop; no
program nests loops; a TMA load is never a reader).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import cypressc.passes.resource_allocation as ra
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.printer import event_names
from cypressc.ir.schedule_check import check_schedules, small_sizes, two_tile_sizes
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]
# these tests are about a peeled step's tiles in buffers of their own (what they share, the
# barriers they need); with ring joins FlashAttention-3's take stage-ring positions instead
# (tests/backend/test_ring_joins.py)
pytestmark = pytest.mark.usefixtures("no_ring_joins")
FA3 = "flash_attention3"
STAGED = ROOT / "tests/mappings/full" / FA3 / "h100_d128_staged_persistent.yaml"
PP = ROOT / "tests/mappings/full" / FA3 / "h100_d64_pp_staged_persistent.yaml"
V = "V_smem_1"  # the last V tile: copied after the key loop, outside every loop
Q_PAIR, K_PAIR = ("Q_smem", V), ("K_smem", V)
BOTH = (Q_PAIR, K_PAIR)  # the Q panel and the peeled K tile both in the last V tile's bytes
FREE = f"free_{V}"
_REAL = ra.resource_allocation  # captured before any test patches it


def _compile(
    monkeypatch, mapping: Path, war: tuple, snaps: dict | None = None
) -> dict[str, N.Module]:
    """The passes up to sync-insertion (which verifies its sync) with resource allocation's
    ``war`` pairs replaced by ``war``.  ``snaps`` collects each pass's snapshot as it
    completes, so that they survive a refusal."""

    def forced(m):
        m = _REAL(m)
        return replace(m, resources=replace(m.resources, war=war))

    monkeypatch.setattr(ra, "resource_allocation", forced)
    out = {} if snaps is None else snaps
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{FA3}.cyp")), load_mapping(mapping)
    )
    compile_module(tree, until="sync-insertion", hook=lambda name, m, _dt: out.__setitem__(name, m))
    return out


def _top(m: N.Module, kind) -> list:
    return [o for o in m.body.ops if isinstance(o, kind)]


def _loop(m: N.Module) -> N.For:
    (lp,) = _top(m, N.For)
    return lp


def _copy(m: N.Module, dst: str) -> N.Copy:
    return next(o for o in _top(m, N.Copy) if isinstance(o.dst, N.TRef) and o.dst.name == dst)


def _readers(m: N.Module) -> tuple[str, str]:
    """The events of S = Q·K[0]ᵀ (before the loop: reads Q and the peeled K tile) and of the
    loop's S = Q·K[k+1]ᵀ (reads Q)."""
    qk0 = next(o for o in _top(m, N.Call) if o.fn == "warpgroup_mma_bt")
    qk = next(o for o in _loop(m).body.ops if isinstance(o, N.Call) and o.fn == "warpgroup_mma_bt")
    return qk0.ev, qk.ev


def _drop(m: N.Module, op) -> N.Module:
    """``m`` without ``op`` (at the top level or in the main loop's body)."""

    def strip(b: N.Block) -> N.Block:
        return replace(
            b,
            ops=tuple(
                replace(o, body=strip(o.body)) if isinstance(o, N.For) else o
                for o in b.ops
                if o is not op
            ),
        )

    return replace(m, body=strip(m.body))


def _only(m: N.Module, pair: tuple[str, str]) -> N.Module:
    """``m`` with only one of its sharing pairs: the interpreter's run stops at its first
    finding, so each pair is checked on its own to see the race on that pair's bytes (with
    both pairs it models each pair as a region of its own too: see the last test below)."""
    return replace(m, resources=replace(m.resources, war=(pair,)))


def _findings(snaps, mutant: N.Module) -> list:
    """The interpreter on one tile and on two tiles of one persistent block, with the key loop
    running steps (wraps 2) and running none (wraps 0), non-causal, two seeds each."""
    m, ref = snaps["sync-insertion"], snaps["warp-specialization"]
    out = []
    for wraps in (2, 0):
        base = {**small_sizes(m, wraps=wraps), "causal": 0}
        for seed in (0, 11):
            out.append(
                check_schedules(
                    mutant, ref, sizes=base, seed=seed, schedules=12, value_every=0
                ).finding
            )
            out.append(
                check_schedules(
                    mutant,
                    ref,
                    sizes=two_tile_sizes(m, base),
                    seed=seed,
                    schedules=12,
                    value_every=0,
                    persistent=True,
                ).finding
            )
    return out


MAPPINGS = pytest.mark.parametrize("mapping", [STAGED, PP], ids=["d128_staged", "d64_pingpong"])


# ----------------------------------------------------------------------------- two earlier tensors
@MAPPINGS
def test_two_earlier_tensors_are_released_to_the_copy_on_one_free_barrier(monkeypatch, mapping):
    """With the Q panel and the peeled K tile both in the last V tile's bytes, the V copy gets
    one free barrier whose wait and releases carry the WAR edges of the readers of *both*:
    S = Q·K[0]ᵀ (before the loop, reads both: ``via same``) and the loop's S = Q·Kᵀ (reads Q:
    ``via after``).  The release is therefore not the one K alone gets (unguarded, right after
    S = Q·K[0]ᵀ retired, which would free Q's bytes while the loop still reads them) but the
    Q panel's: in the loop's last step and after the loop when it runs no step.  Protects
    ``_alias_loads`` collecting every sharing tensor's readers and ``_freed_channel`` merging
    them into one barrier; the verifier accepts the result."""
    m = _compile(monkeypatch, mapping, BOTH)["sync-insertion"]
    qk0, qk = _readers(m)
    v = _copy(m, V)
    want = {(qk0, "K_smem", "same"), (qk0, "Q_smem", "same"), (qk, "Q_smem", "after")}
    (bar,) = [b for b in _top(m, S.MBarrier) if b.name == FREE]
    assert bar.kind == "empty" and bar.stages == 1 and bar.same_tile and bar.channel == (v.ev,)
    assert bar.count == 2 and bar.arrive_role == ("consumer",) and bar.wait_role == ("producer",)
    assert {(e.src, e.tensor, e.via) for e in bar.edges} == want
    assert all(e.dst == v.ev and e.hazard == "war" for e in bar.edges)
    (wait,) = [o for o in _top(m, S.Wait) if o.bar == FREE]
    assert (
        wait.parity == N.IConst(0) and wait.role == "producer"
    )  # this tile's release, not the last tile's
    assert {(e.src, e.tensor, e.via) for e in wait.edges} == want
    ops = list(m.body.ops)
    assert ops.index(wait) < ops.index(v)
    lp = _loop(m)
    inner = [o for o in lp.body.ops if isinstance(o, S.Arrive) and o.bar == FREE]
    outer = [o for o in _top(m, S.Arrive) if o.bar == FREE]
    assert len(inner) == 1 and len(outer) == 1  # one release per path through the tile
    assert inner[0].when == S.Guard(
        N.IVar(lp.var), N.IBin("-", lp.hi, N.IConst(1))
    )  # the loop's last step
    assert outer[0].when == S.Guard(lp.lo, lp.hi)  # the loop ran no step
    assert ops.index(lp) < ops.index(outer[0]) < ops.index(wait)
    for arrive in inner + outer:
        assert arrive.role == "consumer"
        assert {(e.src, e.tensor, e.via) for e in arrive.edges} == want
    # the release in the loop follows the wait_group that retires S = Q·Kᵀ of the step
    body = list(lp.body.ops)
    i = body.index(inner[0])
    assert any(isinstance(o, S.WaitGroup) and o.unit == "wgmma" for o in body[:i])
    verify_sync(m)


@MAPPINGS
def test_each_pair_is_clean_and_the_missing_free_wait_races_on_both(monkeypatch, mapping):
    """The interpreter, for each of the two pairs on its own region: the compiled block is clean
    on one tile and on two tiles of one persistent block; without the copy's wait on the free
    barrier the verifier refuses and the interpreter finds a race on the Q panel's bytes (the V
    copy overwrites them while the loop's S = Q·Kᵀ may still read them) and on the peeled K
    tile's (while S = Q·K[0]ᵀ may, when the loop runs no step).  Protects the wait covering
    the readers of both tensors, and the interpreter's model of bytes shared by copies."""
    snaps = _compile(monkeypatch, mapping, BOTH)
    m = snaps["sync-insertion"]
    for pair in BOTH:
        assert _findings(snaps, _only(m, pair)) == [None] * 8, pair
    (wait,) = [o for o in _top(m, S.Wait) if o.bar == FREE]
    mutant = _drop(m, wait)
    with pytest.raises(VerifyError, match=f"the copy does not wait for phase 0 of %{FREE}"):
        verify_sync(mutant)
    for pair in BOTH:
        region = "|".join(sorted(pair))
        found = [f for f in _findings(snaps, _only(mutant, pair)) if f is not None]
        assert any(f.kind == "race" and region in f.message for f in found), (pair, found)


def test_a_release_after_the_peeled_k_tiles_reads_alone_races_on_the_q_panel(monkeypatch):
    """The block compiled for the K tile's sharing alone releases the V tile's bytes right
    after S = Q·K[0]ᵀ retired.  Were the Q panel in those bytes too, that release would come
    too early: the verifier refuses that body under the two pairings, and the interpreter
    finds the V copy overwriting Q before the loop's S = Q·Kᵀ released it.  Protects the
    need for the second tensor's readers on the free barrier (what the two-tensor compile
    adds), not just the first's."""
    snaps = _compile(monkeypatch, STAGED, BOTH)
    m = snaps["sync-insertion"]
    single = _compile(monkeypatch, STAGED, (K_PAIR,))["sync-insertion"]
    _, qk = _readers(single)
    (early,) = [o for o in _top(single, S.Arrive) if o.bar == FREE]
    assert early.when is None and {e.tensor for e in early.edges} == {"K_smem"}
    hybrid = replace(single, resources=m.resources)
    with pytest.raises(VerifyError):
        verify_sync(hybrid)
    found = [f for f in _findings(snaps, _only(hybrid, Q_PAIR)) if f is not None]
    assert any(
        f.kind == "race" and "Q_smem|V_smem_1" in f.message and "before the release of" in f.message
        for f in found
    ), found
    assert _findings(snaps, _only(hybrid, K_PAIR)) == [None] * 8  # for K's bytes it is right


@pytest.mark.parametrize("where", ["in_the_loop", "after_the_loop"])
def test_both_guarded_releases_of_the_free_barrier_are_needed(monkeypatch, where):
    """The free barrier expects one arrival per consumer warpgroup per tile: from the loop's
    last step when the loop runs, from after the loop when it runs no step.  Without either,
    the verifier refuses (the phase the copy waits for never completes) and the producer waits
    forever on the trip counts that take the missing path.  Protects the two guarded
    placements of ``_tile_release``'s ``_in_last_step`` when used for this tile."""
    snaps = _compile(monkeypatch, STAGED, BOTH)
    m = snaps["sync-insertion"]
    lp = _loop(m)
    if where == "in_the_loop":
        victim = next(o for o in lp.body.ops if isinstance(o, S.Arrive) and o.bar == FREE)
    else:
        victim = next(o for o in _top(m, S.Arrive) if o.bar == FREE)
    mutant = _drop(m, victim)
    with pytest.raises(
        VerifyError, match=f"waits for phase 0 of %{FREE}\\[0\\], which completes 0"
    ):
        verify_sync(mutant)
    found = _findings(snaps, _only(mutant, Q_PAIR))
    steps, none = found[:4], found[4:]  # wraps 2 (the loop runs), wraps 0 (it does not)
    hit, clean = (steps, none) if where == "in_the_loop" else (none, steps)
    assert clean == [None] * 4, clean
    assert all(
        f is not None and f.kind == "deadlock" and f"wait %{FREE}" in f.message for f in hit
    ), hit


def test_the_interpreter_takes_two_pairs_with_one_common_tensor_as_they_are(monkeypatch):
    """Two earlier tensors that each share bytes with one later tensor need not share bytes
    with each other (the later one may straddle both).  The compiled block is clean for each
    pair on its own (above) and with both pairs: the interpreter gives each pair a region of
    its own (``concurrent_state.alias_groups``), so the Q copy and the peeled K copy of a tile
    do not meet (one region per connected group reported them racing)."""
    snaps = _compile(monkeypatch, STAGED, BOTH)
    assert _findings(snaps, snaps["sync-insertion"]) == [None] * 8


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("war", [(K_PAIR,), BOTH], ids=["peeled_k", "q_and_peeled_k"])
def test_without_a_producer_role_a_free_edge_is_refused_with_e050(monkeypatch, tmp_path, war):
    """``warpspecialize: false``: the V copy and the readers of the bytes it overwrites are one
    role, so no free barrier can hand the bytes over (a role cannot wait on its own later
    release) and the WAR edge of the sharing is left to ``implied`` — which nothing implies.
    Sync-insertion must refuse it as a clean E050 naming the edge from S = Q·K[0]ᵀ into the V
    copy (resource allocation avoids the pairing there; this protects the refusal, not a
    silently unsynchronized kernel, should it ever be chosen)."""
    mapping = tmp_path / "nows.yaml"
    text = STAGED.read_text()
    assert "warpspecialize: true" in text
    mapping.write_text(text.replace("warpspecialize: true", "warpspecialize: false"))
    snaps: dict[str, N.Module] = {}
    with pytest.raises(CypressError) as ei:
        _compile(monkeypatch, mapping, war, snaps)
    e = ei.value
    assert (
        "sync-insertion" not in snaps and "warp-specialization" in snaps
    )  # refused by sync-insertion
    ws = snaps["warp-specialization"]
    qk0 = next(o for o in _top(ws, N.Call) if o.fn == "warpgroup_mma_bt").ev
    v = _copy(ws, V).ev
    assert e.code == "E050"
    assert e.message.startswith("the CUDA backend cannot synchronize this program yet: ")
    # the edge from S = Q·K[0]ᵀ into the V copy by the ``%eN`` names ``cypressc explain`` shows,
    # and the hazard on the peeled K tile's reads, in the bytes the V tile shares
    shown = event_names(ws)
    assert (
        f"the WAR edge {shown[qk0]} -> {shown[v]} on %K_smem (sharing its bytes with %{V}) "
        "is not a TMA channel"
    ) in e.message, e.message
    assert "ev#" not in e.message
    assert (
        Path(e.loc.file).name == "nows.yaml" and e.loc.line > 0
    )  # the BLOCK instance of the mapping
    assert e.hint and "cypressc explain" in e.hint
