"""The mapping errors dependence analysis finds as it lowers launches and leaf calls
(Cypress paper §4.2.1), each located at the mapping value that caused it: a piece of a
``partition_by_mma`` passed to a task on another level (E041), a leaf operand in a memory
its leaf function cannot read (E043), and wgmma atoms whose N is not the accumulator
tile's width, gathered over the walk and reported together (E040).  And one program
error only the walk sees: a task's private copy of a ``reduces=`` argument read before it
is written (E052, :class:`ReductionChecks`).

:class:`MappingChecks` is a part of :class:`cypressc.passes.dependence_analysis._DA` (it
reads its ``tree``, ``parts``, ``allocs``, ``sites``, ``part_procs``, ``misfits`` and
``issuers``); so is :class:`ReductionChecks` (its ``undefined``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.abi.dtypes import DTYPES
from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.origin import Origin, blame
from cypressc.ir.shapes import static
from cypressc.lang import syntax as S
from cypressc.lang.atoms import atom as lookup_atom
from cypressc.lang.atoms import atom_k, atom_name, is_atom_name
from cypressc.lang.kinds import OperandKind, PartKind, Proc
from cypressc.mapping.tasktree import TaskNode
from cypressc.passes.dependence_state import _Scope
from cypressc.passes.levels import here

__all__ = ["MappingChecks", "ReductionChecks"]


@dataclass
class _Misfit:
    """A wgmma leaf call ``stmt`` in ``node`` issuing ``atom`` on a ``rows x cols`` warpgroup
    tile whose column count ``cols_expr`` (with its tunables' origins) is not the atom's N;
    ``origin`` is the mapping value that chose the atom (empty for a literal; for an atom
    derived from another tile, that tile's width tunables, and ``derived`` names the atom
    tunable and the instance that derived it: :mod:`cypressc.passes.atom_derivation`)."""

    stmt: S.LeafCall
    node: TaskNode
    atom: str
    rows: int | None
    cols: int
    cols_expr: N.IExpr
    origin: tuple[Origin, ...]
    derived: tuple[str, str] | None = None

    def fit(self) -> str | None:
        """The atom of the same M and K whose N is the tile's width, if there is one."""
        a = lookup_atom(self.atom)
        name = atom_name(a.m, self.cols, a.k)
        return name if is_atom_name(name) else None

    def shape(self) -> str:
        return f"{self.rows if self.rows is not None else '?'}x{self.cols}"

    def issuer(self) -> str:
        return f"instance '{self.node.instance.instance}'"


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


class MappingChecks:
    """Checks of the mapping during the walk (a part of
    :class:`cypressc.passes.dependence_analysis._DA`)."""

    def _check_piece_level(
        self, s: S.Launch, sc: _Scope, child: TaskNode, arg: S.Expr, v: N.View
    ) -> None:
        """E041 when a task takes a piece of a ``partition_by_mma`` laid out for another
        level: piece ``i`` of a partition at WARP is what warp ``i`` holds (at THREAD, lane
        ``i``), so the task that gets it must run on WARP (THREAD).  Left alone, the tasks
        sharing the tile would lay it out differently (a NONE accumulator that then cannot
        be eliminated, E044, far from the cause).

        Two mapping values disagree: the launched instance's ``proc`` and the partition's
        processor (a ``tunable(processor)``).  When the launched instance runs on the level
        right below the instance that partitions, where the tree's levels put it, the
        partition's processor is blamed; otherwise the launched instance's ``proc``."""
        if not isinstance(v, N.Piece):
            return
        part = self.parts[v.partition]
        level = str(part.params[1]) if part.kind == PartKind.MMA else None
        if level is None or child.proc == level:
            return
        m = self.tree.machine
        kid, site = child.instance.instance, self.sites.partitions[v.partition]
        name = arg.partition if isinstance(arg, S.Piece) else v.partition
        parent = next(
            i.proc for i in self.tree.mapping.spec.instances if i.instance == site.instance
        )
        depth = m.level(parent).depth + 1
        below = m.processors[depth].name if depth < len(m.processors) else None
        proc_origin = self.part_procs.get(v.partition, ())
        at_proc = self.mapping_loc(kid, "proc")
        launch = (sc.here(f"the launch that passes it a piece of '{name}'"), s.loc)
        split = (
            f"'{name}' splits '{site.tensor}' among {level}s here, in instance '{site.instance}'",
            site.loc,
        )
        what = f"piece i of '{name}' is what {level.lower()} i holds"
        if proc_origin and child.proc == below:
            o = proc_origin[0]
            kid_ok = all(
                m.level(str(x)).depth > m.level(level).depth
                for t, x in child.tunables.items()
                if child.variant.tunables()[t].kind == "processor"
            ) and m.deeper_or_equal(level, parent)
            raise CypressError(
                "E041",
                f"{o.key}: {level} of {o.owner} lays out '{name}' for {level}s, but "
                f"'{kid}', which takes its pieces, runs on {child.proc}: {what}",
                o.loc,
                notes=(split, launch, (f"'{kid}' runs on {child.proc}", at_proc)),
                hint=f"set {o.key}: {child.proc} in instance '{o.instance}'"
                + (f", or proc: {level} in instance '{kid}'" if kid_ok else ""),
            )
        alt = (
            f", or {proc_origin[0].key}: {child.proc} in instance '{proc_origin[0].instance}'"
            if proc_origin
            and child.proc in (Proc.WARP, Proc.THREAD)
            and not m.deeper_or_equal(parent, child.proc)
            else ""
        )
        notes = [launch, split] + [
            (f"{o.key}: {o.value} of {o.owner} picks {level}", o.loc) for o in proc_origin
        ]
        raise CypressError(
            "E041",
            f"'{kid}' runs on {child.proc}, but it takes a piece of '{name}', which partition_by_mma "
            f"lays out for {level}s: {what}",
            at_proc,
            notes=tuple(notes),
            hint=f"set proc: {level} in instance '{kid}'{alt}",
        )

    def _check_leaf_mems(self, s: S.LeafCall, sc: _Scope, fn, args) -> None:
        for a, rule in zip(args, fn.operands):
            if rule.kind != OperandKind.TENSOR or not rule.mems:
                continue
            mem = self.allocs[self.root(a)].mem
            if mem not in rule.mems:
                site = self.sites.tensors.get(self.root(a))
                inst = site.instance if site else sc.node.instance.instance
                call = sc.here(f"{s.fn}() is called here")
                raise CypressError(
                    "E043",
                    f"{s.fn}() takes '{rule.name}' in {' or '.join(rule.mems)}, but instance "
                    f"'{inst}' places it in {mem}",
                    site.mem_loc if site and site.mem_loc else s.loc,
                    notes=((call, s.loc),) if site and site.mem_loc else (),
                    hint="change the instance's mems in the mapping",
                )

    def _warpgroup_tile(self, v: N.View) -> tuple[N.IExpr, ...] | None:
        """The warpgroup's accumulator tile behind a thread's fragment ``v``: the base of
        the ``partition_by_mma(…, WARP, …)`` it was cut from (None when there is none)."""
        while True:
            if isinstance(v, N.Piece):
                part = self.parts[v.partition]
                if part.kind == PartKind.MMA and part.params[1] == Proc.WARP:
                    return self.shape(part.base)
                v = part.base
            else:
                lay = self.allocs[v.name].layout
                if lay is None:
                    return None
                v = lay

    def _check_wgmma_atom(self, s: S.LeafCall, sc: _Scope, fn, args) -> None:
        """A wgmma computes an ``64 x N`` block per instruction, so its atom's N must be the
        warpgroup tile's column count (the accumulator's; B's and A's are tied to it by the
        operand shapes).  Recorded, not raised, so that the error names every instance that
        issues a misfit atom (:meth:`_raise_misfits`, at the end of the walk)."""
        names = [r.name for r in fn.operands]
        if OperandKind.ATOM not in [r.kind for r in fn.operands] or "C" not in names:
            return
        k = [r.kind for r in fn.operands].index(OperandKind.ATOM)
        self.issuers.add(sc.node.instance.instance)
        tile = self._warpgroup_tile(args[names.index("C")])
        if tile is None or len(tile) != 2:
            return
        rows, cols = (static(x) for x in tile)
        atom_name = args[k].name
        self._check_atom_k(s, sc, fn, args, k)
        if cols is None or lookup_atom(atom_name).n == cols:
            return
        a = s.args[k]
        derived = sc.derived.get(a.id) if isinstance(a, S.Name) else None
        self.misfits.append(
            _Misfit(
                s,
                sc.node,
                atom_name,
                rows,
                cols,
                tile[1],
                self.origin(a, sc),
                (a.id, derived.instance) if derived and isinstance(a, S.Name) else None,
            )
        )

    def _check_atom_k(self, s: S.LeafCall, sc: _Scope, fn, args, k: int) -> None:
        """E040 when the atom's K is not what its operands' width needs: one wgmma reads 32
        bytes of each row, so 16-bit operands take ``WGMMA_64xNx16`` and FP8 ``WGMMA_64xNx32``
        (PTX ISA §9.7.15.5).  Located at the mapping value that bound the atom."""
        names = [r.name for r in fn.operands]
        if "A" not in names:
            return
        dt = self.dtype(args[names.index("A")])
        have = lookup_atom(args[k].name)
        want = atom_k(DTYPES[dt].itemsize)
        if have.k == want:
            return
        a = s.args[k]
        origins = self.origin(a, sc)
        fit = atom_name(have.m, have.n, want)
        raise CypressError(
            "E040",
            f"atom {have.name} is a k{have.k} wgmma, but {s.fn}()'s operands are {dt}: one "
            f"wgmma reads 32 bytes of a row, k{want} elements of {dt}",
            origins[0].loc if origins else s.loc,
            notes=((sc.here(f"{s.fn}() issues it on {dt} operands"), s.loc),),
            hint=f"use `{fit}`" if is_atom_name(fit) else None,
        )

    def _raise_misfits(self) -> None:
        """E040 at the first misfit atom's YAML value (or, for an atom the program writes, at
        the tile tunable behind the columns), naming every instance that issues one."""
        seen: dict[object, _Misfit] = {}
        for m in self.misfits:
            seen.setdefault(m.origin[0].loc if m.origin else m.stmt.loc, m)
        ms = list(seen.values())
        first = ms[0]

        def fix(m: _Misfit) -> str:
            fit = m.fit()
            if fit is None:
                return f"make the tile of {m.issuer()} at most 256 columns wide, a multiple of 8"
            if m.derived:
                return f"bind {m.derived[0]}: {fit} in instance '{m.derived[1]}' (derived now)"
            if m.origin:
                return f"set {m.origin[0].key}: {fit} in {m.origin[0].owner}"
            return f"write {fit}() in variant '{m.node.variant.name}'"

        others = tuple(
            (
                f"{m.issuer()} also issues {m.atom} on a {m.shape()} accumulator tile"
                + (f" ({m.fit()} fits)" if m.fit() else ""),
                m.origin[0].loc if m.origin else m.stmt.loc,
            )
            for m in ms[1:]
        )
        hint = "; ".join(fix(m) for m in ms)
        reached = {n.instance.instance for n in self.tree.root.walk()}
        atoms = sorted({m.atom for m in ms})
        keep = [
            inst.instance
            for inst in self.tree.mapping.spec.instances
            if inst.instance not in self.issuers
            and inst.instance in reached
            and any(str(v) in atoms for v in inst.tunables.values())
        ]
        bound = sorted(
            {
                str(v)
                for inst in self.tree.mapping.spec.instances
                if inst.instance in keep
                for v in inst.tunables.values()
                if str(v) in atoms
            }
        )
        # a value written once in the shared tunables moves every row that reads it
        shared = all(m.origin and m.origin[0].shared for m in ms)
        if keep and not shared:
            hint += (
                f"; {_and(keep)} bind{'s' if len(keep) == 1 else ''} {_and(bound)} only to partition tiles "
                "(partition_by_mma's layout does not depend on the atom's N): "
                f"{'it' if len(keep) == 1 else 'they'} may keep {'it' if len(bound) == 1 else 'them'} "
                "or change too"
            )
        fit = first.fit()
        what = f"; {fit} fits" if fit else "; no wgmma atom has that N (8 to 256, a multiple of 8)"
        raise blame(
            "E040",
            f"{first.stmt.fn}() issues {first.atom} on a {first.shape()} accumulator tile: "
            f"the atom's N ({lookup_atom(first.atom).n}) must equal the tile's columns ({first.cols})"
            f"{what}",
            first.stmt.loc,
            [*first.origin, first.cols_expr],
            breaks=here(first.node, f"it breaks this {first.stmt.fn}()"),
            hint=hint,
            notes=others,
        )


class ReductionChecks:
    """E052 (a part of :class:`cypressc.passes.dependence_analysis._DA`): ``undefined`` maps
    the fresh tensor of each ``reduces=`` argument nothing has written yet to (the launch
    that made it, the parameter, the callee variant)."""

    undefined: dict[str, tuple[S.Launch, str, str]]

    def touch(self, root: str, reads: bool, loc: Loc, how: str) -> None:
        """An access to ``root``: E052 if it reads the still-undefined private copy of a
        ``reduces=`` argument (its first access must write it without reading it, as
        ``clear`` does: nothing gives it a value, and the reduction adds all of it)."""
        if root not in self.undefined:
            return
        if not reads:
            del self.undefined[root]
            return
        s, pname, variant = self.undefined[root]
        raise CypressError(
            "E052",
            f"'{variant}' reduces into '{pname}', and {how} before anything writes it",
            loc,
            notes=((f"'{pname}' is a private copy of this argument, undefined at first", s.loc),),
            hint=f"write '{pname}' without reading it first (launch a clear of it), then "
            "accumulate into it",
        )
