"""Atom tunables the mapping leaves unbound, derived during dependence analysis (issue #37).

A ``tunable(atom)`` that an instance does not bind is :data:`~cypressc.lang.atoms.AUTO_ATOM`
in the task tree ("derive it").  Dependence analysis fixes its value, in this order:

1. **inherited** — when a task that launched this one (the chain of launches above it)
   bound or derived an atom tunable of the same name, this one takes that value: the warp-
   and thread-level rows of an mma tree take their warpgroup's atom;
2. **derived from the tile** — otherwise, at its first use, which must be
   ``partition_by_mma(T, ATOM, PROC, "C")`` of a rank-2 tile ``T`` with a static column
   count ``cols``: the atom is ``WGMMA_64x<cols>x<k>`` (:func:`~cypressc.lang.atoms.atom_name`;
   ``k`` is 16 for 16-bit operands and 32 for FP8, :meth:`AtomDerivation._operand_k`),
   exactly what a mapping that binds it must write for the wgmma to fit (``E040``, paper
   §3.4 and §5.2: a wgmma's N is its warpgroup's accumulator tile width).

Any other first use (a leaf call such as ``warpgroup_mma(MMA, …)``, an ``"A"``/``"B"``/
``"Bt"`` operand, a rank-1 ``"C"`` row vector, a tile whose columns are not static, or a
width that no wgmma atom has) is a located ``E040``: at the instance in the mapping, with a
note at the program statement and a hint that binds the atom.

A derived atom's origins (:mod:`cypressc.ir.origin`) are those of the tile's column count —
the tunables that set the width, e.g. ``V: 256`` — or the instance's row when the width is
written in the program, so a later diagnostic still blames a YAML value.

:class:`AtomDerivation` is a part of :class:`cypressc.passes.dependence_analysis._DA`: it
reads its ``tree`` and ``bound``, and its ``mapping_loc``, ``atom`` and ``_warpgroup_tile``.
"""

from __future__ import annotations

from math import gcd

from cypressc.abi.dtypes import DTYPES
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.origin import Origin, origins_of
from cypressc.ir.shapes import static
from cypressc.lang import syntax as S
from cypressc.lang.atoms import AUTO_ATOM, atom, atom_k, atom_name, is_atom_name
from cypressc.lang.kinds import OperandKind, PartKind
from cypressc.passes.dependence_state import DerivedAtom, _Scope

__all__ = ["AtomDerivation"]

_EXAMPLE = "WGMMA_64x256x16"


