"""``sync-insertion`` (paper §4.2.6) on a few lines of hand-written IR: which sync ops each
kind of event edge becomes, where they go, and that the sync verifier accepts the result
and refuses it once an op is taken away."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.printer import print_module
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError, verify
from cypressc.passes.sync_insertion import SyncInsertion

C = N.IConst
BLOCK = (N.Dim(C(4), "BLOCK"),)
WG = BLOCK + (N.Dim(C(2), "WARPGROUP"),)
THREADS = WG + (N.Dim(C(4), "WARP"), N.Dim(C(32), "THREAD"))
BX, WGI, WI, TI = N.IProc("BLOCK"), N.IProc("WARPGROUP"), N.IProc("WARP"), N.IProc("THREAD")
K = N.IVar("k")
ATOM = N.AtomArg("WGMMA_64x64x16")


def ref(ev: str, dims, *idx) -> N.EvRef:
    """A reference to ``ev``: ``idx`` per dimension (None = broadcast), point-wise if omitted."""
    procs = {"BLOCK": BX, "WARPGROUP": WGI, "WARP": WI, "THREAD": TI}
    return N.EvRef(ev, tuple(idx) if idx else tuple(procs[d.proc] for d in dims))


def staged(name: str, rows: int, cols: int, depth: int) -> list:
    """A SHARED tile with ``depth`` stages and its stage partition (as warp specialization
    leaves them)."""
    return [
        N.Alloc(name, (C(depth), C(rows), C(cols)), "f16", "SHARED", dims=BLOCK),
        N.Partition(f"{name}#stage", N.TRef(name), "slices", (C(0),), (C(rows), C(cols)), BLOCK),
    ]


def tile(name: str, src: str) -> N.Partition:
    """64x64 blocks of a GLOBAL tensor: piece [0, k] is one K step."""
    return N.Partition(name, N.TRef(src), "blocks", (C(64), C(64)), (C(64), C(64)))


def stage(name: str) -> N.Piece:
    return N.Piece(f"{name}#stage", (N.ibin("%", K, C(2)),))


def module(ops, roles, stages=None, params=("A", "B"), war=()) -> N.Module:
    """Hand-written IR as warp specialization leaves it: ``stages`` per staged buffer and,
    when ``war`` pairs are given, a shared-memory plan in which those tensors share bytes
    (room enough that sync-insertion's mbarriers always fit)."""
    ps = tuple(N.Alloc(p, (C(256), C(256)), "f16", "GLOBAL") for p in params)
    res = N.Resources({}, 0, 0, 0, 1 << 30, tuple(war), 0, (0, 0)) if war else None
    return N.Module(
        "t",
        ps,
        (),
        N.Block(tuple(ops)),
        roles=tuple(roles.items()),
        schedule=N.Schedule({}, dict(stages or {}), False),
        resources=res,
    )


def acc(name: str = "acc") -> N.Alloc:
    return N.Alloc(name, (C(2), C(16)), "f32", "REGISTER", dims=THREADS)


def loop(body, yields, pre=(), depth=2) -> N.For:
    return N.For(
        "L", "k", C(0), C(4), tuple(pre), N.Block(tuple(body), tuple(yields)), BLOCK, depth
    )


def run(m: N.Module, **kw) -> N.Module:
    verify(m)
    out = SyncInsertion(**kw)(m)
    verify(out)  # synchronized: runs verify_sync too
    return out


def body_of(m: N.Module, ev: str = "L") -> list:
    def find(b):
        for o in b.ops:
            if isinstance(o, N.For) and o.ev == ev:
                return list(o.body.ops)
            if isinstance(o, N.For):
                r = find(o.body)
                if r is not None:
                    return r
        return None

    return find(m.body)


def kinds(ops) -> list[str]:
    """The ops of a block as short names (leaf ops by event)."""
    out = []
    for o in ops:
        if isinstance(o, S.SYNC_OPS):
            extra = {
                S.Wait: lambda: o.bar,
                S.Arrive: lambda: o.bar,
                S.ArriveExpectTx: lambda: o.bar,
                S.WaitGroup: lambda: f"{o.unit} {o.pending}",
                S.CommitGroup: lambda: o.unit,
                S.Fence: lambda: o.kind,
                S.BarSync: lambda: str(o.threads),
                S.MBarrier: lambda: o.name,
            }.get(type(o), lambda: "")()
            out.append(f"{type(o).__name__}({extra})" if extra else type(o).__name__)
        elif isinstance(o, (N.Copy, N.Call, N.For)):
            out.append(o.ev)
    return out


def drop(m: N.Module, pred) -> N.Module:
    """``m`` without the first sync op (at any depth) for which ``pred`` holds."""
    done = []

    def blk(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if not done and isinstance(o, S.SYNC_OPS) and pred(o):
                done.append(o)
                continue
            ops.append(replace(o, body=blk(o.body)) if isinstance(o, N.For) else o)
        return N.Block(tuple(ops), b.yields)

    out = replace(m, body=blk(m.body))
    assert done, "nothing to drop"
    return out


def pipelined_mma() -> N.Module:
    """copy A, copy B (producer) -> wgmma (consumer) in a 2-stage loop."""
    ops = [
        tile("Ap", "A"),
        tile("Bp", "B"),
        *staged("SA", 64, 64, 2),
        *staged("SB", 64, 64, 2),
        acc(),
        N.Call("fill", "fill", (N.TRef("acc"), C(0)), (), THREADS),
        loop(
            [
                N.Copy("cA", N.Piece("Ap", (C(0), K)), stage("SA"), (), BLOCK),
                N.Copy("cB", N.Piece("Bp", (K, C(0))), stage("SB"), (), BLOCK),
                N.Call(
                    "mma",
                    "warpgroup_mma",
                    (ATOM, N.TRef("acc"), stage("SA"), stage("SB")),
                    (ref("cA", BLOCK), ref("cB", BLOCK)),
                    THREADS,
                ),
            ],
            [ref("mma", THREADS, BX, None, None, None), ref("cA", BLOCK), ref("cB", BLOCK)],
            pre=[ref("fill", THREADS, BX, None, None, None)],
        ),
    ]
    return module(
        ops,
        {"cA": "producer", "cB": "producer", "mma": "consumer", "fill": "consumer"},
        {"SA": 2, "SB": 2},
    )


def test_producer_copy_and_thread_reader_in_a_pipelined_loop():
    """A TMA copy read by thread code of another role: a full barrier (one arrival, the
    tile's bytes, parity (k/2)%2) and an empty barrier released by every warp after a
    syncwarp (8 warps), in the same iteration (no wgmma to keep in flight)."""
    y = N.Alloc("y", (C(1),), "f32", "REGISTER", dims=THREADS)
    ops = [
        tile("Ap", "A"),
        *staged("SA", 64, 64, 2),
        y,
        loop(
            [
                N.Copy("cA", N.Piece("Ap", (C(0), K)), stage("SA"), (), BLOCK),
                N.Call("sum", "row_sum", (N.TRef("y"), stage("SA")), (ref("cA", BLOCK),), THREADS),
            ],
            [ref("sum", THREADS, BX, None, None, None), ref("cA", BLOCK)],
        ),
    ]
    m = run(module(ops, {"cA": "producer", "sum": "consumer"}, {"SA": 2}))
    assert kinds(m.body.ops)[-3:] == ["MBarrier(full_SA)", "MBarrier(empty_SA)", "L"]
    full, empty = [o for o in m.body.ops if isinstance(o, S.MBarrier)]
    assert (full.kind, full.stages, full.count, full.arrive_role, full.wait_role) == (
        "full",
        2,
        1,
        ("producer",),
        ("consumer",),
    )
    assert (empty.kind, empty.count, empty.arrive_role, empty.wait_role) == (
        "empty",
        8,
        ("consumer",),
        ("producer",),
    )
    body = body_of(m)
    assert kinds(body) == [
        "Wait(empty_SA)",
        "ArriveExpectTx(full_SA)",
        "cA",
        "Wait(full_SA)",
        "sum",
        "SyncWarp",
        "Arrive(empty_SA)",
    ]
    atx, copy, wfull, arrive = body[1], body[2], body[3], body[6]
    assert atx.bytes == 64 * 64 * 2 and copy.bar == S.BarIdx("full_SA", stage("SA").idx[0])
    assert wfull.parity == N.ibin("%", N.ibin("//", K, C(2)), C(2)) and wfull.role == "consumer"
    assert body[0].parity == N.ibin("%", N.ibin("+", N.ibin("//", K, C(2)), C(1)), C(2))
    assert arrive.when is None and [d.proc for d in arrive.dims] == ["BLOCK", "WARPGROUP", "WARP"]
    assert {(e.src, e.dst, e.hazard, e.via, e.distance) for e in arrive.edges} == {
        ("sum", "cA", "war", "carried", 2)
    }
    with pytest.raises(VerifyError, match="no syncwarp"):
        verify_sync(drop(m, lambda o: isinstance(o, S.SyncWarp)))


def test_two_copies_with_the_same_consumer_share_one_channel():
    """A and B of one k step: one full barrier with the sum of their bytes; the wgmma
    releases both stages one step later (mma_in_flight 1) after wait_group 1, and the last
    stage after the loop."""
    m = run(pipelined_mma())
    bars = [o for o in m.body.ops if isinstance(o, S.MBarrier)]
    assert [(b.name, b.kind, b.count, b.channel) for b in bars] == [
        ("full_SA_SB", "full", 1, ("cA", "cB")),
        ("empty_SA_SB", "empty", 2, ("cA", "cB")),
    ]
    body = body_of(m)
    assert kinds(body) == [
        "Wait(empty_SA_SB)",
        "ArriveExpectTx(full_SA_SB)",
        "cA",
        "cB",
        "Wait(full_SA_SB)",
        "Fence(wgmma)",
        "mma",
        "CommitGroup(wgmma)",
        "WaitGroup(wgmma 1)",
        "Arrive(empty_SA_SB)",
    ]
    assert body[1].bytes == 2 * 64 * 64 * 2
    arrive = body[-1]
    assert arrive.stage == N.ibin("%", N.ibin("-", K, C(1)), C(2)) and arrive.when == S.Guard(
        K, C(1)
    )
    assert [d.proc for d in arrive.dims] == [
        "BLOCK",
        "WARPGROUP",
    ]  # one arrival per consumer warpgroup
    after = kinds(m.body.ops)[kinds(m.body.ops).index("L") :]
    assert after == ["L", "WaitGroup(wgmma 0)", "Arrive(empty_SA_SB)"]  # the drain
    # fill writes the accumulator before the loop, and the C++ compiler may move it on the back
    # edge: one fence right before the wgmma realizes both edges
    assert not any(isinstance(o, S.Fence) for o in m.body.ops)
    fence = next(o for o in body if isinstance(o, S.Fence))
    assert fence.kind == "wgmma" and {(e.src, e.via) for e in fence.edges} == {
        ("fill", "entry"),
        ("mma", "carried"),
    }
    for name, pred in [
        ("the wait", lambda o: isinstance(o, S.Wait) and o.bar.startswith("full")),
        (
            "the drain",
            lambda o: isinstance(o, S.Arrive) and o.when is not None and o.when.b == C(0),
        ),
        ("wait_group 1", lambda o: isinstance(o, S.WaitGroup) and o.pending == 1),
        ("the fence", lambda o: isinstance(o, S.Fence)),
    ]:
        with pytest.raises(VerifyError):
            verify_sync(drop(m, pred))
            pytest.fail(f"dropping {name} went unnoticed")


@pytest.mark.parametrize("p, n, drains", [(0, 0, 0), (1, 1, 1)])
def test_mma_in_flight_sets_the_release_lag_and_wait_group(p, n, drains):
    m = run(pipelined_mma(), mma_in_flight=p)
    body = body_of(m)
    (wg,) = [o for o in body if isinstance(o, S.WaitGroup)]
    (arrive,) = [o for o in body if isinstance(o, S.Arrive)]
    assert wg.pending == n and (arrive.when is None) == (p == 0)
    assert sum(isinstance(o, S.Arrive) for o in m.body.ops) == drains


def test_mma_in_flight_is_capped_below_the_stage_count():
    """Two stages leave room for one group in flight: a deeper P would starve the producer."""
    body = body_of(run(pipelined_mma(), mma_in_flight=3))
    assert [o.pending for o in body if isinstance(o, S.WaitGroup)] == [1]


def test_two_loads_with_different_consumers_get_two_channels():
    """Each reader waits only for its own tile: the second copy's wait goes before its
    own consumer."""
    y, z = (N.Alloc(n, (C(1),), "f32", "REGISTER", dims=THREADS) for n in ("y", "z"))
    ops = [
        tile("Ap", "A"),
        tile("Bp", "B"),
        *staged("SA", 64, 64, 2),
        *staged("SB", 64, 64, 2),
        y,
        z,
        loop(
            [
                N.Copy("cA", N.Piece("Ap", (C(0), K)), stage("SA"), (), BLOCK),
                N.Copy("cB", N.Piece("Bp", (K, C(0))), stage("SB"), (), BLOCK),
                N.Call("f", "row_sum", (N.TRef("y"), stage("SA")), (ref("cA", BLOCK),), THREADS),
                N.Call("g", "row_sum", (N.TRef("z"), stage("SB")), (ref("cB", BLOCK),), THREADS),
            ],
            [
                ref("f", THREADS, BX, None, None, None),
                ref("g", THREADS, BX, None, None, None),
                ref("cA", BLOCK),
                ref("cB", BLOCK),
            ],
        ),
    ]
    m = run(
        module(
            ops,
            {"cA": "producer", "cB": "producer", "f": "consumer", "g": "consumer"},
            {"SA": 2, "SB": 2},
        )
    )
    assert [o.name for o in m.body.ops if isinstance(o, S.MBarrier)] == [
        "full_SA",
        "empty_SA",
        "full_SB",
        "empty_SB",
    ]
    assert kinds(body_of(m)) == [
        "Wait(empty_SA)",
        "ArriveExpectTx(full_SA)",
        "cA",
        "Wait(empty_SB)",
        "ArriveExpectTx(full_SB)",
        "cB",
        "Wait(full_SA)",
        "f",
        "SyncWarp",
        "Arrive(empty_SA)",
        "Wait(full_SB)",
        "g",
        "SyncWarp",
        "Arrive(empty_SB)",
    ]


def test_wgmma_result_read_by_thread_code_commits_and_waits_for_zero_groups():
    ops = [
        *staged("SA", 64, 64, 1),
        *staged("SB", 64, 64, 1),
        acc(),
        N.Alloc("out", (C(2), C(16)), "f32", "REGISTER", dims=THREADS),
        N.Call("fill", "fill", (N.TRef("acc"), C(0)), (), THREADS),
        N.Call(
            "mma",
            "warpgroup_mma",
            (ATOM, N.TRef("acc"), N.Piece("SA#stage", (C(0),)), N.Piece("SB#stage", (C(0),))),
            (ref("fill", THREADS),),
            THREADS,
        ),
        N.Call("read", "copy", (N.TRef("acc"), N.TRef("out")), (ref("mma", THREADS),), THREADS),
    ]
    m = run(module(ops, {}))
    assert kinds(m.body.ops)[-6:] == [
        "fill",
        "Fence(wgmma)",
        "mma",
        "CommitGroup(wgmma)",
        "WaitGroup(wgmma 0)",
        "read",
    ]
    with pytest.raises(VerifyError, match="no wait_group retires"):
        verify_sync(drop(m, lambda o: isinstance(o, S.WaitGroup)))
    with pytest.raises(VerifyError, match="never committed"):
        verify_sync(drop(m, lambda o: isinstance(o, S.CommitGroup)))


def test_wait_group_counts_the_groups_committed_in_between():
    """a's result is read after b's group was committed: wait_group 1 lets b stay in flight
    (the FA3 overlap); the thread op between them closes a's group."""
    sa, sb = N.Piece("SA#stage", (C(0),)), N.Piece("SB#stage", (C(0),))
    ops = [
        *staged("SA", 64, 64, 1),
        *staged("SB", 64, 64, 1),
        acc("a1"),
        acc("a2"),
        acc("x"),
        acc("out"),
        N.Call("f1", "fill", (N.TRef("a1"), C(0)), (), THREADS),
        N.Call("f2", "fill", (N.TRef("a2"), C(0)), (), THREADS),
        N.Call("a", "warpgroup_mma", (ATOM, N.TRef("a1"), sa, sb), (ref("f1", THREADS),), THREADS),
        N.Call("t", "fill", (N.TRef("x"), C(1)), (), THREADS),
        N.Call("b", "warpgroup_mma", (ATOM, N.TRef("a2"), sa, sb), (ref("f2", THREADS),), THREADS),
        N.Call("read", "copy", (N.TRef("a1"), N.TRef("out")), (ref("a", THREADS),), THREADS),
    ]
    m = run(module(ops, {}))
    assert kinds(m.body.ops) == [
        "f1",
        "f2",
        "Fence(wgmma)",
        "a",
        "CommitGroup(wgmma)",
        "t",
        "Fence(wgmma)",
        "b",
        "CommitGroup(wgmma)",
        "WaitGroup(wgmma 1)",
        "read",
    ]
    with pytest.raises(VerifyError, match="no wait_group retires"):
        verify_sync(drop(m, lambda o: isinstance(o, S.WaitGroup)))


@pytest.mark.parametrize(
    "first_read_before_b, expect",
    [
        (
            True,
            [
                "Fence(wgmma)",
                "a",
                "CommitGroup(wgmma)",
                "Fence(wgmma)",
                "b",
                "CommitGroup(wgmma)",
                "WaitGroup(wgmma 1)",
                "ra",
                "WaitGroup(wgmma 0)",
                "rb",
            ],
        ),
        # one wgmma fence: nothing touches a register between the two issues (sync_prune folds b's into a's)
        (False, ["Fence(wgmma)", "a", "b", "CommitGroup(wgmma)", "WaitGroup(wgmma 0)", "rb", "ra"]),
    ],
)
def test_back_to_back_wgmmas_needed_at_different_points_get_their_own_groups(
    first_read_before_b, expect
):
    """Two wgmmas issued back to back on two accumulators: when thread code reads a's result
    before b's, a's group is committed alone and the first read waits with b still in flight
    (FlashAttention-3's S = Q·Kᵀ of step k + 1 beside O += P·V of step k); when b's result is
    read first, nothing is gained by splitting and the run stays one group."""
    sa, sb = N.Piece("SA#stage", (C(0),)), N.Piece("SB#stage", (C(0),))
    reads = [
        N.Call("ra", "copy", (N.TRef("a1"), N.TRef("o1")), (ref("a", THREADS),), THREADS),
        N.Call("rb", "copy", (N.TRef("a2"), N.TRef("o2")), (ref("b", THREADS),), THREADS),
    ]
    ops = [
        *staged("SA", 64, 64, 1),
        *staged("SB", 64, 64, 1),
        acc("a1"),
        acc("a2"),
        acc("o1"),
        acc("o2"),
        N.Call("f1", "fill", (N.TRef("a1"), C(0)), (), THREADS),
        N.Call("f2", "fill", (N.TRef("a2"), C(0)), (), THREADS),
        N.Call("a", "warpgroup_mma", (ATOM, N.TRef("a1"), sa, sb), (ref("f1", THREADS),), THREADS),
        N.Call("b", "warpgroup_mma", (ATOM, N.TRef("a2"), sa, sb), (ref("f2", THREADS),), THREADS),
        *(reads if first_read_before_b else reads[::-1]),
    ]
    m = run(module(ops, {}))
    assert kinds(m.body.ops)[2:] == expect
    if first_read_before_b:
        with pytest.raises(VerifyError, match="no wait_group retires"):
            verify_sync(drop(m, lambda o: isinstance(o, S.WaitGroup) and o.pending == 1))


def shared_handoff(*idx) -> N.Module:
    """Threads write a SHARED tile, other threads read it, the edge indexed by ``idx``."""
    ops = [
        N.Alloc("T", (C(128),), "f32", "SHARED", dims=BLOCK),
        N.Alloc("r", (C(1),), "f32", "REGISTER", dims=THREADS),
        N.Alloc("s", (C(128),), "f32", "REGISTER", dims=THREADS),
        N.Call("w", "copy", (N.TRef("r"), N.TRef("T")), (), THREADS),
        N.Call("rd", "copy", (N.TRef("T"), N.TRef("s")), (N.EvRef("w", idx),), THREADS),
    ]
    return module(ops, {})


@pytest.mark.parametrize(
    "idx, expect",
    [
        ((BX, WGI, None, None), "BarSync(128)"),  # broadcast over the warps of one warpgroup
        ((BX, None, None, None), "BarSync(256)"),  # over both warpgroups
        ((BX, WGI, WI, None), "SyncWarp"),  # over the threads of one warp
        ((BX, WGI, WI, TI), None),  # point-wise: program order in one thread
    ],
)
def test_broadcasts_become_named_barriers_syncwarp_or_nothing(idx, expect):
    """The same sync twice: before the read (RAW), and at the end of the tile (WAR into the next
    tile's write, ``via = "tile"``, over the processors the RAW edge spans)."""
    m = run(shared_handoff(*idx))
    syncs = [o for o in m.body.ops if isinstance(o, S.SYNC_OPS)]
    assert kinds(syncs) == ([expect, expect] if expect else [])
    if expect:
        assert {e.via for e in syncs[1].edges} == {"tile"} and m.body.ops[-1] is syncs[1]
    if expect == "BarSync(128)":
        assert syncs[0].id == N.ibin("+", C(1), WGI)  # one barrier per warpgroup: ids 1, 2
        assert syncs[1].id == N.ibin("+", C(3), WGI)  # and at the tile end: 3, 4
    if expect == "BarSync(256)":
        assert syncs[0].id == C(1) and syncs[1].id == C(2)
    if expect:
        with pytest.raises(VerifyError):
            verify_sync(drop(m, lambda o: True))


def test_thread_writes_read_by_a_tma_store_need_a_proxy_fence():
    ops = [
        N.Alloc("T", (C(64), C(64)), "f16", "SHARED", dims=WG),
        N.Alloc("r", (C(2), C(16)), "f32", "REGISTER", dims=THREADS),
        N.Call("w", "copy", (N.TRef("r"), N.TRef("T")), (), THREADS),
        tile("Ap", "A"),
        N.Copy(
            "st",
            N.TRef("T"),
            N.Piece("Ap", (WGI, C(0))),
            (ref("w", THREADS, BX, WGI, None, None),),
            WG,
        ),
    ]
    m = run(module(ops, {}))
    assert kinds(m.body.ops)[-5:] == [
        "Fence(proxy_async)",
        "BarSync(128)",
        "st",
        "CommitGroup(bulk)",
        "WaitGroup(bulk 0)",
    ]
    with pytest.raises(VerifyError, match="no proxy"):
        verify_sync(drop(m, lambda o: isinstance(o, S.Fence)))


def test_an_edge_it_cannot_synchronize_is_refused():
    """A TMA copy read only after its loop: refused (E050), never left bare."""
    y = N.Alloc("y", (C(1),), "f32", "REGISTER", dims=THREADS)
    ops = [
        tile("Ap", "A"),
        *staged("SA", 64, 64, 2),
        y,
        loop([N.Copy("cA", N.Piece("Ap", (C(0), K)), stage("SA"), (), BLOCK)], [ref("cA", BLOCK)]),
        N.Call(
            "sum",
            "row_sum",
            (N.TRef("y"), N.Piece("SA#stage", (C(1),))),
            (ref("L", BLOCK),),
            THREADS,
        ),
    ]
    with pytest.raises(CypressError) as e:
        SyncInsertion()(module(ops, {"cA": "producer", "sum": "consumer"}, {"SA": 2}))
    assert e.value.code == "E050" and "only after its loop" in e.value.message


def test_the_printer_names_the_edges():
    text = print_module(run(pipelined_mma()))
    assert "wait %full_SA_SB[(%k % 2)] parity ((%k // 2) % 2)" in text
    assert (
        "arrive %empty_SA_SB[((%k - 1) % 2)] if %k >= 1 per [(2, WARPGROUP)]  @consumer  "
        "from %e5 -> %e3 (war %SA, 2 iteration(s) later); %e5 -> %e4 (war %SB, 2 iteration(s) later)"
    ) in text
    assert (
        "%e3: [(4, BLOCK)] = copy %Ap[0, %k] -> %SA#stage[(%k % 2)] {} on %full_SA_SB[(%k % 2)]  @producer"
        in text
    )
    assert (
        "arrive %empty_SA_SB[((4 - 1) % 2)] if (4 - 1) >= 0 per [(2, WARPGROUP)]" in text
    )  # the drain
