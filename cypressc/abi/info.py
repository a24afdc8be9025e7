"""The kernel's ABI, ``<name>.json`` as ``cypressc build`` writes it: :class:`KernelInfo`
(parameters, sizes, float parameters, ``flops`` and ``requires`` as C text and expression trees), validated
field by field when read."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dtypes import DTYPES
from .exprs import eval_expr, expr_names

__all__ = ["Param", "Requirement", "KernelInfo"]


@dataclass(frozen=True, slots=True)
class Param:
    """One tensor parameter of the launcher.  ``dims`` are size names (or fixed ints),
    outermost first; the tensor is row-major and contiguous."""

    name: str
    dtype: str
    dims: tuple[str | int, ...]
    reads: bool
    writes: bool

    @property
    def shape_str(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.dims)}]"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``requires`` condition of the launcher: ``c`` as the launcher's C tests it (and as
    messages show it), ``tree`` the same condition as an expression tree (:func:`eval_expr`)
    and ``why`` what a caller is told when it fails."""

    c: str
    tree: Mapping[str, Any]
    why: str


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_OLD_INFO = ("; an info with C text only was written by an older cypressc: rebuild the kernel "
             "with `cypressc build` to get the expression trees")


def _expr_field(v: Any, what: str, sizes: Sequence[str]) -> tuple[str, Mapping[str, Any]]:
    """``{"c": C text, "tree": expression tree}`` of the info, checked against the sizes."""
    if not (isinstance(v, Mapping) and isinstance(v.get("c"), str) and "tree" in v):
        raise ValueError(f"kernel info: {what} must be an object with 'c' (C text) and 'tree' (an "
                         f"expression tree), got {v!r}" + (_OLD_INFO if isinstance(v, (str, list)) else ""))
    try:
        used = expr_names(v["tree"])
    except ValueError as e:
        raise ValueError(f"kernel info: {what} ({v['c']!r}): {e}") from None
    if bad := [n for n in dict.fromkeys(used) if n not in sizes]:
        raise ValueError(f"kernel info: expression {v['c']!r} uses {', '.join(bad)}, not among the "
                         f"sizes ({', '.join(sizes)})")
    return v["c"], v["tree"]


def _floats(v: Any, params: Sequence[str], sizes: Sequence[str]) -> tuple[str, ...]:
    """The info's optional ``floats``: distinct C identifiers, none a param or size name."""
    if not isinstance(v, list):
        raise ValueError(f"kernel info: 'floats' must be a list of names, got {v!r}")
    for f in v:
        if not isinstance(f, str) or not _IDENT.match(f) or f.startswith("cyp_"):
            raise ValueError(f"kernel info: float {f!r} is not a C identifier (or uses the reserved "
                             "prefix cyp_)")
    if len(set(v)) != len(v) or set(v) & (set(params) | set(sizes)):
        raise ValueError(f"kernel info: float names must be distinct from each other and from the "
                         f"param and size names: {v} {list(params)} {list(sizes)}")
    return tuple(v)


