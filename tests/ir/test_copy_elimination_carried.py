"""``copy-elimination`` (paper §4.2.3) on a few lines of hand-written IR: a value carried around
a sequential loop through a tensor mapped to NONE, read early in each step and produced again
late in it (FlashAttention-3's P: step k's O += P·V reads the P step k - 1 made, step k makes
the next).  The paper's patterns leave such a tensor materialized (E044); the two carried-value
patterns make it one register tensor that lives across the loop, with the write-after-read
edge its reuse needs."""

from __future__ import annotations

import pytest

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.subst import walk_ops
from cypressc.ir.verify import verify
from cypressc.passes.copy_elimination import copy_elimination

C = N.IConst
D = (N.Dim(C(2), "BLOCK"), N.Dim(C(32), "THREAD"))
PT = (N.IProc("BLOCK"), N.IProc("THREAD"))


def ref(ev: str) -> N.EvRef:
    return N.EvRef(ev, PT)


def alloc(name: str, mem: str = "REGISTER") -> N.Alloc:
    return N.Alloc(name, (C(4),), "f32", mem, dims=D)


def carried(snapshot: bool) -> N.Module:
    """X (NONE) = 1; for 4 steps: Y += X (read through R1, or through a NONE snapshot A first
    when ``snapshot``), X = Y (written through R2); Y is the block's result."""
    read = (
        [
            alloc("A", "NONE"),
            N.Copy("ca", N.TRef("X"), N.TRef("A"), (), D),
            alloc("R1"),
            N.Copy("ci", N.TRef("A"), N.TRef("R1"), (ref("ca"),), D),
        ]
        if snapshot
        else [alloc("R1"), N.Copy("ci", N.TRef("X"), N.TRef("R1"), (), D)]
    )
    war = [ref("ci")] + ([ref("ca")] if snapshot else [])
    body = N.Block(
        (
            *read,
            N.Call("use", "add", (N.TRef("Y"), N.TRef("R1")), (ref("ci"),), D),
            alloc("R2"),
            N.Call("w", "copy", (N.TRef("Y"), N.TRef("R2")), (ref("use"),), D),
            N.Copy("co", N.TRef("R2"), N.TRef("X"), (ref("w"), *war), D),
        ),
        (ref("co"), ref("use")),
    )
    ops = (
        alloc("X", "NONE"),
        alloc("R0"),
        alloc("Y"),
        N.Call("f0", "fill", (N.TRef("R0"), C(1)), (), D),
        N.Copy("o0", N.TRef("R0"), N.TRef("X"), (ref("f0"),), D),
        N.Call("fy", "fill", (N.TRef("Y"), C(0)), (), D),
        N.For("L", "k", C(0), C(4), (ref("o0"), ref("fy")), body, D[:1]),
        N.Call("out", "copy", (N.TRef("Y"), N.TRef("R0")), (N.EvRef("L", PT[:1]),), D),
    )
    return N.Module("t", (), (), N.Block(ops))


def _loop(m: N.Module) -> N.For:
    return next(o for o in walk_ops(m.body) if isinstance(o, N.For))


def test_a_carried_value_becomes_one_register_across_the_loop():
    for snapshot in (False, True):
        m = carried(snapshot)
        verify(m)
        out = copy_elimination(m)
        verify(out)
        lp = _loop(out)
        # nothing copies into or out of X any more, and X is gone
        assert not any(isinstance(o, N.Copy) for o in walk_ops(out.body)), snapshot
        assert not any(isinstance(o, N.Alloc) and o.name in ("X", "A") for o in walk_ops(out.body))
        # the read and the write in the loop name one register, made before the loop
        use, w = (next(o for o in lp.body.ops if getattr(o, "ev", "") == e) for e in ("use", "w"))
        assert use.args[1] == w.args[1]
        reg = use.args[1].name
        assert any(isinstance(o, N.Alloc) and o.name == reg for o in out.body.ops)
        assert not any(isinstance(o, N.Alloc) and o.name == reg for o in lp.body.ops)
        # the producer of the next value waits for the reader of this one (write after read)
        assert any(r.name == "use" for r in w.pre)


def test_a_read_after_the_write_keeps_the_two_tensors():
    """When the step reads R1 again after R2 is produced, one register cannot hold both values:
    the rotation does not apply (and the NONE tensor stays, an E044 for the mapping to fix)."""
    m = carried(False)
    lp = _loop(m)
    late = N.Call("late", "add", (N.TRef("Y"), N.TRef("R1")), (ref("w"),), D)
    ops = list(lp.body.ops)
    ops.insert(len(ops) - 1, late)
    body = N.Block(tuple(ops), lp.body.yields + (ref("late"),))
    new = N.Module(
        "t",
        (),
        (),
        N.Block(
            tuple(
                o if o is not lp else N.For(lp.ev, lp.var, lp.lo, lp.hi, lp.pre, body, lp.dims)
                for o in m.body.ops
            )
        ),
    )
    verify(new)
    with pytest.raises(CypressError, match="tensor %X is mapped to NONE"):
        copy_elimination(new)
