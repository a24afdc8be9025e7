"""The kernel's ABI, ``<name>.json`` as ``cypressc build`` writes it: :class:`KernelInfo`
(parameters, sizes, float parameters, ``flops`` and ``requires`` as C text and expression trees), validated
field by field when read: whatever the file holds, reading it raises ``ValueError`` naming the
field (or ``OSError`` when it cannot be read), and a :class:`KernelInfo` that was read
evaluates its expressions without surprises (:meth:`KernelInfo.flops_at`)."""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dtypes import DTYPES
from .errors import KernelError, brief
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
_ARCH = re.compile(r"([0-9]+[a-z]?)?\Z")  # nvcc's sm_<arch>: 90a, 100a, 80 ("" is the default)
_INT64_MAX = (1 << 63) - 1

_OLD_INFO = (
    "; an info with C text only was written by an older cypressc: rebuild the kernel "
    "with `cypressc build` to get the expression trees"
)


def _expr_field(v: Any, what: str, sizes: Sequence[str]) -> tuple[str, Mapping[str, Any]]:
    """``{"c": C text, "tree": expression tree}`` of the info, checked against the sizes."""
    if not (isinstance(v, Mapping) and isinstance(v.get("c"), str) and "tree" in v):
        raise ValueError(
            f"kernel info: {what} must be an object with 'c' (C text) and 'tree' (an "
            f"expression tree), got {brief(v)}" + (_OLD_INFO if isinstance(v, (str, list)) else "")
        )
    try:
        used = expr_names(v["tree"])
    except ValueError as e:
        raise ValueError(f"kernel info: {what}.tree ({brief(v['c'])}): {e}") from None
    if bad := [n for n in dict.fromkeys(used) if n not in sizes]:
        raise ValueError(
            f"kernel info: {what}.tree ({brief(v['c'])}) uses {', '.join(bad)[:200]}, not "
            f"among the sizes ({', '.join(sizes)})"
        )
    return v["c"], v["tree"]


def _floats(v: Any, params: Sequence[str], sizes: Sequence[str]) -> tuple[str, ...]:
    """The info's optional ``floats``: distinct C identifiers, none a param or size name."""
    if not isinstance(v, list):
        raise ValueError(f"kernel info: 'floats' must be a list of names, got {brief(v)}")
    for i, f in enumerate(v):
        if not isinstance(f, str) or not _IDENT.match(f) or f.startswith("cyp_"):
            raise ValueError(
                f"kernel info: floats[{i}]: float {brief(f)} is not a C identifier (or uses the "
                "reserved prefix cyp_)"
            )
    if len(set(v)) != len(v) or set(v) & (set(params) | set(sizes)):
        raise ValueError(
            f"kernel info: float names must be distinct from each other and from the "
            f"param and size names: {v} {list(params)} {list(sizes)}"
        )
    return tuple(v)


