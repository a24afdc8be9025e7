"""Load a YAML mapping with a line number for every key and value (DESIGN §2).

Schema errors from pydantic are reported at the YAML line of the offending key, as
``file:line:col: error[M0xx]: …`` diagnostics; empty files, binary garbage and YAML
syntax errors are located errors too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang.source import decode_error_position
from cypressc.mapping.schema import ENTRY_TAGS, MappingSpec

__all__ = ["LoadedMapping", "RowOrigin", "load_mapping", "load_mapping_source"]

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class RowOrigin:
    """Where a row of an expanded mapping came from (:mod:`cypressc.mapping.templates`): the
    index of the entry the user wrote in ``instances:``, for a ``tree:`` entry its template
    and the level (0 = the template's first row), and the tunables the mapping's shared
    ``tunables:`` bound in it."""

    entry: int
    template: str | None = None
    level: int = 0
    shared: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadedMapping:
    """A validated mapping plus the source location of every YAML node by its key path
    (``("instances", 2, "proc")``).  ``origins`` (instance name -> :class:`RowOrigin`) is
    filled in by :func:`cypressc.mapping.templates.expand`; empty for a mapping as loaded."""

    spec: MappingSpec
    path: str
    locs: dict[Path_, Loc]
    origins: dict[str, RowOrigin] = field(default_factory=dict)

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
# A real mapping nests 5 levels (instances / instance / tunables / value).  PyYAML's
# composer and _convert recurse once per level, so a few hundred levels would exhaust
# Python's stack: refuse deep nesting up front, at the collection that goes too deep.
MAX_DEPTH = 64


def _check_depth(text: str, lines: list[str], file: str) -> None:
    """Raise a located M000 where ``text`` nests collections more than :data:`MAX_DEPTH` deep.

    Walks PyYAML's event stream, which is produced iteratively (no recursion), so it
    works on inputs the composer would overflow on; YAML syntax errors propagate as
    :class:`yaml.MarkedYAMLError`.
    """
    depth = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                m = ev.start_mark
                raise CypressError(
                    "M000",
                    f"the mapping nests lists/mappings more than {MAX_DEPTH} levels deep",
                    Loc(
                        file,
                        m.line + 1,
                        m.column + 1,
                        m.column + 2,
                        lines[m.line] if m.line < len(lines) else "",
                    ),
                    hint="a mapping is a few levels deep: instances, their keys, tunables",
                )
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def _convert(
    node: yaml.Node,
    path: Path_,
    lines: list[str],
    file: str,
    locs: dict[Path_, Loc],
    key_locs: dict[Path_, Loc],
    _active: set[int] | None = None,
    _count: list[int] | None = None,
    _depth: int = 0,
) -> object:
    """Turn a composed YAML node into Python data, recording the location of every node.

    Merge keys (``<<: *defaults``) are honoured: merged keys come first and the mapping's
    own keys override them.  Recursive aliases, alias bombs, nesting deeper than
    :data:`MAX_DEPTH` through aliases, and scalars that do not convert under their tag
    (``!!int abc``) are located M000 errors; a key that is a list or a mapping (YAML's
    ``? [a, b]`` complex keys) is a located M002.
    """
    active = set() if _active is None else _active
    count = [0] if _count is None else _count

    def mk(mark: yaml.Mark, end: yaml.Mark | None = None) -> Loc:
        line = mark.line + 1
        end_col = end.column + 1 if end is not None and end.line == mark.line else 0
        return Loc(
            file, line, mark.column + 1, end_col, lines[mark.line] if mark.line < len(lines) else ""
        )

    def sub(n: yaml.Node, p: Path_) -> object:
        return _convert(n, p, lines, file, locs, key_locs, active, count, _depth + 1)

    count[0] += 1
    if count[0] > _MAX_NODES:
        raise CypressError(
            "M000",
            "the mapping expands to too many YAML nodes (alias bomb?)",
            mk(node.start_mark, node.end_mark),
        )
    if _depth > MAX_DEPTH:
        # only reachable through aliases: _check_depth bounds the written nesting
        raise CypressError(
            "M000",
            f"aliases nest the mapping more than {MAX_DEPTH} levels deep",
            mk(node.start_mark, node.end_mark),
            hint="an alias (*name) expands to its anchor's whole value",
        )
    if id(node) in active:
        raise CypressError(
            "M000",
            "recursive YAML alias: a node contains itself",
            mk(node.start_mark, node.end_mark),
        )
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
                    raise CypressError(
                        "M000",
                        "'<<' merges a mapping or a list of mappings",
                        mk(v.start_mark, v.end_mark),
                    )
                for m in parts:
                    for mk_, mv in m.items():
                        if mk_ not in own and mk_ not in out:
                            out[mk_] = mv
                locs[path] = mk(node.start_mark, node.end_mark)
                continue
            if not isinstance(k, yaml.ScalarNode):
                what = "a list" if isinstance(k, yaml.SequenceNode) else "a mapping"
                raise CypressError(
                    "M002",
                    f"a key must be a plain name, not {what}",
                    mk(k.start_mark, k.end_mark),
                    hint="`? [a, b]` and `{a: 1}: x` are YAML complex keys; "
                    "mapping keys are names such as `proc:`",
                )
            key = k.value
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
        msg = (
            f"unsupported YAML tag '{node.tag}'"
            if isinstance(e, yaml.YAMLError)
            else f"{node.value!r} is not a valid !!{tag}"
        )
        raise CypressError(
            "M000",
            msg,
            mk(node.start_mark, node.end_mark),
            hint="mappings use plain YAML scalars; drop the explicit tag",
        ) from None


def _field_name(loc: tuple) -> str:
    """``("instances", 2, "mems", 1)`` -> ``mems[1]``: the last key plus trailing indices."""
    parts = list(loc)
    idx: list[str] = []
    while parts and isinstance(parts[-1], int):
        idx.insert(0, f"[{parts.pop()}]")
    return (str(parts[-1]) if parts else "mapping") + "".join(idx)


# what a strict type error expected, in the words of docs/language.md §6
_EXPECTED = {
    "string_type": "a string",
    "str_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "a mapping (key: value)",
    "mapping_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "less_than_equal": ("le", "at most"),
    "greater_than": ("gt", "above"),
    "less_than": ("lt", "below"),
    "multiple_of": ("multiple_of", "a multiple of"),
}
_ITEMS = {"instances": "instance", "calls": "instance"}


def _got(v: object) -> str:
    """A YAML value as the user wrote it, for ``(got …)``."""
    if v is None:
        return "an empty value"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return repr(v)


def _pydantic_message(err: dict) -> str:
    """One schema error in the project's words, chosen by pydantic's error *type*: the
    library's own English (``List should have at least 1 item after validation``) never
    reaches the user.  Messages of the schema's own validators (``value_error``) are ours."""
    t, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx") or {}
    field = _field_name(loc)
    got = _got(err.get("input"))
    if t == "extra_forbidden":
        return f"unknown key '{field}'"
    if t == "missing":
        return f"missing key '{field}'"
    if t in ("value_error", "assertion_error"):
        return f"'{field}': {str(ctx.get('error') or err['msg']).removeprefix('Value error, ')}"
    if t == "literal_error" and "expected" in ctx:
        return f"'{field}': expected {ctx['expected']} (got {got})"
    if t in ("too_short", "too_long"):
        n = ctx.get("min_length" if t == "too_short" else "max_length")
        item = _ITEMS.get(field, "item")
        count = "one" if n == 1 else str(n)
        if t == "too_short":
            need = f"at least {count} {item}{'' if n == 1 else 's'}"
            return (
                f"'{field}' is empty; it needs {need}"
                if not ctx.get("actual_length")
                else f"'{field}' needs {need} (got {ctx['actual_length']})"
            )
        return f"'{field}' takes at most {count} {item}{'' if n == 1 else 's'} (got {ctx.get('actual_length')})"
    if t in _BOUNDS:
        key, words = _BOUNDS[t]
        return f"'{field}' must be {words} {ctx.get(key)} (got {got})"
    if t in ("model_type", "model_attributes_type") and len(loc) >= 2 and loc[-2] == "instances":
        return (
            f"'{field}': an instance is a mapping of instance, variant, proc, mems, … (got {got})"
        )
    if t in _EXPECTED:
        return f"'{field}': expected {_EXPECTED[t]} (got {got})"
    return f"'{field}': this value is not allowed here (got {got})"


def load_mapping_source(text: str, path: str = "<string>") -> LoadedMapping:
    """Parse and schema-validate mapping YAML text; raises :class:`CypressErrors`."""
    # YAML allows a byte-order mark; dropped here, it is neither shown nor a column
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        raise CypressErrors(
            [CypressError("M000", "the mapping is binary, not YAML", Loc(path, 1, 1))]
        )
    lines = text.splitlines()
    try:
        _check_depth(text, lines, path)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except CypressError as e:
        raise CypressErrors([e]) from None
    except yaml.MarkedYAMLError as e:

        def at(mark: yaml.Mark | None) -> Loc:
            line = mark.line + 1 if mark else 1
            col = mark.column + 1 if mark else 1
            return Loc(path, line, col, col + 1, lines[line - 1] if 0 < line <= len(lines) else "")

        mark = e.problem_mark or e.context_mark
        notes: tuple[tuple[str, Loc], ...] = ()
        if (
            e.context
            and e.context_mark is not None
            and e.problem_mark is not None
            and (e.context_mark.line, e.context_mark.column)
            != (e.problem_mark.line, e.problem_mark.column)
        ):
            notes = ((f"{e.context}, which starts here", at(e.context_mark)),)
        raise CypressErrors(
            [
                CypressError(
                    "M000",
                    f"YAML syntax error: {e.problem or e}",
                    at(mark),
                    notes=notes,
                    hint="mappings are YAML: `key: value`, lists as `- item`, indentation with spaces",
                )
            ]
        ) from None
    except yaml.YAMLError as e:
        raise CypressErrors([CypressError("M000", f"YAML error: {e}", Loc(path, 1, 1))]) from None
    if node is None:
        raise CypressErrors(
            [
                CypressError(
                    "M000",
                    "the mapping is empty",
                    Loc(path, 1, 1),
                    hint="a mapping has keys machine, entrypoint and instances",
                )
            ]
        )
    locs: dict[Path_, Loc] = {}
    key_locs: dict[Path_, Loc] = {}
    try:
        data = _convert(node, (), lines, path, locs, key_locs)
    except CypressError as e:
        raise CypressErrors([e]) from None
    except yaml.YAMLError as e:
        raise CypressErrors([CypressError("M000", f"YAML error: {e}", Loc(path, 1, 1))]) from None
    if not isinstance(data, dict):
        raise CypressErrors(
            [
                CypressError(
                    "M002",
                    "the mapping must be a YAML mapping (key: value)",
                    locs[()],
                    hint="start with `machine: h100`",
                )
            ]
        )
    try:
        spec = MappingSpec.model_validate(data)
    except ValidationError as ve:
        errs = []
        for err in ve.errors():
            err = _untagged(err)
            key = tuple(err["loc"])
            # point at the key for unknown/bad keys, at the parent for missing ones
            loc = key_locs.get(key) or locs.get(key)
            k = key
            while loc is None and k:
                k = k[:-1]
                loc = locs.get(k)
            errs.append(
                CypressError(
                    "M002", _pydantic_message(err), loc or Loc(path, 1, 1), hint=_hint(err)
                )
            )
        raise CypressErrors(errs) from None
    all_locs = {**locs, **{k: v for k, v in key_locs.items() if k not in locs}}
    for i in range(len(spec.instances)):
        at = ("instances", i)
        if at + ("variant",) not in all_locs and at + ("instance",) in all_locs:
            # `variant:` defaulted to the instance's name: a diagnostic about it points there
            all_locs[at + ("variant",)] = all_locs[at + ("instance",)]
    return LoadedMapping(spec, path, all_locs)


def _untagged(err: dict) -> dict:
    """``err`` without the tag pydantic puts in the location of an entry of ``instances:``
    (``("instances", 2, "tree", "mems")`` -> ``("instances", 2, "mems")``), so the error is
    located at the key the user wrote.  The tag is kept as ``entry``."""
    loc = tuple(err["loc"])
    if len(loc) >= 3 and loc[0] == "instances" and loc[2] in ENTRY_TAGS:
        return {**err, "loc": loc[:2] + loc[3:], "entry": loc[2]}
    return err


def _hint(err: dict) -> str | None:
    """What to write instead, where the error type says more than the message."""
    t, loc, got = err["type"], tuple(err["loc"]), err.get("input")
    if t == "extra_forbidden":
        from cypressc.mapping.schema import Instance, TemplateLevel, TreeEntry

        entry = TreeEntry if err.get("entry") == "tree" else Instance
        keys = (
            entry.model_fields
            if loc[:1] == ("instances",)
            else TemplateLevel.model_fields
            if loc[:1] == ("templates",)
            else MappingSpec.model_fields
        )
        return "allowed keys: " + ", ".join(keys)
    if t == "too_short" and loc == ("instances",):
        return "list at least the entrypoint: `- {instance: NAME, variant: DEF, proc: HOST, mems: [GLOBAL, …]}`"
    if t in ("model_type", "model_attributes_type") and len(loc) >= 2 and loc[-2] == "instances":
        return "write each instance as `- instance: NAME` with variant:, proc:, mems: … indented under it"
    if (
        isinstance(got, str)
        and t in ("int_type", "int_parsing")
        and got.strip().lstrip("+-").isdigit()
    ):
        return f"write the number without quotes: `{_field_name(loc)}: {got.strip()}`"
    if t in ("bool_type", "bool_parsing"):
        return "write `true` or `false`"
    return None


def load_mapping(path: str | Path) -> LoadedMapping:
    """Read and validate a mapping file; missing/unreadable/non-UTF-8 files are located errors."""
    return load_mapping_source(read_mapping_text(path), str(path))


def read_mapping_text(path: str | Path) -> str:
    """A mapping file's text; a missing, unreadable (a directory), binary or non-UTF-8 file is
    a located M000 (:class:`CypressErrors`)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise CypressErrors(
            [CypressError("M000", f"no such file: {path}", Loc(str(path)))]
        ) from None
    except OSError as e:
        raise CypressErrors(
            [CypressError("M000", f"cannot read {path}: {e.strerror}", Loc(str(path)))]
        ) from None
    if b"\x00" in data:
        raise CypressErrors(
            [CypressError("M000", "the mapping is binary, not YAML", Loc(str(path), 1, 1))]
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # point at the first byte that is not UTF-8
        line, col = decode_error_position(data, e.start)
        raise CypressErrors(
            [
                CypressError(
                    "M000",
                    "the mapping is not UTF-8 text",
                    Loc(str(path), line, col, col + 1),
                    hint="save the mapping as UTF-8",
                )
            ]
        ) from None
    return text
