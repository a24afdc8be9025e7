"""Which tunables of *this* program size what: the words of resource hints (E046, E047).

A resource error is only actionable when its hint names knobs the program really has.
:func:`tunable_roles` follows every tensor down the instantiated task tree (paper §3.3)
and records which ``int`` tunables — each with the instance that binds it — its extent
depends on: a ``partition_by_blocks`` size, a ``make_tensor`` extent, a ``let`` computed
from them, or the shape of the tensor it was cut from.  A tensor that reaches an instance
in SHARED (or REGISTER) memory makes its tunables *shared* (*register*) tile tunables.
Tunables that count the warpgroups of a block (the extent of a ``prange`` whose launches
run on WARPGROUP instances) are reported separately: raising them shrinks each
warpgroup's tile rather than growing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.lang import syntax as S
from cypressc.mapping.tasktree import TaskNode, TaskTree

__all__ = ["TunableRoles", "tunable_roles", "fmt_tunables"]

Origin = dict[tuple[str, str], None]  # ordered set of (tunable, instance)


@dataclass
class TunableRoles:
    """``int`` tunables by role, each an ordered set of (tunable name, instance name)."""

    shared: Origin = field(default_factory=dict)
    register: Origin = field(default_factory=dict)
    warpgroups: Origin = field(default_factory=dict)

    def tiles(self, mem: str) -> Origin:
        """Tunables that size tensors in ``mem`` (SHARED or REGISTER), warpgroup counts left out."""
        src = self.shared if mem == "SHARED" else self.register
        return {k: None for k in src if k not in self.warpgroups}


def _union(*parts: Origin | None) -> Origin:
    out: Origin = {}
    for p in parts:
        if p:
            out.update(p)
    return out


class _Env:
    """Origins of one variant's names: a scalar's, and a tensor's (or partition's pieces')
    per dimension."""

    def __init__(self) -> None:
        self.scalars: dict[str, Origin] = {}
        self.tensors: dict[str, list[Origin]] = {}

    def expr(self, e: S.Expr) -> Origin:
        """The origin of a scalar expression."""
        if isinstance(e, S.Name):
            return dict(self.scalars.get(e.id) or {})
        if isinstance(e, S.Shape):
            dims = self.tensors.get(e.tensor) or []
            return dict(dims[e.dim]) if 0 <= e.dim < len(dims) else {}
        if isinstance(e, S.BinOp):
            return _union(self.expr(e.lhs), self.expr(e.rhs))
        if isinstance(e, S.Call):
            return _union(*(self.expr(a) for a in e.args))
        return {}

    def tensor(self, e: S.Expr) -> list[Origin] | None:
        """Per-dimension origins of a tensor argument (a name or a piece), None for a scalar."""
        if isinstance(e, S.Piece):  # indices pick a piece; the partition fixes its shape
            return self.tensors.get(e.partition)
        if isinstance(e, S.Name) and e.id in self.tensors:
            return self.tensors[e.id]
        return None


def tunable_roles(tree: TaskTree) -> TunableRoles:
    """Walk ``tree`` from its root and classify the ``int`` tunables bound on its instances."""
    roles = TunableRoles()

    def visit(node: TaskNode, inherited: dict[str, Origin | list[Origin]]) -> None:
        v, inst = node.variant, node.instance.instance
        env = _Env()
        for p in v.params:
            got = inherited.get(p.name)
            if isinstance(p.type, S.TensorType):
                dims = got if isinstance(got, list) else [{} for _ in range(p.type.rank)]
                env.tensors[p.name] = dims
                for name, o in zip(p.type.dims or (), dims):
                    env.scalars[name] = _union(env.scalars.get(name), o)
            else:
                env.scalars[p.name] = dict(got) if isinstance(got, dict) else {}
        for s in S.walk(v.body):
            if isinstance(s, S.Tunable) and s.kind == "int":
                env.scalars[s.name] = {(s.name, inst): None}
            elif isinstance(s, S.Let):
                env.scalars[s.name] = env.expr(s.value)
            elif isinstance(s, S.MakeTensor):
                env.tensors[s.name] = [env.expr(d) for d in s.dims]
            elif isinstance(s, S.PartitionDecl):
                base = env.tensors.get(s.tensor) or []
                if s.kind == "blocks":  # a piece is one block: its extents are the sizes
                    env.tensors[s.name] = [env.expr(a) for a in s.args]
                elif s.kind == "slices" and s.args and isinstance(s.args[0], S.Const):
                    env.tensors[s.name] = [o for d, o in enumerate(base) if d != s.args[0].value]
                else:  # mma: each piece dimension is a fixed fraction of the tile's
                    env.tensors[s.name] = list(base)
        for p in v.tensor_params:
            mem = node.mems.get(p.name)
            if mem in ("SHARED", "REGISTER"):
                (roles.shared if mem == "SHARED" else roles.register).update(
                    _union(*env.tensors[p.name]))
        targets = {id(stmt): child for stmt, child in node.children}
        for s in S.walk(v.body):
            if isinstance(s, S.Loop) and s.kind == "prange" and node.proc != "WARPGROUP" and any(
                    isinstance(x, S.Launch) and id(x) in targets and targets[id(x)].proc == "WARPGROUP"
                    for x in S.walk(s.body)):
                for e in s.extents:
                    roles.warpgroups.update(env.expr(e))
        for stmt, child in node.children:
            args: dict[str, Origin | list[Origin]] = {}
            for p, a in zip(child.variant.params, stmt.args):
                t = env.tensor(a) if isinstance(p.type, S.TensorType) else None
                args[p.name] = list(t) if t is not None else env.expr(a)
            visit(child, args)

    visit(tree.root, {})
    return roles


def fmt_tunables(ts: Origin, last: str = "or") -> str:
    """``{(U, host), (V, host), (W, block)}`` -> ``U, V (host) or W (block)``; instances that
    bind the same tunables are listed together: ``WGS (mma_block, clear_block)``."""
    by_inst: dict[str, list[str]] = {}
    for name, inst in ts:
        by_inst.setdefault(inst, []).append(name)
    groups: dict[tuple[str, ...], list[str]] = {}
    for inst, names in by_inst.items():
        groups.setdefault(tuple(names), []).append(inst)
    parts = [f"{', '.join(names)} ({', '.join(insts)})" for names, insts in groups.items()]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} {last} {parts[-1]}"
