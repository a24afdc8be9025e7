"""``cuda-lowering`` (paper §4.2.6) of the leaves over accumulator rows: the online
softmax's row statistics (FlashAttention, paper §5.3).  A rank-1 register tensor laid out by
``partition_by_mma(v, ATOM, WARP, "C")`` is a per-row vector (:class:`~cypressc.backend.plan.RowVector`);
the row reductions combine the 4 lanes of a quad with shuffles, the row-broadcast leaves
read each thread's own rows.  Mixed into :class:`cypressc.backend.lower._Lower`."""

from __future__ import annotations

from cypressc.backend import plan as P
from cypressc.backend.refusal import refuse as _refuse
from cypressc.ir import nodes as N
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.lang.intrinsics import IntrinsicKind, leaf_of
from cypressc.lang.kinds import Mem, OperandKind, Proc

__all__ = ["RowLowering"]


class RowLowering:
    """Row-statistics code (needs ``self.sym``, ``self.k``, ``self.en``, ``self.origin``,
    ``self._mma_rank``, ``self._fragment`` and ``self._whole_warpgroups`` of :class:`_Lower`)."""

    def _is_row_vector(self, v) -> bool:
        """A rank-1 register tensor laid out by an mma partition: one value per row."""
        return isinstance(v, N.TRef) and self._mma_rank(v.name) == 1

    def _row_vector(self, plan: P.KernelPlan, v: N.TRef) -> P.RowVector:
        a = self.sym.allocs[v.name]
        for x in plan.row_vectors:
            if x.name == a.name:
                return x
        mmas = self.origin(a.layout)[3]
        part = mmas[0][0]
        rows = static(self.sym.shape(part.base)[0])
        if part.params[1] != Proc.WARP or a.dtype != "f32" or rows is None or rows % 64:
            _refuse(
                f"per-row vector %{a.name}: an f32 vector of a warpgroup's rows laid out by "
                'partition_by_mma(..., WARP, "C") (a multiple of 64 rows)'
            )
        x = P.RowVector(a.name, rows)
        plan.row_vectors.append(x)
        return x

    def _row_store(self, plan: P.KernelPlan, o: N.Copy) -> P.RowStore:
        """The copy-out of a per-row vector into its rows of a global f32 vector after the main
        loop (FlashAttention's log-sum-exp)."""
        rv = self._row_vector(plan, o.src)
        root, org, keep, mmas = self.origin(o.dst)
        a = self.sym.allocs[root]
        kept = [d for d, k in enumerate(keep) if k]
        if a.mem != Mem.GLOBAL or a.dtype != "f32" or not mmas or kept != [len(keep) - 1]:
            _refuse(
                f"copy of the per-row vector %{rv.name} into {fmt_view(o.dst)}: the backend stores "
                "per-row vectors into the rows of a global f32 vector laid out like them "
                '(partition_by_mma(..., "C"))'
            )
        st = P.RowStore(
            self.en(o.ev),
            rv.name,
            root,
            self.k(org[-1]),
            self._batch(root, org, keep),
            self._when(root),
        )
        plan.epilogue.append(st)
        return st

    def _row_op(self, plan: P.KernelPlan, o: N.Call, sec: str) -> P.RowOp:
        """A leaf on per-row vectors and f32 accumulator fragments of one warpgroup tile (one
        whose ``over_rows`` holds, or a fill or copy of a per-row vector)."""
        fn = leaf_of(o)
        self._whole_warpgroups(o)
        args: list[tuple[str, str]] = []
        rows: set[int] = set()
        value = None
        for a, rule in zip(o.args, fn.operands):
            if rule.kind == OperandKind.SCALAR:
                value = self.k(a)
            elif self._is_row_vector(a):
                rv = self._row_vector(plan, a)
                args.append(("row", rv.name))
                rows.add(rv.rows)
            elif isinstance(a, N.TRef) and self.sym.mem(a) == Mem.REGISTER:
                f = self._fragment(plan, a)
                if f.dtype != "f32":
                    _refuse(
                        f"{o.fn}() on the {f.dtype} fragment %{f.name}: row leaves take f32 accumulators"
                    )
                args.append(("frag", f.name))
                rows.add(f.rows)
            else:
                _refuse(
                    f"{o.fn}() on {fmt_view(a)}: row leaves take register per-row vectors and fragments"
                )
        if len(rows) != 1:
            _refuse(
                f"{o.fn}() over tiles of {sorted(rows)} rows: its operands must cover the same rows"
            )
        if fn.kind is IntrinsicKind.COPY and [k for k, _ in args] != ["row", "row"]:
            _refuse("copy between a per-row vector and a fragment")
        st = P.RowOp(self.en(o.ev), fn, tuple(args), rows.pop() // 64, value)
        if sec != "loop":
            (plan.prologue if sec == "before" else plan.epilogue).append(st)
        return st
