"""The static checks of a variant's expressions and partitions (Cypress paper §3.2;
DESIGN §1): scalar expressions well typed (E035) with tunables used as their kind (E031),
partitions of a tensor with the right block tuple, dimension or mma operand (E034),
instruction atoms that exist (E036), tensor arguments that are tensors or pieces.

:class:`ExprChecks` is a part of :class:`cypressc.lang.checker._Checker` (it calls its
``error``).
"""

from __future__ import annotations

from cypressc.lang import syntax as S
from cypressc.lang.check_env import Binding, VariantEnv, _const_value
from cypressc.lang.atoms import ATOM_FORMS, is_atom_name
from cypressc.lang.kinds import PartKind

__all__ = ["ExprChecks"]


class ExprChecks:
    """Expressions and partitions (a part of :class:`cypressc.lang.checker._Checker`)."""

    # -- expressions -------------------------------------------------------------------
    def scalar(self, e: S.Expr, env: VariantEnv, value: bool = False) -> None:
        """Check that ``e`` is well-typed scalar index arithmetic, or, with ``value``, a
        number for a leaf's scalar operand or a ``float`` parameter (``float`` parameters
        allowed: they are never indices, E035)."""
        if isinstance(e, S.Const):
            return
        if isinstance(e, S.Name):
            b = env.get(e.id)
            if b is None:
                self.error("E026", f"'{e.id}' is not defined", e.loc)
            elif b.kind == "float" and not value:
                self.error(
                    "E035",
                    f"'{e.id}' is a float parameter, not an index",
                    e.loc,
                    "a float is a value for a leaf's scalar operand or a float parameter; "
                    "extents, indices, offsets and int parameters take ints",
                )
            elif b.kind not in ("scalar", "loopvar", "tunable_int", "float"):
                self.error(
                    "E035" if b.kind in ("tensor", "partition") else "E031",
                    f"'{e.id}' is a {b.kind.replace('_', ' ')}, not a number",
                    e.loc,
                )
        elif isinstance(e, S.BinOp):
            self.scalar(e.lhs, env, value)
            self.scalar(e.rhs, env, value)
        elif isinstance(e, S.Call):
            if len(e.args) != 2:
                self.error("E035", f"{e.fn}() takes two arguments", e.loc)
            for a in e.args:
                self.scalar(a, env, value)
        elif isinstance(e, S.Shape):
            b = env.get(e.tensor)
            if b is None:
                self.error("E026", f"'{e.tensor}' is not defined", e.loc)
            elif b.kind != "tensor":
                self.error("E035", f"'{e.tensor}' is not a tensor, it has no shape", e.loc)
            elif not 0 <= e.dim < b.type.rank:  # type: ignore[union-attr]
                self.error(
                    "E035",
                    f"'{e.tensor}' has rank {b.type.rank}; shape[{e.dim}] is out of range",  # type: ignore[union-attr]
                    e.loc,
                )
        else:
            self.error("E035", "expected a scalar expression", e.loc)

    def partition(self, s: S.PartitionDecl, env: VariantEnv) -> Binding | None:
        b = env.get(s.tensor)
        if b is None or b.kind != "tensor":
            self.error(
                "E026" if b is None else "E034",
                f"'{s.tensor}' is not {'defined' if b is None else 'a tensor'}",
                s.loc,
            )
            return None
        t = b.type
        assert t is not None
        if s.kind == PartKind.BLOCKS:
            if len(s.args) != t.rank:
                self.error(
                    "E034",
                    f"partition_by_blocks of rank-{t.rank} '{s.tensor}' needs {t.rank} "
                    f"block extents, got {len(s.args)}",
                    s.loc,
                )
            for a in s.args:
                self.scalar(a, env)
            return Binding("partition", t, s.tensor, PartKind.BLOCKS, index_rank=t.rank, loc=s.loc)
        if s.kind == PartKind.SLICES:
            dim = _const_value(s.args[0])
            if t.rank < 2 or dim is None or not 0 <= dim < t.rank:
                self.error(
                    "E034",
                    f"partition_by_slices needs a dimension of a tensor of rank >= 2 "
                    f"('{s.tensor}' has rank {t.rank})",
                    s.loc,
                )
                return None
            return Binding(
                "partition",
                S.TensorType(t.rank - 1, t.dtype),
                s.tensor,
                PartKind.SLICES,
                index_rank=1,
                loc=s.loc,
            )
        atom_e, proc_e, op_e = s.args
        self.atom_arg(atom_e, env)
        if isinstance(proc_e, S.Name):
            pb = env.get(proc_e.id)
            if pb is None and proc_e.id not in S.PROCESSORS:
                self.error(
                    "E026",
                    f"'{proc_e.id}' is not defined",
                    proc_e.loc,
                    f"processors: {', '.join(S.PROCESSORS)}",
                )
            elif pb is not None and pb.kind != "tunable_processor":
                self.error(
                    "E031",
                    f"'{proc_e.id}' must be a processor (tunable(processor) or WARP/THREAD)",
                    proc_e.loc,
                )
        else:
            self.error("E034", "the processor of partition_by_mma must be a name", proc_e.loc)
        op = op_e.value if isinstance(op_e, S.Str) else "C"
        if t.rank != 2 and not (t.rank == 1 and op == "C"):
            self.error(
                "E034",
                'partition_by_mma splits rank-2 tiles (and rank-1 per-row vectors as "C")',
                s.loc,
            )
        return Binding("partition", t, s.tensor, PartKind.MMA, operand=op, index_rank=1, loc=s.loc)

    def atom_arg(self, e: S.Expr, env: VariantEnv) -> None:
        if isinstance(e, S.Atom):
            if not is_atom_name(e.name):
                self.error(
                    "E036",
                    f"unknown instruction atom '{e.name}'",
                    e.loc,
                    f"atoms are {ATOM_FORMS}, written as a call: WGMMA_64x256x16()",
                )
        elif isinstance(e, S.Name):
            b = env.get(e.id)
            if b is None:
                self.error("E026", f"'{e.id}' is not defined", e.loc)
            elif b.kind != "tunable_atom":
                self.error(
                    "E031",
                    f"'{e.id}' is not an atom",
                    e.loc,
                    "declare it with tunable(atom) or write WGMMA_64xNx16()",
                )
        else:
            self.error("E036", "expected an instruction atom such as WGMMA_64x256x16()", e.loc)

    def tensor_arg(self, e: S.Expr, env: VariantEnv) -> tuple[S.TensorType, str] | None:
        """Type and root tensor of a tensor-valued argument (a tensor or a piece)."""
        if isinstance(e, S.Name):
            b = env.get(e.id)
            if b is None:
                self.error("E026", f"'{e.id}' is not defined", e.loc)
                return None
            if b.kind == "tensor":
                return b.type, e.id  # type: ignore[return-value]
            if b.kind == "partition":
                self.error(
                    "E023", f"'{e.id}' is a partition; pass one piece of it, e.g. {e.id}[i]", e.loc
                )
                return None
            return None
        if isinstance(e, S.Piece):
            b = env.get(e.partition)
            if b is None:
                self.error("E026", f"'{e.partition}' is not defined", e.loc)
                return None
            if b.kind != "partition":
                self.error(
                    "E034",
                    f"'{e.partition}' is not a partition and cannot be indexed",
                    e.loc,
                    "partition it first with partition_by_blocks / partition_by_mma",
                )
                return None
            if len(e.indices) != b.index_rank:
                self.error(
                    "E034",
                    f"partition '{e.partition}' takes {b.index_rank} index(es), got "
                    f"{len(e.indices)}",
                    e.loc,
                )
            for i in e.indices:
                self.scalar(i, env)
            return b.type, b.tensor  # type: ignore[return-value]
        return None