def _aliases(v: Any, names: Sequence[str], sizes: Sequence[str]) -> dict[str, str]:
    """The info's optional ``aliases``: other names of sizes (identifiers that are no param,
    size or float name) -> a size."""
    if not (isinstance(v, Mapping) and all(isinstance(k, str) and _IDENT.match(k) and isinstance(s, str)
                                           for k, s in v.items())):
        raise ValueError(f"kernel info: 'aliases' must map identifiers to size names, got {v!r}")
    if bad := [k for k, s in v.items() if s not in sizes or k in names]:
        raise ValueError(f"kernel info: aliases {', '.join(bad)} must name a size ({', '.join(sizes)}) and "
                         "be no param, size or float name")
    return dict(v)


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """The ABI of a built kernel, as written to ``<name>.json`` by ``cypressc build``.

    The launcher is ``extern "C" int <name>_launch(<one pointer per param: void* if written,
    const void* if read-only>, <one int64_t per size>, <one float per entry of floats>,
    cudaStream_t)`` and returns a ``cudaError_t`` (``cudaErrorInvalidValue`` when a
    ``requires`` condition fails).  ``floats`` are the program's ``float`` entry parameters
    (values such as a softmax scale; never in a shape or an expression), in the JSON an
    optional list of names that is written only when non-empty.  ``aliases`` are the other
    names of the sizes (an unnamed entry dimension's ``C_d0``, a ``let`` that names the size:
    ``{"C_d0": "M"}``), which keyword sizes may use; in the JSON an optional object written
    only when non-empty.
    ``flops`` (floating-point operations of one launch) is C text, ``flops_tree`` the same
    expression as a tree; in the JSON both are ``"flops": {"c": ..., "tree": ...}`` and each
    ``requires`` entry is ``{"c": ..., "tree": ..., "why": ...}``."""

    name: str
    params: tuple[Param, ...]
    sizes: tuple[str, ...]
    flops: str
    flops_tree: Mapping[str, Any]
    requires: tuple[Requirement, ...]
    runtime_include: str
    cuda_arch: str
    bindings: Mapping[str, str] = field(default_factory=dict)  # program parameters: {"T": "bf16", ...}
    floats: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KernelInfo:
        """Validate and convert the info dict; raises ``ValueError`` naming the bad field."""
        def need(key: str, typ: type) -> Any:
            if key not in d:
                raise ValueError(f"kernel info: missing {key!r}")
            if not isinstance(d[key], typ):
                raise ValueError(f"kernel info: {key!r} must be a {typ.__name__}, got {d[key]!r}")
            return d[key]

        name = need("name", str)
        if not _IDENT.match(name):
            raise ValueError(f"kernel info: name {name!r} is not a C identifier")
        sizes = tuple(need("sizes", list))
        for s in sizes:
            if not isinstance(s, str) or not _IDENT.match(s) or s.startswith("cyp_"):
                raise ValueError(f"kernel info: size {s!r} is not a C identifier (or uses the "
                                 "reserved prefix cyp_)")
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"kernel info: duplicate size names in {list(sizes)}")
        params = []
        for i, p in enumerate(need("params", list)):
            if not isinstance(p, Mapping):
                raise ValueError(f"kernel info: params[{i}] must be an object")
            pn = p.get("name")
            if not isinstance(pn, str) or not _IDENT.match(pn) or pn.startswith("cyp_"):
                raise ValueError(f"kernel info: params[{i}].name {pn!r} is not a C identifier")
            if p.get("dtype") not in DTYPES:
                raise ValueError(f"kernel info: param {pn!r} has dtype {p.get('dtype')!r}; "
                                 f"expected one of {', '.join(DTYPES)}")
            dims = p.get("dims")
            if not isinstance(dims, list) or not dims:
                raise ValueError(f"kernel info: param {pn!r} needs a non-empty list 'dims'")
            for dim in dims:
                if isinstance(dim, bool) or not (
                        (isinstance(dim, int) and dim >= 0) or (isinstance(dim, str) and dim in sizes)):
                    raise ValueError(f"kernel info: param {pn!r} dim {dim!r} is neither a size "
                                     f"({', '.join(sizes)}) nor a non-negative int")
            reads, writes = p.get("reads"), p.get("writes")
            if not isinstance(reads, bool) or not isinstance(writes, bool) or not (reads or writes):
                raise ValueError(f"kernel info: param {pn!r} needs booleans 'reads'/'writes', "
                                 "at least one true")
            params.append(Param(pn, p["dtype"], tuple(dims), reads, writes))
        names = [p.name for p in params]
        if len(set(names)) != len(names) or set(names) & set(sizes):
            raise ValueError(f"kernel info: param and size names must be distinct: {names} {list(sizes)}")
        floats = _floats(d.get("floats", []), names, sizes)
        if "flops" not in d:
            raise ValueError("kernel info: missing 'flops'")
        flops, flops_tree = _expr_field(d["flops"], "'flops'", sizes)
        if not isinstance(d.get("requires", []), list):
            raise ValueError(f"kernel info: 'requires' must be a list, got {d['requires']!r}")
        requires = []
        for i, r in enumerate(d.get("requires", [])):
            if not (isinstance(r, Mapping) and isinstance(r.get("why"), str)):
                raise ValueError(f"kernel info: requires[{i}] must be an object with 'c', 'tree' and "
                                 f"'why' (the message), got {r!r}" + (_OLD_INFO if isinstance(r, list) else ""))
            requires.append(Requirement(*_expr_field(r, f"requires[{i}]", sizes), r["why"]))
        bindings = d.get("bindings", {})
        if not (isinstance(bindings, Mapping) and all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in bindings.items())):
            raise ValueError(f"kernel info: 'bindings' must map parameter names to strings, got {bindings!r}")
        aliases = _aliases(d.get("aliases", {}), [*names, *sizes, *floats], sizes)
        return cls(name, tuple(params), sizes, flops, flops_tree, tuple(requires),
                   str(d.get("runtime_include", "")), str(d.get("cuda_arch", "90a")), dict(bindings), floats,
                   aliases)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name,
                "params": [{"name": p.name, "dtype": p.dtype, "dims": list(p.dims), "reads": p.reads,
                            "writes": p.writes} for p in self.params],
                "sizes": list(self.sizes), **({"floats": list(self.floats)} if self.floats else {}),
                "flops": {"c": self.flops, "tree": self.flops_tree},
                "requires": [{"c": r.c, "tree": r.tree, "why": r.why} for r in self.requires],
                "runtime_include": self.runtime_include, "cuda_arch": self.cuda_arch,
                **({"bindings": dict(self.bindings)} if self.bindings else {}),
                **({"aliases": dict(self.aliases)} if self.aliases else {})}

    @classmethod
    def load_json(cls, path: str | Path) -> KernelInfo:
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ---- size arithmetic (pure Python) ----
    def shape(self, param: Param | str, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape of ``param`` at the given sizes."""
        p = param if isinstance(param, Param) else self.param(param)
        return tuple(d if isinstance(d, int) else int(sizes[d]) for d in p.dims)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}")

    def flops_at(self, sizes: Mapping[str, int]) -> float:
        """The ``flops`` expression evaluated (C semantics) at the given sizes."""
        return float(eval_expr(self.flops_tree, sizes))

    def failed_requires(self, sizes: Mapping[str, int]) -> list[str]:
        """Messages (``why``) of the ``requires`` conditions that do not hold at ``sizes``."""
        return [r.why for r in self.requires if not eval_expr(r.tree, sizes)]

