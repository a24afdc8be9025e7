"""Which tunables of *this* program size what: the words of resource hints (E046, E047).

A resource error is only actionable when its hint names knobs the program really has.
Every compile-time extent of the IR carries the mapping values it was computed from
(:class:`~cypressc.ir.origin.Origin` on each :class:`~cypressc.ir.nodes.IConst`, paper
§3.3's tunables bound by the mapping), so the tunables that size a SHARED (REGISTER)
tensor are the ``int`` origins of its shape, and the tunables that count a block's
warpgroups are the origins of the WARPGROUP dimensions' extents.  The latter are reported
apart: raising them shrinks each warpgroup's tile rather than growing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.ir import nodes as N
from cypressc.ir.origin import origins_of
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem, Proc

__all__ = ["TunableRoles", "tunable_roles", "fmt_tunables"]

Tunables = dict[tuple[str, str], None]  # ordered set of (tunable, instance)


@dataclass
class TunableRoles:
    """``int`` tunables by role, each an ordered set of (tunable name, instance name)."""

    shared: Tunables = field(default_factory=dict)
    register: Tunables = field(default_factory=dict)
    warpgroups: Tunables = field(default_factory=dict)

    def tiles(self, mem: str) -> Tunables:
        """Tunables that size tensors in ``mem`` (SHARED or REGISTER), warpgroup counts left out."""
        src = self.shared if mem == Mem.SHARED else self.register
        return {k: None for k in src if k not in self.warpgroups}


def _ints(*exprs: object) -> Tunables:
    """The int tunables among the origins of ``exprs``, in task-tree order (outermost first)."""
    found = sorted(
        (
            o
            for o in origins_of(*exprs)
            if isinstance(o.value, int) and not isinstance(o.value, bool)
        ),
        key=lambda o: o.seq,
    )
    return {(o.key, o.instance): None for o in found}


def tunable_roles(m: N.Module) -> TunableRoles:
    """The int tunables of module ``m`` that size its shared and register tensors, and those
    that set its number of warpgroups."""
    roles = TunableRoles()
    wg: list[N.IExpr] = []
    for o in walk_ops(m.body):
        if isinstance(o, N.Alloc) and o.mem == Mem.SHARED:
            roles.shared.update(_ints(o.shape))
        elif isinstance(o, N.Alloc) and o.mem == Mem.REGISTER:
            roles.register.update(_ints(o.shape))
        wg += [d.extent for d in getattr(o, "dims", ()) if d.proc == Proc.WARPGROUP]
    roles.warpgroups.update(_ints(wg))
    return roles


def fmt_tunables(ts: Tunables, last: str = "or") -> str:
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
