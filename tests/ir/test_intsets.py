"""Disjointness by proof (issue #33): :func:`cypressc.ir.intsets.may_meet` answers "apart"
only when Z3 proves no execution makes the indices equal.  Hypothesis draws index
expressions with loop ranges and compares every "apart" with brute-force enumeration over
small ranges; hand-built modules pin the hazards the old sampling (and the structural guesses
an audit found) dropped."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cypressc.ir import nodes as N
from cypressc.ir.hazards import Program
from cypressc.ir.intsets import AtLeast, IndexSpace, may_be_empty, may_meet

C, V = N.IConst, N.IVar
k, n = V("k"), V("N")
SPACE = IndexSpace({"k": (C(0), N.ibin("cdiv", n, C(128)))}, {}, frozenset({"N"}))


def test_the_two_pairs_sampling_called_apart_may_meet():
    # k takes 13 once N > 13 * 128, and N // 128 - 1 whenever N >= 128
    assert may_meet([(k, C(13))], SPACE)
    assert may_meet([(k, N.ibin("-", N.ibin("//", n, C(128)), C(1)))], SPACE)


def test_proofs_it_does_give():
    ring = N.ibin("%", k, C(3))
    assert not may_meet([(ring, ring)], SPACE, shift={"k": 1})
    assert not may_meet([(ring, ring)], SPACE, shift={"k": 2})
    assert may_meet([(ring, ring)], SPACE, shift={"k": 3})
    assert may_meet([(ring, ring)], SPACE, shift={"k": AtLeast(4)})
    # past the loop's last iteration nothing meets: k < cdiv(N, 128) <= 1 when N <= 128
    small = IndexSpace({"k": (C(0), N.ibin("min", n, C(2)))}, {}, frozenset({"N"}))
    assert not may_meet([(k, C(2))], small)
    assert not may_meet([(k, k)], small, shift={"k": AtLeast(2)})
    # a Let is its definition, not a free value: t = k - 1 never equals k
    lets = IndexSpace({"k": (C(0), C(8))}, {"t": N.ibin("-", k, C(1))}, frozenset())
    assert not may_meet([(V("t"), k)], lets)
    assert may_meet([(V("t"), k)], lets, shift={"k": -1})


def test_unknowns_and_unencodable_expressions_keep_the_edge():
    assert may_meet([(N.IBin("^", N.ibin("<", k, C(1)), C(1)), C(5))], SPACE)
    assert may_meet([(N.ibin("+", k, C(0.5)), C(7))], SPACE)


def test_private_loop_variables_are_separate_iterations():
    two = IndexSpace({"k": (C(0), C(4))}, {}, frozenset())
    assert not may_meet([(k, N.ibin("+", k, C(1)))], two)
    assert may_meet([(k, N.ibin("+", k, C(1)))], two, private={"k"})


def test_empty_loops():
    assert may_be_empty(C(0), n, SPACE)
    assert not may_be_empty(C(0), N.ibin("+", n, C(1)), SPACE)


# -- brute force ------------------------------------------------------------------------------
def _py(e, env):
    if isinstance(e, N.IConst):
        return e.value
    if isinstance(e, N.IVar):
        return env[e.name]
    a, b = _py(e.a, env), _py(e.b, env)
    return {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "min": lambda: min(a, b),
        "max": lambda: max(a, b),
        "//": lambda: a // b,
        "%": lambda: a % b,
        "cdiv": lambda: -(-a // b),
    }[e.op]()


def _exprs(leaves):
    consts = st.integers(-4, 9).map(C)
    divisors = st.integers(1, 5).map(C)
    base = st.one_of(st.sampled_from(leaves), consts)
    return st.recursive(
        base,
        lambda sub: st.one_of(
            st.tuples(st.sampled_from(["+", "-", "min", "max"]), sub, sub).map(
                lambda t: N.IBin(*t)
            ),
            st.tuples(st.sampled_from(["//", "%", "cdiv"]), sub, divisors).map(
                lambda t: N.IBin(*t)
            ),
            st.tuples(sub, st.integers(-3, 3).map(C)).map(lambda t: N.IBin("*", *t)),
            st.tuples(sub, sub).map(lambda t: N.IBin("*", *t)),
        ),
        max_leaves=5,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    a=_exprs([k, n]), b=_exprs([k, n]), hi=_exprs([n]), d=st.integers(0, 4), private=st.booleans()
)
def test_apart_is_never_answered_for_a_pair_that_meets(a, b, hi, d, private):
    space = IndexSpace({"k": (C(0), hi)}, {}, frozenset({"N"}))
    d = 0 if private else d  # a shift moves one iteration; private sides are any two already
    answer = may_meet(
        [(a, b)], space, private={"k"} if private else (), shift={"k": d} if d else None
    )
    if answer:
        return
    for nv in range(0, 24):
        try:
            top = _py(hi, {"N": nv})
        except ZeroDivisionError:
            continue
        ks = range(0, max(0, min(top, 40)))
        pairs = itertools.product(ks, ks) if private else ((x, x + d) for x in ks)
        for ka, kb in pairs:
            if not (0 <= kb < top):
                continue
            try:
                assert _py(a, {"k": ka, "N": nv}) != _py(b, {"k": kb, "N": nv}), (
                    a,
                    b,
                    hi,
                    d,
                    nv,
                    ka,
                    kb,
                )
            except ZeroDivisionError:
                continue


# -- hazards the old decisions dropped (hand-built modules) --------------------------------------
def _deps(m):
    return {(d.src, d.dst, d.hazard, d.via, d.distance) for d in Program(m).deps()}


def test_a_write_by_fewer_warpgroups_than_pieces_does_not_kill_the_flow_edge():
    # two warpgroups write slices 0 and 1 of four; the read of slice 3 still needs the TMA load
    WG = (N.Dim(C(2), "WARPGROUP"),)
    X = N.Alloc("X", (C(4), C(64)), "f16", "GLOBAL")
    R = N.Alloc("R", (C(4), C(64)), "f16", "SHARED")
    Y, Z = N.Alloc("Y", (C(64),), "f16", "SHARED"), N.Alloc("Z", (C(64),), "f16", "SHARED")
    PR = N.Partition("PR", N.TRef("R"), "slices", (C(0),), (C(64),))
    ops = (
        R,
        Y,
        Z,
        PR,
        N.Copy("e1", N.TRef("X"), N.TRef("R")),
        N.Copy(
            "e2", N.TRef("Y"), N.Piece("PR", (N.IProc("WARPGROUP"),)), pre=(N.EvRef("e1"),), dims=WG
        ),
        N.Copy(
            "e3", N.Piece("PR", (C(3),)), N.TRef("Z"), pre=(N.EvRef("e1"), N.EvRef("e2", (None,)))
        ),
    )
    assert ("e1", "e3", "raw", "same", 0) in _deps(N.Module("t", (X,), (), N.Block(ops)))


def test_a_buffer_reused_past_its_stage_count_keeps_its_carried_edges():
    # R[k % 3] written every step, but R has one stage as far as the schedule knows: the write
    # three steps later meets the read of this step
    B, bi = (N.Dim(C(1), "BLOCK"),), (N.IProc("BLOCK", 0),)
    X = N.Alloc("X", (C(64),), "f16", "GLOBAL")
    R, Z = N.Alloc("R", (C(3), C(64)), "f16", "SHARED"), N.Alloc("Z", (C(64),), "f16", "SHARED")
    PR = N.Partition("PR", N.TRef("R"), "slices", (C(0),), (C(64),))
    idx = (N.ibin("%", k, C(3)),)
    body = N.Block(
        (
            N.Copy("w", N.TRef("X"), N.Piece("PR", idx), dims=B),
            N.Copy("r", N.Piece("PR", idx), N.TRef("Z"), pre=(N.EvRef("w", bi),), dims=B),
        ),
        (N.EvRef("w", bi), N.EvRef("r", bi)),
    )
    m = N.Module(
        "t", (X,), ("n",), N.Block((R, Z, PR, N.For("L", "k", C(0), V("n"), (), body, dims=B)))
    )
    carried = {(s, d, h) for s, d, h, via, dist in _deps(m) if via == "carried" and 1 <= dist <= 3}
    assert {("r", "w", "war"), ("w", "w", "waw")} <= carried


def test_a_writer_in_a_loop_that_may_not_run_does_not_kill_the_flow_edge():
    B, bi = (N.Dim(C(1), "BLOCK"),), (N.IProc("BLOCK", 0),)
    X = N.Alloc("X", (C(64),), "f16", "GLOBAL")
    Vt, Y, Z = (N.Alloc(x, (C(64),), "f16", "SHARED", dims=B) for x in "VYZ")
    L1 = N.For(
        "L1",
        "k",
        C(0),
        V("n"),
        (),
        N.Block((N.Copy("p", N.TRef("X"), N.TRef("V"), dims=B),), (N.EvRef("p", bi),)),
        dims=B,
    )
    L2 = N.For(
        "L2",
        "j",
        C(0),
        V("m"),
        (N.EvRef("L1", bi),),
        N.Block((N.Copy("w", N.TRef("Y"), N.TRef("V"), dims=B),), (N.EvRef("w", bi),)),
        dims=B,
    )
    c = N.Copy("c", N.TRef("V"), N.TRef("Z"), pre=(N.EvRef("L1", bi), N.EvRef("L2", bi)), dims=B)
    m = N.Module("t", (X,), ("n", "m"), N.Block((Vt, Y, Z, L1, L2, c)))
    assert ("p", "c", "raw", "after", 0) in _deps(m)  # m = 0: c reads what p wrote


def test_a_hazard_behind_a_chain_of_edges_on_other_pieces_is_found():
    # dependence analysis names only R's last writer: the read of R[0] waits for the TMA into
    # R[1], which waits for the TMA into R[0]; neither link conflicts, the chain does
    X = N.Alloc("X", (C(2), C(64)), "f16", "GLOBAL")
    R, Y = N.Alloc("R", (C(2), C(64)), "f16", "SHARED"), N.Alloc("Y", (C(64),), "f16", "SHARED")
    PX = N.Partition("PX", N.TRef("X"), "slices", (C(0),), (C(64),))
    PR = N.Partition("PR", N.TRef("R"), "slices", (C(0),), (C(64),))
    ops = (
        R,
        Y,
        PX,
        PR,
        N.Copy("e1", N.Piece("PX", (C(0),)), N.Piece("PR", (C(0),))),
        N.Copy("e2", N.Piece("PX", (C(1),)), N.Piece("PR", (C(1),)), pre=(N.EvRef("e1"),)),
        N.Copy("e3", N.Piece("PR", (C(0),)), N.TRef("Y"), pre=(N.EvRef("e2"),)),
    )
    assert ("e1", "e3", "raw", "same", 0) in _deps(N.Module("t", (X,), (), N.Block(ops)))


def test_a_loop_copy_into_bytes_an_earlier_tile_used_waits_for_its_readers():
    # resource allocation let E (read before the loop) and the loop's buffer L share bytes: the
    # loop's TMA into L comes after E's reader
    B, bi = (N.Dim(C(1), "BLOCK"),), (N.IProc("BLOCK", 0),)
    X = N.Alloc("X", (C(64),), "f16", "GLOBAL")
    E, L, Z, Z2 = (N.Alloc(x, (C(64),), "f16", "SHARED", dims=B) for x in ("E", "L", "Z", "Z2"))
    body = N.Block(
        (
            N.Copy("w", N.TRef("X"), N.TRef("L"), dims=B),
            N.Copy("r", N.TRef("L"), N.TRef("Z2"), pre=(N.EvRef("w", bi),), dims=B),
        ),
        (N.EvRef("r", bi),),
    )
    ops = (
        E,
        L,
        Z,
        Z2,
        N.Copy("e0", N.TRef("X"), N.TRef("E"), dims=B),
        N.Copy("er", N.TRef("E"), N.TRef("Z"), pre=(N.EvRef("e0", bi),), dims=B),
        N.For("Lp", "k", C(0), V("n"), (), body, dims=B),
    )
    res = N.Resources(
        smem={},
        smem_bytes=0,
        barrier_offset=0,
        barrier_bytes=0,
        smem_limit=0,
        war=(("E", "L"),),
        registers=0,
        register_budget=(0, 0),
    )
    assert ("er", "w", "war", "entry", 0) in _deps(
        N.Module("t", (X,), ("n",), N.Block(ops), resources=res)
    )


def test_a_cached_answer_is_not_reused_for_another_private_set():
    """``k`` in ``[m, m + 1)``: with ``k`` private and ``m`` shared, ``k == k - 1`` across the
    two sides is impossible; with ``m`` private too it holds (m one apart).  The variable ``m``
    reaches the query only through ``k``'s bounds, and spaces with equal constraints share
    their answers, so the key must hold the whole private set."""

    def space():
        return IndexSpace(
            loops={
                "m": (N.IConst(0), N.IConst(4)),
                "k": (N.IVar("m"), N.ibin("+", N.IVar("m"), N.IConst(1))),
            }
        )

    pairs = [(N.IVar("k"), N.ibin("-", N.IVar("k"), N.IConst(1)))]
    assert may_meet(pairs, space(), private={"k"}) is False
    assert may_meet(pairs, space(), private={"k", "m"}) is True
    assert may_meet(pairs, space(), private={"k"}) is False
