"""Load a YAML mapping with a line number for every key and value (DESIGN §2).

Schema errors from pydantic are reported at the YAML line of the offending key, as
``file:line:col: error[M0xx]: …`` diagnostics; empty files, binary garbage and YAML
syntax errors are located errors too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.mapping.schema import MappingSpec

__all__ = ["LoadedMapping", "load_mapping", "load_mapping_source"]

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class LoadedMapping:
    """A validated mapping plus the source location of every YAML node by its key path
    (``("instances", 2, "proc")``)."""

    spec: MappingSpec
    path: str
    locs: dict[Path_, Loc]

    def loc(self, *key: str | int) -> Loc:
        """The location of the deepest known prefix of ``key``."""
        k = tuple(key)
        while k and k not in self.locs:
            k = k[:-1]
        return self.locs.get(k, Loc(self.path, 1, 1))

    def instance_loc(self, name: str, *key: str | int) -> Loc:
        for i, inst in enumerate(self.spec.instances):
            if inst.instance == name:
                return self.loc("instances", i, *key)
        return Loc(self.path, 1, 1)


def _convert(node: yaml.Node, path: Path_, lines: list[str], file: str,
             locs: dict[Path_, Loc], key_locs: dict[Path_, Loc]) -> object:
    def mk(mark: yaml.Mark, end: yaml.Mark | None = None) -> Loc:
        line = mark.line + 1
        end_col = end.column + 1 if end is not None and end.line == mark.line else 0
        return Loc(file, line, mark.column + 1, end_col, lines[mark.line] if mark.line < len(lines) else "")

    locs[path] = mk(node.start_mark, node.end_mark)
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            if key in out:
                raise CypressError("M001", f"duplicate key '{key}'", mk(k.start_mark, k.end_mark))
            out[key] = _convert(v, path + (key,), lines, file, locs, key_locs)
            key_locs[path + (key,)] = mk(k.start_mark, v.end_mark)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(v, path + (i,), lines, file, locs, key_locs) for i, v in enumerate(node.value)]
    return yaml.constructor.SafeConstructor().construct_object(node)  # type: ignore[arg-type]


def _pydantic_message(err: dict) -> str:
    t, loc, msg = err["type"], err["loc"], err["msg"]
    field = str(loc[-1]) if loc else "mapping"
    if t == "extra_forbidden":
        return f"unknown key '{field}'"
    if t == "missing":
        return f"missing key '{field}'"
    if t == "literal_error":
        return f"'{field}': {msg.replace('Input should be', 'expected')} (got {err.get('input')!r})"
    return f"'{field}': {msg}"


def load_mapping_source(text: str, path: str = "<string>") -> LoadedMapping:
    """Parse and schema-validate mapping YAML text; raises :class:`CypressErrors`."""
    if "\x00" in text:
        raise CypressErrors([CypressError("M000", "the mapping is binary, not YAML", Loc(path, 1, 1))])
    lines = text.splitlines()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        col = mark.column + 1 if mark else 1
        raise CypressErrors([CypressError(
            "M000", f"YAML syntax error: {e.problem or e}", Loc(path, line, col, 0,
                                                                 lines[line - 1] if 0 < line <= len(lines) else ""),
            hint="mappings are YAML: `key: value`, lists as `- item`, indentation with spaces")]) from None
    except yaml.YAMLError as e:
        raise CypressErrors([CypressError("M000", f"YAML error: {e}", Loc(path, 1, 1))]) from None
    if node is None:
        raise CypressErrors([CypressError("M000", "the mapping is empty", Loc(path, 1, 1),
                                          hint="a mapping has keys machine, entrypoint and instances")])
    locs: dict[Path_, Loc] = {}
    key_locs: dict[Path_, Loc] = {}
    try:
        data = _convert(node, (), lines, path, locs, key_locs)
    except CypressError as e:
        raise CypressErrors([e]) from None
    except yaml.YAMLError as e:
        raise CypressErrors([CypressError("M000", f"YAML error: {e}", Loc(path, 1, 1))]) from None
    if not isinstance(data, dict):
        raise CypressErrors([CypressError("M002", "the mapping must be a YAML mapping (key: value)",
                                          locs[()], hint="start with `machine: h100`")])
    try:
        spec = MappingSpec.model_validate(data)
    except ValidationError as ve:
        errs = []
        for err in ve.errors():
            key = tuple(err["loc"])
            # point at the key for unknown/bad keys, at the parent for missing ones
            loc = key_locs.get(key) or locs.get(key)
            k = key
            while loc is None and k:
                k = k[:-1]
                loc = locs.get(k)
            errs.append(CypressError("M002", _pydantic_message(err), loc or Loc(path, 1, 1),
                                     hint=_hint(err)))
        raise CypressErrors(errs) from None
    return LoadedMapping(spec, path, {**locs, **{k: v for k, v in key_locs.items() if k not in locs}})


def _hint(err: dict) -> str | None:
    if err["type"] == "extra_forbidden":
        from cypressc.mapping.schema import Instance
        keys = Instance.model_fields if "instances" in err["loc"] else MappingSpec.model_fields
        return "allowed keys: " + ", ".join(keys)
    return None


def load_mapping(path: str | Path) -> LoadedMapping:
    """Read and validate a mapping file; missing/unreadable/non-UTF-8 files are located errors."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise CypressErrors([CypressError("M000", f"no such file: {path}", Loc(str(path)))]) from None
    except OSError as e:
        raise CypressErrors([CypressError("M000", f"cannot read {path}: {e.strerror}", Loc(str(path)))]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CypressErrors([CypressError("M000", "the mapping is not UTF-8 text", Loc(str(path), 1, 1))]) from None
    return load_mapping_source(text, str(path))