def _aliases(v: Any, names: Sequence[str], sizes: Sequence[str]) -> dict[str, str]:
    """The info's optional ``aliases``: other names of sizes (identifiers that are no param,
    size or float name) -> a size."""
    if not (
        isinstance(v, Mapping)
        and all(isinstance(k, str) and _IDENT.match(k) and isinstance(s, str) for k, s in v.items())
    ):
        raise ValueError(
            f"kernel info: 'aliases' must map identifiers to size names, got {brief(v)}"
        )
    if bad := [k for k, s in v.items() if s not in sizes or k in names]:
        raise ValueError(
            f"kernel info: aliases {', '.join(bad)} must name a size ({', '.join(sizes)}) and "
            "be no param, size or float name"
        )
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
    bindings: Mapping[str, str] = field(
        default_factory=dict
    )  # program parameters: {"T": "bf16", ...}
    floats: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> KernelInfo:
        """Validate and convert the info dict (``json.loads`` of ``<name>.json``).

        Raises ``ValueError`` naming the bad field by its path in the JSON (``params[1].dtype``,
        ``requires[0].tree``) for anything ``cypressc build`` does not write: ``d`` not an
        object, a missing key, a value of the wrong type, a name that is not a C identifier, a
        dtype not in :data:`DTYPES`, a fixed dimension that is not a positive ``int64_t``, an
        expression tree that is malformed, reads a name that is not a size or holds a
        constant that is not an ``int64_t`` or a finite double (:func:`expr_names`).  Keys it
        does not know are ignored.  Nothing else escapes: every value is type-checked before
        it is hashed, compared or printed."""
        if not isinstance(d, Mapping):
            raise ValueError(
                f"kernel info: expected a JSON object, got {type(d).__name__} {brief(d)}"
            )

        def need(key: str, typ: type) -> Any:
            if key not in d:
                raise ValueError(f"kernel info: missing {key!r}")
            if not isinstance(d[key], typ):
                raise ValueError(
                    f"kernel info: {key!r} must be a {typ.__name__}, got {brief(d[key])}"
                )
            return d[key]

        name = need("name", str)
        if not _IDENT.match(name):
            raise ValueError(f"kernel info: name {brief(name)} is not a C identifier")
        sizes = tuple(need("sizes", list))
        for i, s in enumerate(sizes):
            if not isinstance(s, str) or not _IDENT.match(s) or s.startswith("cyp_"):
                raise ValueError(
                    f"kernel info: sizes[{i}] {brief(s)} is not a C identifier (or uses "
                    "the reserved prefix cyp_)"
                )
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"kernel info: duplicate size names in {list(sizes)}")
        params = []
        for i, p in enumerate(need("params", list)):
            if not isinstance(p, Mapping):
                raise ValueError(f"kernel info: params[{i}] must be an object, got {brief(p)}")
            pn = p.get("name")
            if not isinstance(pn, str) or not _IDENT.match(pn) or pn.startswith("cyp_"):
                raise ValueError(f"kernel info: params[{i}].name {brief(pn)} is not a C identifier")
            dtype = p.get("dtype")
            if not isinstance(dtype, str) or dtype not in DTYPES:
                raise ValueError(
                    f"kernel info: params[{i}].dtype (param {pn!r}) is {brief(dtype)}; "
                    f"expected one of {', '.join(DTYPES)}"
                )
            dims = p.get("dims")
            if not isinstance(dims, list) or not dims:
                raise ValueError(
                    f"kernel info: params[{i}].dims (param {pn!r}) must be a non-empty "
                    f"list, got {brief(dims)}"
                )
            for j, dim in enumerate(dims):
                if isinstance(dim, bool) or not (
                    (isinstance(dim, int) and 1 <= dim <= _INT64_MAX)
                    or (isinstance(dim, str) and dim in sizes)
                ):
                    raise ValueError(
                        f"kernel info: params[{i}].dims[{j}] (param {pn!r}) is {brief(dim)}: "
                        f"neither a size ({', '.join(sizes)}) nor a positive int64_t"
                    )
            reads, writes = p.get("reads"), p.get("writes")
            if not isinstance(reads, bool) or not isinstance(writes, bool) or not (reads or writes):
                raise ValueError(
                    f"kernel info: params[{i}] (param {pn!r}) needs booleans 'reads'/'writes', "
                    f"at least one true, got {brief(reads)}/{brief(writes)}"
                )
            params.append(Param(pn, dtype, tuple(dims), reads, writes))
        names = [p.name for p in params]
        if len(set(names)) != len(names) or set(names) & set(sizes):
            raise ValueError(
                f"kernel info: param and size names must be distinct: {names} {list(sizes)}"
            )
        floats = _floats(d.get("floats", []), names, sizes)
        if "flops" not in d:
            raise ValueError("kernel info: missing 'flops'")
        flops, flops_tree = _expr_field(d["flops"], "flops", sizes)
        if not isinstance(d.get("requires", []), list):
            raise ValueError(f"kernel info: 'requires' must be a list, got {brief(d['requires'])}")
        requires = []
        for i, r in enumerate(d.get("requires", [])):
            if not (isinstance(r, Mapping) and isinstance(r.get("why"), str)):
                raise ValueError(
                    f"kernel info: requires[{i}] must be an object with 'c', 'tree' and "
                    f"'why' (the message), got {brief(r)}"
                    + (_OLD_INFO if isinstance(r, list) else "")
                )
            requires.append(Requirement(*_expr_field(r, f"requires[{i}]", sizes), r["why"]))
        bindings = d.get("bindings", {})
        if not (
            isinstance(bindings, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in bindings.items())
        ):
            raise ValueError(
                f"kernel info: 'bindings' must map parameter names to strings, got {brief(bindings)}"
            )
        runtime_include = d.get("runtime_include", "")
        if not isinstance(runtime_include, str) or any(c in runtime_include for c in "\0\n\r"):
            raise ValueError(
                f"kernel info: 'runtime_include' must be a directory path (a string on one "
                f"line), got {brief(runtime_include)}"
            )
        cuda_arch = d.get("cuda_arch", "90a")
        if not isinstance(cuda_arch, str) or not _ARCH.match(cuda_arch):
            raise ValueError(
                f"kernel info: 'cuda_arch' must be a GPU architecture like \"90a\", got "
                f"{brief(cuda_arch)}"
            )
        aliases = _aliases(d.get("aliases", {}), [*names, *sizes, *floats], sizes)
        return cls(
            name,
            tuple(params),
            sizes,
            flops,
            flops_tree,
            tuple(requires),
            runtime_include,
            cuda_arch,
            dict(bindings),
            floats,
            aliases,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": [
                {
                    "name": p.name,
                    "dtype": p.dtype,
                    "dims": list(p.dims),
                    "reads": p.reads,
                    "writes": p.writes,
                }
                for p in self.params
            ],
            "sizes": list(self.sizes),
            **({"floats": list(self.floats)} if self.floats else {}),
            "flops": {"c": self.flops, "tree": self.flops_tree},
            "requires": [{"c": r.c, "tree": r.tree, "why": r.why} for r in self.requires],
            "runtime_include": self.runtime_include,
            "cuda_arch": self.cuda_arch,
            **({"bindings": dict(self.bindings)} if self.bindings else {}),
            **({"aliases": dict(self.aliases)} if self.aliases else {}),
        }

    @classmethod
    def load_json(cls, path: str | Path) -> KernelInfo:
        """Read ``<name>.json``.  Raises ``OSError`` (``FileNotFoundError``, ...) when the file
        cannot be read, ``ValueError`` starting with the path when it is not UTF-8 JSON
        (nested too deeply included) or not a kernel info (:meth:`from_dict`)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}: not UTF-8 text (byte {e.start}): not a kernel info"
            ) from None
        try:
            d = json.loads(text)
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deeply to be a kernel info") from None
        except ValueError as e:  # JSONDecodeError, or an integer past Python's digit limit
            raise ValueError(f"{path}: not JSON: {e}") from None
        try:
            return cls.from_dict(d)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

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

    def _env(self, sizes: Mapping[str, Any], used: Sequence[str]) -> dict[str, int]:
        """The sizes, checked: each of the kernel's sizes that is given an ``int64_t``, each
        that the expression reads given."""
        if not isinstance(sizes, Mapping):
            raise KernelError(
                f"{self.name}: sizes must be a mapping of size names to ints "
                f"({', '.join(self.sizes)}), got {type(sizes).__name__}"
            )
        if missing := [n for n in dict.fromkeys(used) if n not in sizes]:
            raise KernelError(
                f"{self.name}: missing size {', '.join(missing)} (sizes: {', '.join(self.sizes)})"
            )
        env = {}
        for n in self.sizes:
            if n not in sizes:
                continue
            v = sizes[n]
            if (
                isinstance(v, bool)
                or not isinstance(v, numbers.Integral)
                or not -_INT64_MAX - 1 <= v <= _INT64_MAX
            ):
                raise KernelError(
                    f"{self.name}: size {n} must be an int (an int64_t), got "
                    f"{type(v).__name__} {brief(v)}"
                )
            env[n] = int(v)
        return env

    def _eval(
        self, trees: Sequence[tuple[str, Mapping[str, Any]]], sizes: Mapping[str, Any]
    ) -> list[int | float]:
        """Each ``(C text, tree)`` evaluated at ``sizes`` (checked once, :meth:`_env`)."""
        env = self._env(sizes, [n for _, t in trees for n in expr_names(t)])
        out = []
        for c, t in trees:
            try:
                out.append(eval_expr(t, env))
            except (ZeroDivisionError, OverflowError) as e:
                at = ", ".join(f"{k}={v}" for k, v in env.items())
                raise KernelError(f"{self.name}: {c} cannot be evaluated at {at}: {e}") from None
        return out

    def flops_at(self, sizes: Mapping[str, int]) -> float:
        """The ``flops`` expression evaluated (C semantics) at the given sizes.  Raises
        :class:`KernelError` for a size of the kernel that is given but not an int (an
        ``int64_t``), one the expression reads that is missing, or a division by zero or an
        overflow at these sizes."""
        what = f"flops ({self.flops})"
        v = self._eval([(what, self.flops_tree)], sizes)[0]
        try:
            return float(v)
        except OverflowError:  # an integer expression past what a double holds
            raise KernelError(
                f"{self.name}: {what} is too large for a double at these sizes"
            ) from None

    def failed_requires(self, sizes: Mapping[str, int]) -> list[str]:
        """Messages (``why``) of the ``requires`` conditions that do not hold at ``sizes``.
        Raises :class:`KernelError` like :meth:`flops_at`."""
        held = self._eval([(f"requires ({r.c})", r.tree) for r in self.requires], sizes)
        return [r.why for r, ok in zip(self.requires, held) if not ok]
