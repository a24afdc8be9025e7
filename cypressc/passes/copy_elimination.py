"""Pass 3, ``copy-elimination`` (Cypress paper §4.2.3, Fig. 10).

Rewrite patterns that remove the copies the copy-in/copy-out discipline introduced,
applied to a fixpoint in this order (synchronization-removing patterns first):

1. **alias** (self copy, Fig. 10d): a fresh tensor in the same memory as the view it
   was copied from (or mapped to NONE) *is* that view: substitute it, and the copies
   become ``copy(t, t)``, removed with their events forwarded to their preconditions
   (``b[e2/e1]``) — a collapsed ``e[:]`` survives, as it must.  A callee's fresh SHARED
   tensor copied out whole into its caller's NONE tensor of the same processors (a table
   the callee fills) makes the caller's tensor SHARED: the mapping put the data there;
2. **spill hoisting** (Fig. 10b): a copy-in at the top of a ``for`` body and the
   matching copy-out at its bottom move to the preamble and postamble;
3. **spill elimination** (Fig. 10a): a copy-out into a piece followed by a copy-in of
   the same piece (same partition) is removed *with* the synchronization between
   them: users wait point-wise on the writer instead of on the collapsed event;
4. **duplicate elimination** (Fig. 10c): a second copy of the same view into the same
   memory reuses the first;
5. dead copies into NONE tensors (never read, or written again by a later copy-out of the
   same source before any read) and unused pure ops are deleted;
6. **reduce forwarding** (issue #38): a ``copy.add`` out of a NONE private copy whose one
   writer copies a materialized tensor into it becomes that writer, adding into the view
   (:mod:`cypressc.passes.copy_reduce`).

A tensor mapped to NONE that is still read or written by a copy or a leaf afterwards
cannot be left unmaterialized: that is a located error (E044), at the ``mems`` entry that
keeps it NONE, with a note at the launch whose copy needs it.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir.analysis import names_in_use, rename_tensors
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem
from cypressc.passes.base import ModulePass
from cypressc.passes.copy_carried import _try_rotate, _try_snapshot
from cypressc.passes.copy_index import _LAST
from cypressc.passes.copy_none import _check_none
from cypressc.passes.copy_patterns import _try_alias, _try_hoist, _try_spill
from cypressc.passes.copy_redundant import _try_dead, _try_duplicate, _try_self
from cypressc.passes.copy_reduce import _try_reduce_forward

__all__ = ["copy_elimination", "rewrite_to_fixpoint", "NotConverged", "PATTERNS"]


# the carried-value patterns come last: they only fire on what the paper's patterns leave
PATTERNS = (
    _try_self,
    _try_alias,
    _try_hoist,
    _try_spill,
    _try_duplicate,
    _try_dead,
    _try_snapshot,
    _try_rotate,
    _try_reduce_forward,
)


class NotConverged(RuntimeError):
    """The rewrite patterns kept firing past the bound of :func:`rewrite_to_fixpoint`: a
    compiler bug (the pass manager reports it as an internal error of copy-elimination)."""


def rewrite_to_fixpoint(m: N.Module) -> tuple[N.Module, int]:
    """Apply :data:`PATTERNS` (the first that fires, then from the start again) until none
    fires; return the module and the number of rewrites.  The bundled programs take about
    one rewrite per three ops of the vectorized module; past ``2 * ops + 64`` rewrites the
    patterns are cycling, which raises :class:`NotConverged` rather than stopping silently
    with whatever module the last rewrite left."""
    limit = 2 * sum(1 for _ in walk_ops(m.body)) + 64
    for rounds in range(limit + 1):
        for pat in PATTERNS:
            nm = pat(m)
            if nm is not None:
                m = nm
                break
        else:
            return m, rounds
    raise NotConverged(
        f"copy-elimination: the rewrite patterns did not reach a fixpoint in {limit} rewrites"
    )


def copy_elimination(m: N.Module) -> N.Module:
    """Remove copy-in/copy-out copies and the synchronization they imply (paper §4.2.3).

    Raises :class:`CypressError` E044 when a tensor mapped to NONE would have to be
    materialized, :class:`NotConverged` (an internal error) when the rewrites do not reach a
    fixpoint.
    """
    try:
        m, _ = rewrite_to_fixpoint(m)
        _check_none(m)
    finally:
        _LAST.ix = None  # the module's index is not kept past the pass
    return rename_tensors(m, program_names(m))


def program_names(m: N.Module) -> dict[str, str]:
    """New names for the tensors that hold a tensor of the program, so the kernel's arrays read
    as the program does, not after the leaf task's parameter that first materialized them:

    - an allocation in REGISTER laid out as a piece of a NONE tensor (the program's ``Oacc``,
      ``S``, ``m``, which copy elimination left unmaterialized) is ``Oacc_reg`` (not
      ``C_clear_thread``);
    - an allocation in SHARED laid out as a tile of an entry parameter (its ``layout`` a
      piece of a partition of ``K``, through any partitions of partitions) is ``K_smem``
      (not ``B_mma_qk``, the mma task's operand ``B``).

    ``_1``, ``_2``, … tell apart several that hold one tensor."""
    from cypressc.passes.dependence_state import Namer

    ops = list(walk_ops(m.body))
    parts = {o.name: o for o in ops if isinstance(o, N.Partition)}
    allocs = {o.name: o for o in ops if isinstance(o, N.Alloc)}
    names = Namer()
    names.used = names_in_use(m)
    new: dict[str, str] = {}
    for a in allocs.values():
        if a.mem != Mem.REGISTER or a.layout is None:
            continue
        root = allocs.get(N.view_root(a.layout, parts))
        if root is not None and root.mem == Mem.NONE:
            new[a.name] = names.fresh(f"{root.name}_reg")
    params = {p.name for p in m.params}
    for a in allocs.values():
        if a.mem == Mem.SHARED and a.layout is not None:
            root = N.view_root(a.layout, parts)
            if root in params:
                new[a.name] = names.fresh(f"{root}_smem")
    return new


class CopyElimination(ModulePass):
    """The pass object of :func:`copy_elimination`."""

    name, section = "copy-elimination", "§4.2.3"

    def apply(self, m: N.Module) -> N.Module:
        return copy_elimination(m)
