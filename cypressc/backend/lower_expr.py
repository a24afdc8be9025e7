"""``cuda-lowering`` (paper §4.2.6) of what a statement's operands are written over: IR index
expressions over the kernel's variables (Lets inlined, the main loop's, tile's, warpgroup's and
HOST loop's indices), pipeline positions (stage, phase) from the role's running pipeline
state, event names for comments, and a view's root, origin and mma partitions.  Mixed into
:class:`cypressc.backend.lower._Lower`."""

from __future__ import annotations

from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar, mentions
from cypressc.backend.refusal import refuse as _refuse
from cypressc.backend.sync_lower import KBASE, at_step, counted
from cypressc.ir import nodes as N
from cypressc.ir.analysis import element_origin
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.lang.kinds import Mem, Proc

__all__ = ["ExprLowering"]


class ExprLowering:
    """Expressions, positions and views (needs ``self.sym``, ``self.lets``, ``self.names``,
    ``self.lp``, ``self.loop_no``, ``self.kvar``, ``self.kname``, ``self.section``,
    ``self.role``, ``self.persistent``, ``self.plan``, ``self.thread_index`` and the HOST
    loop's ``self.host_var``, ``self.host_lo``, ``self.host_dim`` of :class:`_Lower`)."""

    def en(self, ev: str) -> str:
        """The event as `cypressc explain` prints it, for comments in the CUDA."""
        return self.names.get(ev, ev)

    # -- expressions -------------------------------------------------------------------
    def k(self, e: N.IExpr) -> N.IExpr:
        """IR expression ``e`` over the kernel's variables (:mod:`cypressc.backend.cexpr` prints
        it): Lets inlined, the main loop's bound ``num_k`` (its trip count, computed once per
        kernel) and its variable ``kb`` (``kn`` for a load issued ahead), a BLOCK index the
        tile coordinate ``b<d>``, the WARPGROUP index ``cw``, a WARP/THREAD index inside SIMT
        code its thread expression, the HOST loop's variable its grid coordinate.  Nothing is
        folded or reordered.  Refuses an address over any other processor index."""
        if self.lp is not None and e == self.lp.hi and static(self.lp.lo) == 0:
            return KVar(self._loop_var("num_k"))
        if isinstance(e, N.IProc):
            if e.proc == Proc.BLOCK:
                return KVar(f"b{e.dim}")
            if e.proc == Proc.WARPGROUP:
                return KVar("cw")
            if e.proc in self.thread_index:
                return self.thread_index[e.proc]
            _refuse(f"an address depends on the {e.proc.lower()} index")
        if isinstance(e, N.IVar):
            if e.name in self.lets:
                return self.k(self.lets[e.name])
            if e.name == self.kvar:
                return KVar(self.kname)
            if e == KBASE:
                return KVar(self._loop_var("kbase"))
            if e.name == self.host_var:
                b = KVar(f"b{self.host_dim}")
                return b if static(self.host_lo) == 0 else N.IBin("+", self.k(self.host_lo), b)
            return e
        if isinstance(e, N.IBin):
            return N.IBin(e.op, self.k(e.a), self.k(e.b))
        return e

    def _loop_var(self, base: str) -> str:
        """The kernel variable ``base`` (num_k, pipe, kbase) of the main loop being lowered."""
        return base + P.KernelPlan.loop_suffix(self.loop_no)

    def pos(self, e: N.IExpr, after: bool | None = None) -> N.IExpr:
        """A pipeline position of the IR (stage index, phase parity) over the kernel's
        variables: the role's running pipeline state, or the block's running step in a
        persistent block (see :mod:`cypressc.backend.sync_lower`); ``after`` (default: the
        section being lowered) says the position is counted from the loop's end."""
        if after is None:
            after = self.section == "after"
        if self.lp is not None and self.lp.pipeline and static(self.lp.lo) == 0:
            pipe = "pipe_ahead" if self.kname == "kn" else self._loop_var("pipe")
            before = self.lp.lo if self.section == "before" else None
            out = counted(e, self.kvar, self.lp.hi, self.lp.pipeline, after, pipe, before=before)
            if out is not None:
                self.plan.counters.add((self.role, pipe))
                return out
        if self.persistent and self.lp is not None:
            out = self.k(at_step(e, self.kvar, self.lp.hi, after))
            if mentions(out, self._loop_var("kbase")):
                self.plan.counters.add((self.role, self._loop_var("kbase")))
            return out
        return self.k(e)

    def fragments_of(self, edges) -> tuple[str, ...]:
        """The register fragments among the tensors of ``edges`` (what a wgmma fence orders)."""
        # whether or not an op lowered so far used it: a wait may precede the first use in the step
        return tuple(dict.fromkeys(e.tensor for e in edges if self._mma_rank(e.tensor) == 2))

    def _mma_rank(self, name: str) -> int | None:
        """The rank of register tensor ``name`` when an mma partition lays it out (2: a wgmma
        fragment, 1: a per-row vector), else None."""
        a = self.sym.allocs.get(name)
        if a is None or a.mem != Mem.REGISTER or a.layout is None or not self.origin(a.layout)[3]:
            return None
        return len(a.shape)

    def origin(self, v: N.View) -> tuple[str, list[N.IExpr], list[bool], list]:
        """Root, element origin per root dim, kept dims, and the mma partitions on the way."""
        return element_origin(self.sym, v)

    def shape2(self, v: N.View) -> tuple[int, int]:
        s = [static(x) for x in self.sym.shape(v)]
        if len(s) != 2 or None in s:
            _refuse(f"{fmt_view(v)} is not a static 2-D tile")
        return s[0], s[1]  # type: ignore[return-value]