class AtomDerivation:
    """Binding and deriving unbound atom tunables (a part of
    :class:`cypressc.passes.dependence_analysis._DA`)."""

    def bind_auto_atom(self, s: S.Tunable, sc: _Scope) -> None:
        """Bind tunable ``s`` (an atom the instance of ``sc`` leaves unbound) to the value
        of the nearest task above that bound or derived an atom tunable of the same name,
        with its origin; else leave it :data:`AUTO_ATOM` until its first use
        (:meth:`partition_atom`)."""
        up = sc.caller
        while up is not None:
            decl = up.node.variant.tunables().get(s.name)
            val = up.env.get(s.name, ("", AUTO_ATOM))[1]
            if decl is not None and decl.kind == "atom" and val != AUTO_ATOM:
                sc.env[s.name] = ("atom", val)
                if s.name in up.derived:
                    sc.derived[s.name] = up.derived[s.name]
                elif s.name in up.origins:
                    sc.origins[s.name] = up.origins[s.name]
                return
            up = up.caller
        sc.env[s.name] = ("atom", AUTO_ATOM)

    def partition_atom(self, s: S.PartitionDecl, sc: _Scope, shape: tuple[N.IExpr, ...]) -> str:
        """The atom of ``partition_by_mma`` statement ``s`` over a tile of ``shape``: the
        bound one, or, for an atom tunable still to derive, ``WGMMA_64x<cols>x<k>`` of this
        ``"C"`` tile, which then binds the tunable for the rest of the task (and the tasks it
        launches).  Raises a located ``E040`` when the atom cannot be derived here."""
        e = s.args[0]
        if not (isinstance(e, S.Name) and sc.env[e.id][1] == AUTO_ATOM):
            return self.atom(e, sc)  # type: ignore[attr-defined]
        op = s.args[2].value  # type: ignore[union-attr]
        what = f"partition_by_mma('{s.tensor}', …, \"{op}\")"
        if op != "C":
            raise self._underivable(
                e.id,
                sc,
                s,
                what,
                f"its first use partitions '{s.tensor}' as operand \"{op}\", "
                'and only a "C" (accumulator) tile gives the atom\'s N',
            )
        if len(shape) != 2:
            raise self._underivable(
                e.id,
                sc,
                s,
                what,
                f"its first use partitions '{s.tensor}', a rank-{len(shape)} "
                "tile (a per-row vector has no columns to give the atom's N)",
            )
        cols = static(shape[1])
        if cols is None:
            raise self._underivable(
                e.id,
                sc,
                s,
                what,
                f"its first use partitions '{s.tensor}', whose column count "
                "is not a compile-time constant",
            )
        name = atom_name(64, cols, self._operand_k(e.id, sc))
        if not is_atom_name(name):
            raise self._underivable(
                e.id,
                sc,
                s,
                what,
                f"'{s.tensor}' has {cols} columns, and no wgmma atom has "
                f"N = {cols} (8 to 256, a multiple of 8)",
                width=shape[1],
            )
        inst = sc.node.instance.instance
        here = Origin(e.id, name, inst, self.mapping_loc(inst), self.bound)  # type: ignore[attr-defined]
        sc.env[e.id] = ("atom", name)
        sc.derived[e.id] = DerivedAtom(origins_of(shape[1]) or (here,), inst, s.tensor, cols, s.loc)
        return name

    def _operand_k(self, name: str, sc: _Scope) -> int:
        """The K of atom tunable ``name``: 32 bytes of the elements of the first tensor the
        task partitions with it as an ``"A"``/``"B"``/``"Bt"``/``"At"`` operand (16 when it
        partitions none: an accumulator alone gives no width, and its layout is the same)."""
        stack = list(sc.node.variant.body)
        while stack:
            st = stack.pop(0)
            stack[:0] = getattr(st, "body", ())
            if (
                isinstance(st, S.PartitionDecl)
                and st.kind == PartKind.MMA
                and isinstance(st.args[0], S.Name)
                and st.args[0].id == name
                and st.args[2].value != "C"  # type: ignore[union-attr]
            ):
                v = sc.env[st.tensor][1]
                return atom_k(DTYPES[self.dtype(v)].itemsize)  # type: ignore[attr-defined]
        return 16

    def explain_derived(
        self, err: CypressError, s: S.PartitionDecl, sc: _Scope, shape: tuple[N.IExpr, ...]
    ) -> CypressError:
        """``err`` (an E040 of ``partition_by_mma`` statement ``s``) with, when its atom was
        derived from another tile whose width does not fit this ``"C"`` tile's, a note where
        it was derived and a hint to bind an atom that fits both; any other ``err`` as is."""
        e = s.args[0]
        d = sc.derived.get(e.id) if isinstance(e, S.Name) else None
        cols = static(shape[1]) if len(shape) == 2 else None
        n = d.cols if d is not None else 0
        if d is None or s.args[2].value != "C" or cols is None or not (cols % n and n % cols):  # type: ignore[union-attr]
            return err  # not the derived N against this tile's width: nothing to add
        k = atom(sc.env[e.id][1]).k  # type: ignore[arg-type]
        note = (
            f"{e.id} = {atom_name(64, d.cols, k)} was derived from the {d.cols} columns of "
            f"'{d.tensor}' here (instance '{d.instance}' leaves {e.id} unbound)",
            d.loc,
        )
        both = gcd(d.cols, cols)
        fit = atom_name(64, both, k) if both and is_atom_name(atom_name(64, both, k)) else None
        hint = (
            f"bind {e.id} in instance '{d.instance}' to an atom whose N divides every tile it "
            "partitions" + (f", e.g. `{e.id}: {fit}`" if fit else "")
        )
        return CypressError(
            err.code,
            err.message,
            err.loc,
            hint=hint + (f"; or {err.hint}" if err.hint else ""),
            notes=err.notes + (note,),
        )

    def check_leaf_atoms(self, s: S.LeafCall, sc: _Scope, fn, args: list) -> None:
        """E040 when leaf call ``s`` takes an atom tunable that is still to derive: a leaf
        issues the atom, it cannot choose it.  The hint names the atom that fits the
        warpgroup's accumulator tile where there is one."""
        for a, arg, rule in zip(s.args, args, fn.operands):
            if (
                rule.kind != OperandKind.ATOM
                or not isinstance(a, S.Name)
                or sc.env[a.id][1] != AUTO_ATOM
            ):
                continue
            names = [r.name for r in fn.operands]
            tile = (
                self._warpgroup_tile(args[names.index("C")])  # type: ignore[attr-defined]
                if "C" in names
                else None
            )
            cols = static(tile[1]) if tile is not None and len(tile) == 2 else None
            k = atom_k(DTYPES[self.dtype(args[names.index("A")])].itemsize) if "A" in names else 16  # type: ignore[attr-defined]
            fit = atom_name(64, cols, k) if cols is not None else None
            raise self._underivable(
                a.id,
                sc,
                s,
                f"{s.fn}()",
                f"its first use is the leaf call {s.fn}(), and no task "
                f"that launches '{sc.node.instance.instance}' binds {a.id}",
                fit=fit if fit is not None and is_atom_name(fit) else None,
            )

    def _underivable(
        self,
        name: str,
        sc: _Scope,
        s: S.Stmt,
        what: str,
        why: str,
        *,
        fit: str | None = None,
        width: N.IExpr | None = None,
    ) -> CypressError:
        """The E040 for atom tunable ``name`` of ``sc``'s instance: at the instance's
        tunables in the mapping (at the tunable behind the tile's width when ``width`` has
        one), a note at statement ``s``."""
        inst = sc.node.instance.instance
        loc = self.mapping_loc(inst, "tunables")  # type: ignore[attr-defined]
        notes = [(sc.here(f"{what} uses {name} first"), s.loc)]
        blamed = origins_of(width) if width is not None else ()
        if blamed:  # the tile is too wide: blame the tunable that sets its width
            notes.append((f"instance '{inst}' leaves {name} unbound", loc))
            notes += [(f"{o} also sets the width", o.loc) for o in blamed[1:]]
            loc = blamed[0].loc
        return CypressError(
            "E040",
            f"instance '{inst}' leaves the atom tunable {name} unbound, and it cannot be "
            f"derived: {why}",
            loc,
            notes=tuple(notes),
            hint=f"bind it in the mapping: `{name}: {fit or _EXAMPLE}` under tunables of "
            f"instance '{inst}'" + ("" if fit else " (the N that fits its accumulator tile)"),
        )
