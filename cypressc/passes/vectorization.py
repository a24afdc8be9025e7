"""Pass 2, ``vectorization`` (Cypress paper §4.2.2, Fig. 9).

Flattens the ``pfor`` loops that are implicit in the GPU's execution model — over
BLOCKs (the grid), WARPGROUPs, WARPs and THREADs — into SIMT code:

* the loop variable becomes a processor index (``block_id.x``, ``warp_id()``, …);
* every op inside gets the loop's dimension appended to its ``dims``, so its event
  becomes an array ``[(n, PROC), …]`` ("promotion");
* a use of an event is indexed point-wise (``e[warp_id()]``) along every dimension
  created by a loop that encloses both the use and the definition, and broadcast
  (``e[:]``) along the others — point-wise dependences stay point-wise and the
  post-loop synchronization ``e[:]`` stays a broadcast;
* a flattened loop's own event is replaced by its body's yields, and its
  precondition moves onto the body's ops that waited only for the loop to start.

``pfor`` loops at HOST level (e.g. over a batch) become further grid dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cypressc.ir import nodes as N
from cypressc.ir.subst import subst_op
from cypressc.lang.kinds import Proc
from cypressc.passes.base import ModulePass

__all__ = ["vectorize"]


@dataclass(frozen=True)
class _Ctx:
    dims: tuple[N.Dim, ...] = ()
    origins: tuple[str, ...] = ()  # the pfor that created each dim
    procs: tuple[N.IProc, ...] = ()


class _Vec:
    def __init__(self) -> None:
        self.ev_ctx: dict[str, _Ctx] = {}
        self.expand: dict[str, tuple[str, ...]] = {}  # flattened pfor -> events it stands for

    def names(self, r: N.EvRef) -> tuple[str, ...]:
        if r.name in self.expand:
            return self.expand[r.name]
        return (r.name,)

    def refs(self, refs, ctx: _Ctx) -> tuple[N.EvRef, ...]:
        out: list[N.EvRef] = []
        for r in refs:
            for name in self.names(r):
                d = self.ev_ctx.get(name, _Ctx())
                idx = tuple(p if o in ctx.origins else None for o, p in zip(d.origins, d.procs))
                nr = N.EvRef(name, idx)
                if nr not in out:
                    out.append(nr)
        return tuple(out)

    def block(
        self, b: N.Block, ctx: _Ctx, sub: dict[str, N.IExpr], entry: tuple[N.EvRef, ...], grid: int
    ) -> tuple[list[N.Op], tuple[N.EvRef, ...]]:
        """Flatten one block; ``entry`` are the (unindexed) events that ops with no
        precondition must wait for (the preconditions of enclosing flattened loops)."""
        ops: list[N.Op] = []
        for op in b.ops:
            op = subst_op(op, sub) if not isinstance(op, (N.For, N.PFor)) else op
            if isinstance(op, N.PFor):
                op = replace(op, lo=subst_op_expr(op.lo, sub), hi=subst_op_expr(op.hi, sub))
                proc = Proc.BLOCK if op.proc in (Proc.HOST, Proc.BLOCK) else op.proc
                pidx = N.IProc(proc, grid if proc == Proc.BLOCK else 0)
                inner = _Ctx(
                    ctx.dims + (N.Dim(N.ibin("-", op.hi, op.lo), proc),),
                    ctx.origins + (op.ev,),
                    ctx.procs + (pidx,),
                )
                isub = dict(sub)
                isub[op.var] = N.ibin("+", op.lo, pidx)
                pre = tuple(_subst_refs(op.pre, sub))
                body_entry = (entry if not pre else ()) + pre
                body_ops, yields = self.block(
                    op.body, inner, isub, body_entry, grid + (proc == Proc.BLOCK)
                )
                ops += body_ops
                names: list[str] = []
                for y in yields or body_entry:
                    for n in self.names(y):
                        if n not in names:
                            names.append(n)
                self.expand[op.ev] = tuple(names)
                continue
            if isinstance(op, N.For):
                op = replace(op, lo=subst_op_expr(op.lo, sub), hi=subst_op_expr(op.hi, sub))
                pre = tuple(_subst_refs(op.pre, sub)) or entry
                self.ev_ctx[op.ev] = ctx
                body_ops, yields = self.block(op.body, ctx, sub, (), grid)
                ops.append(
                    replace(
                        op,
                        pre=self.refs(pre, ctx),
                        dims=ctx.dims,
                        body=N.Block(tuple(body_ops), self.refs(yields, ctx)),
                    )
                )
                continue
            if isinstance(op, (N.Copy, N.Call)):
                pre = op.pre or entry
                self.ev_ctx[op.ev] = ctx
                ops.append(replace(op, pre=self.refs(pre, ctx), dims=ctx.dims))
                continue
            ops.append(replace(op, dims=ctx.dims))
        return ops, tuple(b.yields)


def subst_op_expr(e: N.IExpr, sub: dict[str, N.IExpr]) -> N.IExpr:
    from cypressc.ir.subst import subst_expr

    return subst_expr(e, sub)


def _subst_refs(refs, sub):
    from cypressc.ir.subst import subst_expr

    for r in refs:
        yield N.EvRef(r.name, tuple(None if i is None else subst_expr(i, sub) for i in r.idx))


def vectorize(m: N.Module) -> N.Module:
    """Flatten implicit ``pfor`` loops into processor-indexed SIMT code (paper §4.2.2).

    Takes and returns a :class:`~cypressc.ir.nodes.Module`; after it, no ``pfor``
    remains and every op's ``dims`` names the processors it is replicated over.
    """
    v = _Vec()
    ops, _ = v.block(m.body, _Ctx(), {}, (), 0)
    return replace(m, body=N.Block(tuple(ops), ()))


class Vectorization(ModulePass):
    """The pass object of :func:`vectorize`."""

    name, section = "vectorization", "§4.2.2"

    def apply(self, m: N.Module) -> N.Module:
        return vectorize(m)
