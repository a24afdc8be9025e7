"""The kernel's run-time sizes, read off the entrypoint variant (docs/language.md §3.2).

Every dimension of an entry tensor and every ``int`` parameter is a *slot*; slots that are
one size share a name.  A dimension the signature names (``tensor[(M, K), T]``) is that
size, and equal names are one size (an ``int`` parameter of the same name too).  A
dimension the signature leaves unnamed (``tensor[2, T]``) is one size with another slot
when the body says its extent is that size, in the two ways a program walks a tensor:

* a loop whose range counts the size's blocks indexes the tensor's blocks of the same
  extent along that dimension: ``for i in prange(cdiv(M, U))`` (or ``M / U``) indexing
  ``Ap[i, 0]`` of ``Ap = partition_by_blocks(A, (U, K))`` — A has M rows; a loop over
  ``range(M)`` indexing a ``partition_by_slices`` piece — the slices are M;
* the one block along that dimension is the size: ``Bp[0, j]`` of
  ``partition_by_blocks(B, (K, V))`` — B has K rows.

A dimension every index of whose blocks is one of those, all naming sizes, is tied to
them; one indexed any other way (``Kp[i + 1]``, ``Ks[h // G]``) is tied to nothing.  Two
dimensions the signature names differently are never tied (the program said they differ).

A size takes the signature's name, else the name the body gives it (``M = C.shape[0]``,
the first such ``let``), else ``<tensor>_d<dim>``.  Its other names — those of its slots
and lets, and ``<tensor>_d<dim>`` of each unnamed dimension in it — are its *aliases*:
the kernel info lists them (``"aliases"``) and ``cypressc tune --size``, the runtime's
keyword sizes accept them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from networkx.utils import UnionFind

from cypressc.lang import syntax as S
from cypressc.lang.kinds import PartKind

__all__ = ["EntrySizes", "entry_sizes"]

Slot = tuple  # ("name", X): a named size or int parameter; ("dim", T, d): an unnamed dimension


@dataclass(frozen=True)
class EntrySizes:
    """``dims[T]``: the size of each dimension of entry tensor ``T``; ``ints[p]``: the size of
    ``int`` parameter ``p``; ``sizes``: every size in parameter order (first slot);
    ``aliases``: every other name of a size -> the size."""

    dims: dict[str, tuple[str, ...]]
    ints: dict[str, str]
    sizes: tuple[str, ...]
    aliases: dict[str, str]


def _exprs(s: S.Stmt):
    """The expressions a statement holds (not those of a loop's body)."""
    if isinstance(s, S.Let):
        return (s.value,)
    if isinstance(s, (S.PartitionDecl, S.Launch, S.LeafCall)):
        return s.args
    if isinstance(s, S.MakeTensor):
        return s.dims
    if isinstance(s, S.Loop):
        return s.extents
    return ()


def _pieces(e: S.Expr):
    if isinstance(e, S.Piece):
        yield e
        for i in e.indices:
            yield from _pieces(i)
    elif isinstance(e, S.BinOp):
        yield from _pieces(e.lhs)
        yield from _pieces(e.rhs)
    elif isinstance(e, S.Call):
        for a in e.args:
            yield from _pieces(a)


def entry_sizes(v: S.Variant) -> EntrySizes:
    """The sizes of entrypoint variant ``v`` (see the module docstring)."""
    tensors = {p.name: p.type for p in v.params if isinstance(p.type, S.TensorType)}
    ints = [p.name for p in v.params if isinstance(p.type, S.ScalarType) and p.type.kind == "int"]
    slot_of: dict[tuple[str, int], Slot] = {}
    for t, ty in tensors.items():
        for d in range(ty.rank):
            slot_of[t, d] = ("name", ty.dims[d]) if ty.dims else ("dim", t, d)
    u = UnionFind()  # u[slot]: its size's representative slot
    signature = {("name", n) for n in ints} | {s for s in slot_of.values() if s[0] == "name"}

    stmts = list(S.walk(v.body))
    lets = {s.name: s.value for s in stmts if isinstance(s, S.Let)}
    tunables = {s.name for s in stmts if isinstance(s, S.Tunable)}
    loops: dict[str, S.Expr] = {}
    for s in stmts:
        if isinstance(s, S.Loop):
            loops.update(zip(s.vars, s.extents))

    def canon(e: S.Expr, depth: int = 0) -> Any:
        """``e`` with lets substituted and every slot written as ("slot", slot): two
        expressions are the same value when their canon forms are equal."""
        if depth > 200:
            return ("?", id(e))
        if isinstance(e, S.Const):
            return ("c", e.value)
        if isinstance(e, S.Name):
            if e.id in lets:
                return canon(lets[e.id], depth + 1)
            if ("name", e.id) in signature:
                return ("slot", ("name", e.id))
            return ("t" if e.id in tunables else "v" if e.id in loops else "n", e.id)
        if isinstance(e, S.Shape):
            if e.tensor in tensors and (e.tensor, e.dim) in slot_of:
                return ("slot", slot_of[e.tensor, e.dim])
            return ("shape", e.tensor, e.dim)
        if isinstance(e, S.BinOp):
            return (e.op, canon(e.lhs, depth + 1), canon(e.rhs, depth + 1))
        if isinstance(e, S.Call):
            return (e.fn, *(canon(a, depth + 1) for a in e.args))
        return ("?", id(e))

    def size(e: S.Expr) -> Slot | None:
        c = canon(e)
        return c[1] if c[0] == "slot" else None

    # every partition of an entry tensor: (tensor, kind, block extents | slice dimension)
    parts: dict[str, tuple[str, PartKind, tuple]] = {}
    for s in stmts:
        if (
            isinstance(s, S.PartitionDecl)
            and s.tensor in tensors
            and s.kind in (PartKind.BLOCKS, PartKind.SLICES)
        ):
            parts[s.name] = (s.tensor, s.kind, s.args)

    def claim(kind: PartKind, block: S.Expr | None, idx: S.Expr) -> Slot | None:
        """The size a piece index says the dimension is, or None."""
        if isinstance(idx, S.Name) and idx.id in loops and idx.id not in lets:
            x = canon(loops[idx.id])
            if kind == PartKind.SLICES:
                return x[1] if x[0] == "slot" else None
            b = canon(block)  # type: ignore[arg-type]
            if x[0] in ("cdiv", "/") and len(x) == 3 and x[2] == b and x[1][0] == "slot":
                return x[1][1]
            if b == ("c", 1) and x[0] == "slot":
                return x[1]
            return None
        if kind == PartKind.BLOCKS and isinstance(idx, S.Const) and idx.value == 0:
            return size(block)  # type: ignore[arg-type]
        return None

    claims: dict[tuple[str, int], list[Slot | None]] = {}
    for s in stmts:
        for e in _exprs(s):
            for pc in _pieces(e):
                if pc.partition not in parts:
                    continue
                t, kind, args = parts[pc.partition]
                if kind == PartKind.SLICES:
                    dims = [(args[0].value, None)] if isinstance(args[0], S.Const) else []
                else:
                    dims = list(enumerate(args))
                for (d, block), idx in zip(dims, pc.indices):
                    if (t, d) in slot_of:
                        claims.setdefault((t, d), []).append(claim(kind, block, idx))

    def named(root: Slot) -> bool:
        return any(u[s] == root for s in signature)

    for (t, d), said in claims.items():
        if not said or None in said:
            continue
        for other in said:
            a, b = u[slot_of[t, d]], u[other]  # type: ignore[arg-type]
            if a != b and not (named(a) and named(b)):
                u.union(a, b)

    # names: the signature's, else the first let that is the size, else <tensor>_d<dim>
    slots = [slot_of[t, d] for t, ty in tensors.items() for d in range(ty.rank)]
    order: list[tuple[str, Any]] = []  # (kind, what) in parameter order: the sizes' positions
    for p in v.params:
        if p.name in tensors:
            order += [("slot", slot_of[p.name, d]) for d in range(tensors[p.name].rank)]
        elif p.name in ints:
            order.append(("slot", ("name", p.name)))
    name_of: dict[Slot, str] = {}
    for _, s in order:  # signature names first, in parameter order
        r = u[s]
        if s[0] == "name" and r not in name_of:
            name_of[r] = s[1]
    let_names: list[tuple[str, Slot]] = []
    for s in stmts:
        if isinstance(s, S.Let) and (sl := size(s.value)) is not None:
            let_names.append((s.name, sl))
            name_of.setdefault(u[sl], s.name)
    params = {p.name for p in v.params}
    taken = params | {s[1] for s in signature} | set(lets)
    for s in slots:
        if s[0] == "dim" and u[s] not in name_of:
            base = n = f"{s[1]}_d{s[2]}"
            i = 0
            while n in taken:  # as dependence analysis names things: x, x_1, x_2...
                i += 1
                n = f"{base}_{i}"
            taken.add(n)
            name_of[u[s]] = n

    sizes = tuple(dict.fromkeys(name_of[u[s]] for _, s in order))
    aliases: dict[str, str] = {}
    for s in slots:
        if s[0] == "dim":
            aliases[f"{s[1]}_d{s[2]}"] = name_of[u[s]]
    for s in signature:
        aliases[s[1]] = name_of[u[s]]
    for n, sl in let_names:
        aliases[n] = name_of[u[sl]]
    return EntrySizes(
        dims={
            t: tuple(name_of[u[slot_of[t, d]]] for d in range(ty.rank)) for t, ty in tensors.items()
        },
        ints={n: name_of[u[("name", n)]] for n in ints},
        sizes=sizes,
        aliases={a: n for a, n in aliases.items() if a != n and a not in sizes and a not in params},
    )
