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


_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_NODES = 50_000  # aliases can expand exponentially ("billion laughs"); a mapping is small


def _convert(node: yaml.Node, path: Path_, lines: list[str], file: str,
             locs: dict[Path_, Loc], key_locs: dict[Path_, Loc],
             _active: set[int] | None = None, _count: list[int] | None = None) -> object:
    """Turn a composed YAML node into Python data, recording the location of every node.

    Merge keys (``<<: *defaults``) are honoured: merged keys come first and the mapping's
    own keys override them.  Recursive aliases, alias bombs and scalars that do not
    convert under their tag (``!!int abc``) are located M000 errors.
    """
    active = set() if _active is None else _active
    count = [0] if _count is None else _count

    def mk(mark: yaml.Mark, end: yaml.Mark | None = None) -> Loc:
        line = mark.line + 1
        end_col = end.column + 1 if end is not None and end.line == mark.line else 0
        return Loc(file, line, mark.column + 1, end_col, lines[mark.line] if mark.line < len(lines) else "")

    def sub(n: yaml.Node, p: Path_) -> object:
        return _convert(n, p, lines, file, locs, key_locs, active, count)

    count[0] += 1
    if count[0] > _MAX_NODES:
        raise CypressError("M000", "the mapping expands to too many YAML nodes (alias bomb?)",
                           mk(node.start_mark, node.end_mark))
    if id(node) in active:
        raise CypressError("M000", "recursive YAML alias: a node contains itself",
                           mk(node.start_mark, node.end_mark))
    locs[path] = mk(node.start_mark, node.end_mark)
    if isinstance(node, yaml.MappingNode):
        active.add(id(node))
        out: dict = {}
        own: set = set()
        for k, v in node.value:
            if k.tag == _MERGE_TAG:
                merged = sub(v, path)
                parts = merged if isinstance(merged, list) else [merged]
                if not all(isinstance(m, dict) for m in parts):
                    raise CypressError("M000", "'<<' merges a mapping or a list of mappings",
                                       mk(v.start_mark, v.end_mark))
                for m in parts:
                    for mk_, mv in m.items():
                        if mk_ not in own and mk_ not in out:
                            out[mk_] = mv
                locs[path] = mk(node.start_mark, node.end_mark)
                continue
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            if key in own:
                raise CypressError("M001", f"duplicate key '{key}'", mk(k.start_mark, k.end_mark))
            own.add(key)
            out[key] = sub(v, path + (key,))
            key_locs[path + (key,)] = mk(k.start_mark, v.end_mark)
        active.discard(id(node))
        return out
    if isinstance(node, yaml.SequenceNode):
        active.add(id(node))
        items = [sub(v, path + (i,)) for i, v in enumerate(node.value)]
        active.discard(id(node))
        return items
    try:
        return yaml.constructor.SafeConstructor().construct_object(node)  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - any failure to build a scalar is a bad scalar
        tag = node.tag.removeprefix("tag:yaml.org,2002:")
        msg = f"unsupported YAML tag '{node.tag}'" if isinstance(e, yaml.YAMLError) \
            else f"{node.value!r} is not a valid !!{tag}"
        raise CypressError("M000", msg, mk(node.start_mark, node.end_mark),
                           hint="mappings use plain YAML scalars; drop the explicit tag") from None


def _field_name(loc: tuple) -> str:
    """``("instances", 2, "mems", 1)`` -> ``mems[1]``: the last key plus trailing indices."""
    parts = list(loc)
    idx: list[str] = []
    while parts and isinstance(parts[-1], int):
        idx.insert(0, f"[{parts.pop()}]")
    return (str(parts[-1]) if parts else "mapping") + "".join(idx)


def _pydantic_message(err: dict) -> str:
    t, loc, msg = err["type"], tuple(err["loc"]), err["msg"]
    field = _field_name(loc)
    if t == "extra_forbidden":
        return f"unknown key '{field}'"
    if t == "missing":
        return f"missing key '{field}'"
    if t == "literal_error":
        return f"'{field}': {msg.replace('Input should be', 'expected')} (got {err.get('input')!r})"
    msg = msg.removeprefix("Value error, ").replace("Input should be", "should be")
    got = err.get("input")
    if isinstance(got, (str, int, float, bool)) and t != "value_error":
        msg += f" (got {got!r})"
    elif isinstance(got, (dict, list)) and t != "value_error":
        msg += f" (got a {'mapping' if isinstance(got, dict) else 'list'})"
    return f"'{field}': {msg}"


def load_mapping_source(text: str, path: str = "<string>") -> LoadedMapping:
    """Parse and schema-validate mapping YAML text; raises :class:`CypressErrors`."""
    if "\x00" in text:
        raise CypressErrors([CypressError("M000", "the mapping is binary, not YAML", Loc(path, 1, 1))])
    lines = text.splitlines()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        def at(mark: yaml.Mark | None) -> Loc:
            line = mark.line + 1 if mark else 1
            col = mark.column + 1 if mark else 1
            return Loc(path, line, col, col + 1, lines[line - 1] if 0 < line <= len(lines) else "")

        mark = e.problem_mark or e.context_mark
        notes: tuple[tuple[str, Loc], ...] = ()
        if e.context and e.context_mark is not None and e.problem_mark is not None \
                and (e.context_mark.line, e.context_mark.column) != (e.problem_mark.line, e.problem_mark.column):
            notes = ((f"{e.context}, which starts here", at(e.context_mark)),)
        raise CypressErrors([CypressError(
            "M000", f"YAML syntax error: {e.problem or e}", at(mark), notes=notes,
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
    if b"\x00" in data:
        raise CypressErrors([CypressError("M000", "the mapping is binary, not YAML", Loc(str(path), 1, 1))])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # point at the first byte that is not UTF-8
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CypressErrors([CypressError("M000", "the mapping is not UTF-8 text", Loc(str(path), line, col, col + 1),
                                          hint="save the mapping as UTF-8")]) from None
    return load_mapping_source(text, str(path))
