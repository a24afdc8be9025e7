"""The search space of ``cypressc tune``: the knobs of a mapping and their candidate values.

A **knob** is one performance decision of a mapping, read off the mapping and its task tree
(never off the program's name or shape):

``tunable``
    an ``int`` tunable name bound to the *same* value in every instance that binds it
    (``U``, ``V``, ``W``, ``WGS``): all those instances change together.  A name bound to
    different values (``PIECES: 4`` under a warpgroup, ``32`` under a warp) is structural
    and left alone unless the ``tune:`` section names it.
``atom``
    an instruction-atom tunable (``MMA: WGMMA_64x128x16``), likewise tied by name; one the
    mapping leaves unbound is derived from its tile (so it follows the tile knobs) and is
    not a knob.
``block``
    a BLOCK knob of the kernel's outermost BLOCK instance (``pipeline``, ``warpspecialize``,
    ``persistent``, ``raster``, ``mma_in_flight``, ``producer_registers``,
    ``consumer_registers``; paper §4.2.4–§4.2.5).
``mem``
    epilogue staging: a tensor that a BLOCK instance keeps in GLOBAL and that the instances
    below it, running the same task, place in SHARED or GLOBAL (``copy_block.D``: SHARED =
    staged in shared memory and stored by the TMA, GLOBAL = stored from registers).

Default candidates (docs/tuning.md): powers of two from half to twice an int tunable's value
(at most 256, the largest wgmma N and TMA box), atoms ``WGMMA_64xNx16`` (or ``x32``) with N from half to
twice the mapping's, pipeline depths 2–5, both settings of each flag, raster 16 and 8,
``mma_in_flight`` 1 and 0, both memories of a staging knob; register split as written.  The
mapping's optional ``tune:`` section replaces a knob's candidates (a list, or one value to
fix it); its first value is the one the first search round holds a BLOCK flag at.
A candidate is applied by editing the mapping's text at the located values, so the best
mapping keeps the original's comments and layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from cypressc.diagnostics import CypressError, CypressErrors
from cypressc.lang.atoms import ATOM_FORMS, AUTO_ATOM, atom, atom_name, is_atom_name
from cypressc.lang.kinds import Mem, Proc
from cypressc.lang.syntax import Program
from cypressc.mapping.loader import LoadedMapping, load_mapping_source
from cypressc.mapping.render import yaml_scalar
from cypressc.mapping.schema import MappingSpec
from cypressc.mapping.tasktree import TaskTree
from cypressc.mapping.templates import expand, has_sugar

__all__ = ["Site", "Knob", "Space", "derive_space", "TUNE_CODE"]

TUNE_CODE = "M024"  # the tune: section names no knob, or a candidate does not fit its knob

# (knob, search group, default candidates given the current value; None = unset)
_FLAG_KNOBS = ("warpspecialize", "persistent")
_TILE_MAX = 256
# what the compiler does with an unset BLOCK knob (cypressc/backend/lower.py)
_DEFAULTS = {
    "warpspecialize": False,
    "persistent": False,
    "raster": 16,
    "mma_in_flight": 1,
    "pingpong": False,
    "cluster": None,
}


@dataclass(frozen=True)
class Site:
    """Where a knob's value lives: ``spec.instances[instance]`` at ``key`` (``("tunables",
    "U")``, ``("pipeline",)``, ``("mems", 1)``)."""

    instance: int
    key: tuple[str | int, ...]


@dataclass(frozen=True)
class Knob:
    """One knob: its ``name`` (the key of the ``tune:`` section), ``kind`` (tunable, atom,
    block, mem), search ``group`` ("tiles": searched in the first round; "block": the BLOCK
    flags, searched around the first round's best), the ``sites`` it sets, its ``current``
    value (``None``: unset, the compiler's default) and its ``candidates`` in preference
    order."""

    name: str
    kind: str
    group: str
    sites: tuple[Site, ...]
    current: Any
    candidates: tuple[Any, ...]

    @property
    def searched(self) -> bool:
        return len(self.candidates) > 1


def _pow2_around(v: int) -> list[int]:
    out = {v}
    p = 1
    while p <= min(2 * v, _TILE_MAX):
        if 2 * p >= v:
            out.add(p)
        p *= 2
    return sorted(out)


def _atoms_around(name: str) -> list[str]:
    """The atom ``name`` and those of half and twice its N, of the same K (the operands' width)."""
    a = atom(name)
    cands = {a.n} | {x for x in (a.n // 2, 2 * a.n) if 8 <= x <= _TILE_MAX and x % 8 == 0}
    return [atom_name(a.m, x, a.k) for x in sorted(cands)]


def _block_defaults(knob: str, cur: Any) -> list[Any]:
    if knob in _FLAG_KNOBS:
        return [True, False]
    if knob == "pingpong":  # searched where the mapping names it: the GEMMs' loops refuse it
        return [cur] if cur is None else [cur, not cur]
    if knob == "pipeline":
        return sorted({2, 3, 4, 5} | ({cur} if cur else set()))
    if knob == "raster":
        return list(dict.fromkeys([cur or 16, 16, 8]))
    if knob == "mma_in_flight":
        return list(dict.fromkeys([1 if cur is None else cur, 1, 0]))
    if knob == "cluster":  # none, or 2 blocks sharing B (along M) or A (along N); a grid of
        # another rank refuses these (E065) and the search drops them
        out: list[Any] = []
        for c in (cur, None, [2, 1], [1, 2]):
            if c not in out:
                out.append(c)
        return out
    return [cur]  # register split: as written unless tune: lists values


_LIST_KNOBS = ("cluster",)  # a candidate is a list (a cluster shape); unset: none

_BLOCK_KNOBS = {
    "pipeline": "tiles",
    "warpspecialize": "block",
    "persistent": "block",
    "raster": "block",
    "mma_in_flight": "block",
    "producer_registers": "block",
    "consumer_registers": "block",
    "pingpong": "block",
    "cluster": "block",
}


class Space:
    """The knobs of one mapping and how to turn a choice of values into mapping text.

    ``knobs`` in a fixed order (tunables, atoms, mem knobs, block knobs); ``base`` the
    mapping's own value of each (unset block knobs: ``None``)."""

    def __init__(
        self, lm: LoadedMapping, text: str, knobs: list[Knob], program: Program | None = None
    ) -> None:
        # lm is the expanded mapping (its rows are the sites); text is what the user wrote,
        # which may use mapping templates and shared tunables: program expands a reload
        self.lm, self.text, self.knobs, self.program = lm, text, knobs, program
        self.by_name = {k.name: k for k in knobs}
        self._rendered: dict[tuple, str] = {}

    @property
    def base(self) -> dict[str, Any]:
        return {k.name: k.current for k in self.knobs}

    def size(self, names: Iterable[str] | None = None) -> int:
        n = 1
        for k in self.knobs:
            if names is None or k.name in names:
                n *= len(k.candidates)
        return n

    def product(self, names: Iterable[str], base: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Every combination of the candidates of ``names``, the other knobs as in ``base``;
        a BLOCK knob left unset in the mapping stays unset where a candidate equals the
        compiler's default (so equal kernels are one candidate)."""
        names = [n for n in (k.name for k in self.knobs) if n in set(names)]
        for combo in itertools.product(*(self.by_name[n].candidates for n in names)):
            vals = {**base, **dict(zip(names, combo))}
            for n, v in vals.items():
                k = self.by_name[n]
                if isinstance(v, list) and all(x == 1 for x in v):
                    vals[n] = v = None  # a cluster of one block: none (the same kernel)
                if k.kind == "block" and k.current is None and _DEFAULTS.get(n, ...) == v:
                    vals[n] = None
            yield vals

    def spec(self, values: Mapping[str, Any]) -> MappingSpec:
        """The mapping with ``values`` applied (``ValidationError`` if the schema refuses)."""
        data = self.lm.spec.model_dump(exclude_none=True)
        for name, v in values.items():
            for site in self.by_name[name].sites:
                node: Any = data["instances"][site.instance]
                *head, last = site.key
                for k in head:
                    node = node[k]
                if v is None:
                    node.pop(last, None) if isinstance(node, dict) else None
                else:
                    node[last] = v
        return MappingSpec.model_validate(data)

    def render(self, values: Mapping[str, Any]) -> str:
        """Mapping text with ``values`` applied: the original text edited in place where
        each value is written (comments and layout kept), new BLOCK keys inserted after the
        instance's ``proc:`` line; falls back to a plain YAML dump if an edit cannot be
        placed.  The result always loads to :meth:`spec` of the same values (memoized: the
        tunes of one mapping at several sizes render the same points)."""
        key = tuple(sorted((k, repr(v)) for k, v in values.items()))
        if key not in self._rendered:
            self._rendered[key] = self._render(values)
        return self._rendered[key]

    def _render(self, values: Mapping[str, Any]) -> str:
        want = self.spec(values)
        try:
            text = self._edit(values)
            if _reload(text, self.lm.path, self.program) == want:
                return text
        except (CypressErrors, CypressError, KeyError, IndexError, ValueError, ValidationError):
            pass
        import yaml

        # json mode: levels and memories as their names (YAML's safe dumper takes no enum)
        return yaml.safe_dump(want.model_dump(mode="json", exclude_none=True), sort_keys=False)

    def _edit(self, values: Mapping[str, Any]) -> str:
        lines = self.text.splitlines(keepends=True)
        # (line, col, end_col) -> text, 1-based; one value written once may set several
        # sites (a shared tunable, a tree entry's mems): it is edited once
        subs: dict[tuple[int, int, int], str] = {}
        inserts: dict[int, list[str]] = {}  # after line -> new lines
        for name, v in values.items():
            knob = self.by_name[name]
            if v == knob.current:
                continue
            for site in knob.sites:
                path = ("instances", site.instance, *site.key)
                loc = self.lm.locs.get(path)
                if loc is not None and loc.end_col > loc.col:
                    if v is None:
                        raise ValueError("cannot remove a key in place")
                    at, new = (loc.line, loc.col, loc.end_col), yaml_scalar(v)
                    if subs.setdefault(at, new) != new:
                        raise ValueError(f"two values for one place: {path}")
                elif loc is None and len(site.key) == 1 and v is not None:
                    proc = self.lm.locs[("instances", site.instance, "proc")]
                    line = lines[proc.line - 1]
                    key_col = line.index("proc:")
                    if line[:key_col].strip() not in ("", "-"):
                        raise ValueError("proc is not on a line of its own")
                    inserts.setdefault(proc.line, []).append(
                        " " * key_col + f"{site.key[0]}: {yaml_scalar(v)}\n"
                    )
                else:
                    raise ValueError(f"cannot place {path}")
        for (line, col, end), new in sorted(subs.items(), reverse=True):
            s = lines[line - 1]
            lines[line - 1] = s[: col - 1] + new + s[end - 1 :]
        for after in sorted(inserts, reverse=True):
            lines[after:after] = inserts[after]
        return "".join(lines)

    def describe(self, values: Mapping[str, Any]) -> str:
        """A short label of the knobs that differ across the space, e.g.
        ``U=128 V=256 W=64 MMA=64x256 pipeline=3 ws persistent``."""
        out = []
        for k in self.knobs:
            v = values.get(k.name)
            if (not k.searched and v == k.current) or (k.name in _LIST_KNOBS and v is None):
                continue  # (no cluster: said by saying nothing, as before clusters)
            if isinstance(v, bool):
                out.append(k.name if v else f"no-{k.name}")
            elif isinstance(v, list):  # a cluster shape: cluster=2x1
                out.append(f"{k.name}={'x'.join(map(str, v))}")
            elif isinstance(v, str) and v.startswith("WGMMA_"):
                out.append(f"{k.name}={v.removeprefix('WGMMA_').removesuffix('x16')}")
            else:
                out.append(f"{k.name}={'default' if v is None else v}")
        return " ".join(out)


def _reload(text: str, path: str, program: Program | None = None) -> MappingSpec:
    """The spec an edited mapping text loads to.  A tune renders every point of the space
    (~2000 for a plain gemm), and the located loader (pure-Python YAML composition) costs
    ~30 ms a text; libyaml's loader plus the same schema is ~15x faster and, for text that
    only differs from a loaded mapping in scalar values, loads the same data.  Pruning loads
    every candidate text with the located loader anyway (on every core).  With ``program``,
    mapping templates and shared tunables are expanded (the spec compares with the
    expanded mapping's)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        lm = load_mapping_source(text, path)
    else:
        try:
            spec = MappingSpec.model_validate(yaml.load(text, Loader=loader))
        except yaml.YAMLError as e:
            raise ValueError(str(e)) from None
        lm = LoadedMapping(spec, path, {})
    if program is not None and has_sugar(lm.spec):
        return expand(lm, program).spec
    return lm.spec


def _tied_tunables(tree: TaskTree) -> dict[str, tuple[str, list[Site], set[Any]]]:
    """tunable name -> (kind, sites, values bound), over the instances the tree reaches.

    An atom tunable the mapping leaves unbound (:data:`AUTO_ATOM`) has no site to edit: it
    follows its tile, whose tunables are knobs of their own, so it is no knob."""
    index = {inst.instance: i for i, inst in enumerate(tree.mapping.spec.instances)}
    out: dict[str, tuple[str, list[Site], set[Any]]] = {}
    seen: set[str] = set()
    for node in tree.root.walk():
        if node.instance.instance in seen:
            continue
        seen.add(node.instance.instance)
        for t, decl in node.variant.tunables().items():
            if (
                t not in node.tunables
                or decl.kind not in ("int", "atom")
                or node.tunables[t] == AUTO_ATOM
            ):
                continue
            kind, sites, vals = out.setdefault(t, (decl.kind, [], set()))
            sites.append(Site(index[node.instance.instance], ("tunables", t)))
            vals.add(node.tunables[t])
    return out


def _staging_knobs(tree: TaskTree) -> list[Knob]:
    """Epilogue staging: a GLOBAL tensor of a BLOCK instance placed in SHARED or GLOBAL by the
    instances below it that run the same task (same parameter position)."""
    index = {inst.instance: i for i, inst in enumerate(tree.mapping.spec.instances)}
    knobs, done = [], set()
    for node in tree.root.walk():
        if node.proc != Proc.BLOCK or node.instance.instance in done:
            continue
        done.add(node.instance.instance)
        for pos, (pname, mem) in enumerate(node.mems.items()):
            if mem != Mem.GLOBAL:
                continue
            chain, frontier, vals = [], [c for _, c in node.children], set()
            while frontier:
                nxt = []
                for c in frontier:
                    if (
                        c.variant.task != node.variant.task
                        or c.proc == Proc.BLOCK
                        or len(c.instance.mems) <= pos
                        or c.instance.mems[pos] not in (Mem.SHARED, Mem.GLOBAL)
                    ):
                        continue
                    site = Site(index[c.instance.instance], ("mems", pos))
                    if site not in chain:
                        chain.append(site)
                        vals.add(c.instance.mems[pos])
                    nxt += [g for _, g in c.children]
                frontier = nxt
            if chain and len(vals) == 1:
                cur = vals.pop()
                knobs.append(
                    Knob(
                        f"{node.instance.instance}.{pname}",
                        "mem",
                        "tiles",
                        tuple(chain),
                        cur,
                        (cur, Mem.GLOBAL if cur == Mem.SHARED else Mem.SHARED),
                    )
                )
    return knobs


def derive_space(tree: TaskTree, text: str) -> Space:
    """The knobs of ``tree``'s mapping (whose YAML source is ``text``), with the default
    candidates replaced by the ``tune:`` section's.  Raises :class:`CypressErrors` (M024,
    located at the ``tune:`` entry) for a key that names no knob or a candidate the knob
    cannot take."""
    lm = tree.mapping
    knobs: list[Knob] = []
    tied = _tied_tunables(tree)
    for name, (kind, sites, vals) in tied.items():
        if len(vals) != 1:
            continue
        cur = next(iter(vals))
        cands = (
            _pow2_around(cur)
            if kind == "int"
            else _atoms_around(cur)
            if is_atom_name(str(cur))
            else [cur]
        )
        knobs.append(
            Knob(
                name,
                kind if kind == "atom" else "tunable",
                "tiles",
                tuple(sites),
                cur,
                tuple(cands),
            )
        )
    knobs.sort(key=lambda k: k.kind == "atom")
    knobs += _staging_knobs(tree)
    block = tree.block_node()
    if block is not None:
        i = [inst.instance for inst in lm.spec.instances].index(block.instance.instance)
        for name, group in _BLOCK_KNOBS.items():
            cur = getattr(block.instance, name)
            knobs.append(
                Knob(
                    name,
                    "block",
                    group,
                    (Site(i, (name,)),),
                    cur,
                    tuple(_block_defaults(name, cur)),
                )
            )
    space = Space(lm, text, knobs, tree.program)
    return _apply_tune_section(space, tied)


def _apply_tune_section(space: Space, tied: dict) -> Space:
    section = space.lm.spec.tune or {}
    errors: list[CypressError] = []
    knobs = list(space.knobs)
    for name, values in section.items():
        loc = space.lm.loc("tune", name)
        knob = space.by_name.get(name)
        if knob is None and name in tied:  # a tunable bound to several values: set them all
            kind, sites, vals = tied[name]
            knob = Knob(
                name,
                "atom" if kind == "atom" else "tunable",
                "tiles",
                tuple(sites),
                None,
                tuple(sorted(vals, key=str)),
            )
            knobs.append(knob)
            space = Space(space.lm, space.text, knobs, space.program)
        if knob is None:
            errors.append(
                CypressError(
                    TUNE_CODE,
                    f"tune: '{name}' is not a knob of this mapping",
                    loc,
                    hint="knobs: " + ", ".join(k.name for k in space.knobs),
                )
            )
            continue
        if knob.name in _LIST_KNOBS:
            # a list-valued knob: one list of integers is one candidate ([2, 1]), a list of
            # lists several ([[1, 1], [2, 1]])
            values = [values] if all(type(x) is int for x in values) else values
        for j, v in enumerate(values):
            why = _bad_value(space, knob, v)
            if why:
                errors.append(
                    CypressError(
                        TUNE_CODE,
                        f"tune: {name} cannot be {yaml_scalar(v)}: {why}",
                        space.lm.loc("tune", name, j),
                    )
                )
        unique = [x for i, x in enumerate(values) if x not in values[:i]]  # lists: no hashing
        knobs[knobs.index(knob)] = Knob(
            knob.name, knob.kind, knob.group, knob.sites, knob.current, tuple(unique)
        )
        space = Space(space.lm, space.text, knobs, space.program)
    if errors:
        raise CypressErrors(errors)
    return space


def _bad_value(space: Space, knob: Knob, v: Any) -> str | None:
    if knob.kind == "tunable" and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
        return "an int tunable takes positive integers"
    if knob.kind == "atom" and not (isinstance(v, str) and is_atom_name(v)):
        return f"atoms are {ATOM_FORMS}"
    if knob.kind == "mem" and v not in (Mem.SHARED, Mem.GLOBAL):
        return "a staging knob is SHARED (staged, TMA store) or GLOBAL (stored from registers)"
    if knob.kind == "block":
        try:
            space.spec({knob.name: v})
        except ValidationError as e:
            return e.errors()[0]["msg"].removeprefix("Value error, ")
    return None
