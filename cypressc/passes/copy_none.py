"""Copy elimination's check that no tensor mapped to NONE is still touched (Cypress paper
§4.2.3): a located E044 at the ``mems`` entry that keeps it NONE, with a note at each
launch whose copy still needs it.
"""

from __future__ import annotations

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.analysis import views_of
from cypressc.ir.origin import Sites, TensorSite
from cypressc.ir.target import Target
from cypressc.lang.kinds import Mem
from cypressc.passes.copy_index import _Index, _index


def _check_none(m: N.Module) -> None:
    ix = _index(m)
    for o in ix.order:
        for v, _, _ in views_of(o):
            root = ix.sym.root(v)
            if ix.sym.allocs[root].mem == Mem.NONE:
                raise _none_error(m, ix, o, v, root)


def _copy_notes(
    ix: _Index, sites: Sites, users: list[tuple[N.Op, N.View]]
) -> list[tuple[str, Loc]]:
    """``this launch of 'mma' copies it into 'C' of instance 'mma_block' (SHARED)``: one note
    per launch statement whose copy-in or copy-out is among ``users`` (op, its NONE view)."""
    seen: dict[Loc, tuple[TensorSite, set[bool]]] = {}
    for o, v in users:
        if not isinstance(o, N.Copy):
            continue
        out = v is o.src
        t = sites.tensors.get(ix.sym.root(o.dst if out else o.src))
        if t is not None and t.mem_loc is not None:
            seen.setdefault(t.loc, (t, set()))[1].add(out)
    notes = []
    for loc, (t, dirs) in seen.items():
        what = f"'{t.param}' of instance '{t.instance}' ({t.mem})"
        how = (
            f"it to and from {what}"
            if len(dirs) == 2
            else f"it into {what}"
            if True in dirs
            else f"{what} back into it"
        )
        notes.append((f"this launch of '{t.task}' copies {how}", loc))
    return notes


def _none_error(m: N.Module, ix: _Index, o: N.Op, v: N.View, root: str) -> CypressError:
    """E044 at the ``mems`` entry that keeps ``v`` NONE, with notes at the launches whose
    copies still touch the tensor — ``o``'s first; the users that partition it differently
    are among them (dependence analysis' sites, ``m.sites``).  At the mapping file
    when the module carries no sites."""
    sites: Sites | None = m.sites
    out = isinstance(o, N.Copy) and v is o.src
    entry = sites.none_entry([p.partition for p in ix.sym.chain(v)], root) if sites else None
    here = (
        f" (as '{entry.param}' of instance '{entry.instance}')" if entry and entry.mem_loc else ""
    )
    notes: list[tuple[str, Loc]] = []
    if sites is not None:
        users = [(o, v)] + [
            (u, w) for u in ix.order for w, _, _ in views_of(u) if ix.sym.root(w) == root
        ]
        notes = _copy_notes(ix, sites, users)
    made = sites.tensors.get(root) if sites else None
    if made is not None and made.mem_loc is None:
        notes.append((f"%{root} is made here, in instance '{made.instance}'", made.loc))
    loc = (
        entry.mem_loc
        if entry and entry.mem_loc
        else made.loc
        if made
        else (m.target or Target.default(m.name)).loc
    )
    return CypressError(
        "E044",
        f"tensor %{root} is mapped to NONE{here} but must be materialized: an "
        f"operation still copies {'from' if out else 'into'} it after copy elimination",
        loc,
        notes=tuple(notes),
        hint="map the tensor's instance to a memory, or make the tasks that share it "
        "partition it the same way (same atoms, tiles and processors)",
    )
