"""Mapping templates and shared tunables (issue #37 item 2; the boilerplate the Cypress paper
names in §5.4): sugar that expands to the paper's full mapping (§3.3, Fig. 5b).

Three forms shorten a mapping, and :func:`expand` turns each into plain instances:

- an entry ``- {tree: mma, mems: [NONE, SHARED, SHARED]}`` maps a whole task tree: its
  ``template`` (default ``wgmma``, from ``cypressc/lib/*.yaml`` or the mapping's own
  ``templates:``) lists one row per processor level, and the entry becomes those rows,
  named ``<instance><suffix>``, each calling the next;
- the top-level ``tunables:`` are shared by name: every row whose variant declares a
  tunable it does not bind takes the shared value (a tree entry's ``tunables:`` are shared
  the same way among its own rows, and beat the top level's);
- an instance without ``variant:`` runs the variant of its own name.

The expansion reads the program only to know which tunables each variant declares, so a
row binds exactly the tunables a hand-written full mapping would.  Every location of an
expanded row is the location of the value the user wrote (the entry's ``mems`` item, the
shared tunable, the ``tree:`` key for what the template supplies), so every later
diagnostic points into the user's file.  A mapping without sugar is returned unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import yaml
from pydantic import TypeAdapter

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang import syntax as S
from cypressc.lang.imports import LIB_DIR, shown
from cypressc.lang.kinds import Mem
from cypressc.mapping.loader import LoadedMapping, RowOrigin
from cypressc.mapping.schema import Instance, MappingSpec, TemplateLevel, TreeEntry

__all__ = ["expand", "has_sugar", "library_templates"]

CODE = "M025"
_LEVELS = TypeAdapter(dict[str, list[TemplateLevel]])


@cache
def library_templates() -> dict[str, tuple[TemplateLevel, ...]]:
    """The templates shipped with cypressc: every ``templates:`` of ``cypressc/lib/*.yaml``.

    Raises ``ValueError`` if a library file is malformed (a bug in cypressc, not user input).
    """
    out: dict[str, tuple[TemplateLevel, ...]] = {}
    for f in sorted(LIB_DIR.glob("*.yaml")):
        data = yaml.safe_load(f.read_text()) or {}
        for name, levels in _LEVELS.validate_python(data.get("templates", {})).items():
            if name in out:
                raise ValueError(f"{shown(f)}: template '{name}' is defined twice")
            out[name] = tuple(levels)
    return out


def has_sugar(spec: MappingSpec) -> bool:
    """Whether ``spec`` uses a tree entry or shared tunables (instance rows whose variant
    defaulted to their name need no expansion)."""
    return bool(spec.tunables) or any(isinstance(e, TreeEntry) for e in spec.instances)


def expand(lm: LoadedMapping, prog: S.Program) -> LoadedMapping:
    """The full mapping ``lm`` stands for, against ``prog`` (whose variants say which
    tunables each row takes).  Raises :class:`CypressErrors` (M025) for an unknown template,
    a tree entry whose ``proc`` is not its template's first level or whose task lacks a
    level's variant, an entry tunable no row of its tree declares, a shared tunable no
    instance takes, and a ``mems`` list of another length than the levels' variants take
    (reported once for the entry, naming the level's variant)."""
    spec = lm.spec
    if not has_sugar(spec):
        return lm
    return _Expander(lm, prog).run()


class _Expander:
    def __init__(self, lm: LoadedMapping, prog: S.Program) -> None:
        self.lm, self.prog, self.spec = lm, prog, lm.spec
        self.errors: list[CypressError] = []
        self.templates = {
            **library_templates(),
            **{k: tuple(v) for k, v in self.spec.templates.items()},
        }
        self.rows: list[Instance] = []
        self.locs: dict[tuple, Loc] = {}
        self.used_shared: set[str] = set()
        self.origins: dict[str, RowOrigin] = {}
        self.unknown_variant = False

    def err(self, msg: str, *key: str | int, hint: str | None = None) -> None:
        self.errors.append(CypressError(CODE, msg, self.lm.loc(*key), hint=hint))

    def run(self) -> LoadedMapping:
        for k, v in self.lm.locs.items():
            if k and k[0] != "instances":
                self.locs[k] = v
        for i, entry in enumerate(self.spec.instances):
            if isinstance(entry, TreeEntry):
                self.tree(i, entry)
            else:
                self.instance(i, entry)
        for t in self.spec.tunables:
            if t not in self.used_shared and not self.unknown_variant:
                self.err(
                    f"no instance takes the shared tunable '{t}'",
                    "tunables",
                    t,
                    hint="a shared tunable binds the rows whose variants declare it and do not "
                    "bind it themselves; remove it, or check its spelling",
                )
        if self.errors:
            raise CypressErrors(self.errors)
        spec = self.spec.model_copy(
            update={"instances": self.rows, "tunables": {}, "templates": {}}
        )
        return LoadedMapping(spec, self.lm.path, self.locs, self.origins)

    # -- rows ------------------------------------------------------------------------------
    def declared(self, variant: str) -> dict[str, S.Tunable]:
        v = self.prog.variant(variant)
        if v is None:  # M013 later; a shared tunable it would take is not "unused"
            self.unknown_variant = True
            return {}
        return v.tunables()

    def add(
        self,
        inst: Instance,
        origin: RowOrigin,
        locs: dict[tuple, Loc],
        tunables: dict[str, tuple[int | str, tuple]],
    ) -> None:
        """Append ``inst`` with ``tunables`` (name -> (value, the user's key path)) bound."""
        r = len(self.rows)
        bound = dict(inst.tunables)
        for t, (v, _) in tunables.items():
            bound.setdefault(t, v)
        self.rows.append(inst.model_copy(update={"tunables": bound}))
        for k, loc in locs.items():
            self.locs[("instances", r, *k)] = loc
        for t, (_, path) in tunables.items():
            if t not in inst.tunables:
                self.locs[("instances", r, "tunables", t)] = self.lm.loc(*path)
        shared = tuple(t for t, (_, path) in tunables.items() if path[0] == "tunables")
        self.origins[inst.instance] = replace(origin, shared=shared)

    def shared(self, declared: dict[str, S.Tunable], own: set[str]) -> dict[str, tuple]:
        """The shared tunables a row takes: those its variant declares and it does not bind."""
        out = {}
        for t in declared:
            if t not in own and t in self.spec.tunables:
                out[t] = (self.spec.tunables[t], ("tunables", t))
                self.used_shared.add(t)
        return out

    def instance(self, i: int, inst: Instance) -> None:
        prefix = ("instances", i)
        locs = {k[2:]: v for k, v in self.lm.locs.items() if k[:2] == prefix}
        declared = self.declared(inst.variant)
        self.add(inst, RowOrigin(i), locs, self.shared(declared, set(inst.tunables)))

    def tree(self, i: int, e: TreeEntry) -> None:
        levels = self.templates.get(e.template)
        if levels is None:
            key = (
                ("instances", i, "template")
                if "template" in e.model_fields_set
                else ("instances", i, "tree")
            )
            self.err(
                f"unknown mapping template '{e.template}'",
                *key,
                hint="templates: " + ", ".join(sorted(self.templates)),
            )
            return
        if not levels:
            self.err(f"template '{e.template}' has no levels", "templates", e.template)
            return
        at = ("instances", i)
        if e.proc is not None and e.proc != levels[0].proc:
            self.err(
                f"template '{e.template}' starts on {levels[0].proc}, not {e.proc}",
                *at,
                "proc",
                hint=f"write `proc: {levels[0].proc}` or drop `proc:`",
            )
            return
        name = e.instance or e.tree
        tree_loc = self.lm.loc(*at, "tree")
        names = [name + lv.suffix for lv in levels]
        variants = [lv.variant.replace("{tree}", e.tree) for lv in levels]
        missing = [v for v in variants if self.prog.variant(v) is None]
        if missing:
            have = ", ".join(x.name for x in self.prog.tasks().get(e.tree, [])) or "none"
            self.err(
                f"template '{e.template}' maps task '{e.tree}' to variant(s) "
                f"{', '.join(dict.fromkeys(missing))}, which {self.prog.path} lacks",
                *at,
                "tree",
                hint=f"variants of '{e.tree}': {have}; name the tree's variants "
                f"{', '.join(dict.fromkeys(variants))}, or map it instance by instance",
            )
            return
        lists = {"top": ("mems", e.mems)}
        inner = e.inner_mems if e.inner_mems is not None else e.mems
        lists["inner"] = ("inner_mems" if e.inner_mems is not None else "mems", inner)
        leaf = (
            e.leaf_mems
            if e.leaf_mems is not None
            else [Mem.REGISTER if m == Mem.NONE else m for m in inner]
        )
        lists["leaf"] = ("leaf_mems" if e.leaf_mems is not None else lists["inner"][0], leaf)
        entry_used: set[str] = set()
        for k, (lv, row, variant) in enumerate(zip(levels, names, variants)):
            key, mems = lists[lv.mems]
            params = self.prog.variant(variant).tensor_params  # type: ignore[union-attr]
            if len(mems) != len(params):
                self.err(
                    f"'{variant}' has {len(params)} tensor parameter(s) "
                    f"({', '.join(p.name for p in params)}), {key} lists {len(mems)}",
                    *at,
                    key,
                )
                return
            declared = self.declared(variant)
            # the entry's own values beat the template's, which beat the shared ones
            mine = {t: (v, (*at, "tunables", t)) for t, v in e.tunables.items() if t in declared}
            fixed = {t: v for t, v in lv.tunables.items() if t in declared and t not in mine}
            entry_used |= set(mine)
            take = {
                **mine,
                **{t: v for t, v in self.shared(declared, set(fixed) | set(mine)).items()},
            }
            inst = Instance(
                instance=row,
                variant=variant,
                proc=lv.proc,
                mems=list(mems),
                tunables=fixed,
                calls=[names[k + 1]] if k + 1 < len(levels) else [],
            )
            locs: dict[tuple, Loc] = {
                (): self.lm.loc(*at),
                ("instance",): self.lm.loc(*at, "instance") if e.instance else tree_loc,
                ("variant",): tree_loc,
                ("proc",): self.lm.loc(*at, "proc") if e.proc else tree_loc,
                ("mems",): self.lm.loc(*at, key),
                ("tunables",): self.lm.loc(*at, "tunables") if e.tunables else tree_loc,
                ("calls",): tree_loc,
                ("calls", 0): tree_loc,
            }
            for j in range(len(mems)):
                locs[("mems", j)] = self.lm.loc(*at, key, j)
            for t in fixed:
                locs[("tunables", t)] = tree_loc
            self.add(inst, RowOrigin(i, e.template, k), locs, take)
        for t in e.tunables:
            if t not in entry_used:
                self.err(
                    f"no level of tree '{e.tree}' declares tunable '{t}'",
                    *at,
                    "tunables",
                    t,
                    hint="declared: "
                    + (
                        ", ".join(sorted({d for v in variants for d in self.declared(v)}))
                        or "(none)"
                    ),
                )
