"""The lines around a printed module (Cypress paper §4.2; :mod:`cypressc.ir.printer`): the
``target`` and ``external`` headers before it and the ``schedule`` and ``resources`` results
after it (``subs``: the cursors of the lines indented under a result), read for
:mod:`cypressc.ir.reader`.  Errors: E063 at the offending token.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from cypressc.ir.reader_lex import Cursor, Tok
from cypressc.ir.results import Resources, Schedule, SmemSlot
from cypressc.ir.target import BlockKnobs, Target

__all__ = ["attrs", "target", "external", "schedule", "resources"]

_KNOB_TYPES = {
    f.name: "bool" if "bool" in str(f.type) else "tuple" if "tuple" in str(f.type) else "int"
    for f in fields(BlockKnobs)
}
_RESOURCE_KEYS = ("smem_bytes", "smem_limit", "barrier_offset", "barrier_bytes")


def target(c: Cursor, loc) -> Target:
    """``target MACHINE {knob: value, …}``; ``loc(line, tok)`` locates each knob (an error
    about a knob points at its key on this line)."""
    from cypressc.mapping.machine import load_machine, machine_names

    c.expect("target")
    t = c.kind("name", "a machine (h100)")
    try:
        machine = load_machine(t.text)
    except KeyError:
        raise c.error(
            f"unknown machine '{t.text}'", t, f"machines: {', '.join(machine_names())}"
        ) from None
    knobs, locs = {}, {}
    for key, (value, tok) in attrs(c).items():
        if key not in _KNOB_TYPES or key == "instance":
            known = ", ".join(k for k in _KNOB_TYPES if k != "instance")
            raise c.error(f"'{key}' is not a BLOCK knob", tok, f"the knobs: {known}")
        if _KNOB_TYPES[key] != type(value).__name__:
            kind = {"int": "an int", "tuple": "a list of ints, (2, 1)"}.get(
                _KNOB_TYPES[key], "a bool (true or false)"
            )
            raise c.error(f"{key} is {kind}", tok)
        knobs[key], locs[key] = value, loc(c.line, tok)
    c.end()
    return Target(machine, BlockKnobs(**knobs), loc(c.line), locs)


def attrs(c: Cursor) -> dict[str, tuple[object, Tok]]:
    """``{key: value, …}`` with whole numbers, ``true``/``false`` or ``(a, b)`` values;
    empty when the line has no ``{``."""
    out: dict[str, tuple[object, Tok]] = {}

    def value():
        if c.accept("("):
            return tuple(c.listed(value, ")"))
        if c.at("true", "false"):
            return c.kind("name", "true or false").text == "true"
        return c.integer("a value (a whole number, true or false)")

    def item() -> None:
        k = c.kind("name", "a key")
        c.expect(":")
        out[k.text] = (value(), k)

    if c.accept("{"):
        c.listed(item, "}")
    return out


def external(c: Cursor, dirs: list[Path], loc) -> tuple[str, object]:
    """``external NAME(x: tensor[2, f32], …) reads(…) writes(…) = "cpp" in "header"``: a
    user C++ leaf function (paper §3.2), resolved like the program's ``include()``."""
    from cypressc.lang import syntax as L
    from cypressc.lang.externals import find_header, leaf_fn

    c.expect("external")
    name = c.kind("name", "the function's name")

    def par() -> L.Param:
        p = c.kind("name", "a parameter (x: tensor[2, f32])")
        c.expect(":")
        if c.accept("tensor"):
            c.expect("[")
            rank = c.integer("the rank")
            c.expect(",")
            ty: L.Type = L.TensorType(rank, c.kind("name", "an element type").text)
            c.expect("]")
        else:
            t = c.kind("name", "tensor[rank, dtype], int or float")
            if t.text not in ("int", "float"):
                raise c.error(
                    f"unknown parameter type '{t.text}'", t, "tensor[2, f32], int or float"
                )
            ty = L.ScalarType(t.text)
        return L.Param(p.text, ty, loc(c.line, p))

    c.expect("(")
    params = tuple(c.listed(par, ")"))
    names = lambda: tuple(c.listed(lambda: c.kind("name", "a parameter").text, ")"))  # noqa: E731
    c.expect("reads")
    c.expect("(")
    reads = names()
    c.expect("writes")
    c.expect("(")
    writes = names()
    c.expect("=")
    cpp = c.kind("str", 'the C++ function ("ns::f")').text.strip('"')
    c.expect("in")
    h = c.kind("str", 'the header that declares it ("ops.cuh")')
    c.end()
    path = find_header(h.text.strip('"'), dirs)
    if path is None:
        raise c.error(
            f"cannot find the header {h.text} of external '{name.text}'",
            h,
            f"looked in {', '.join(str(d) for d in dirs)}; pass -I DIR, the folder the program "
            "included it from",
        )
    ref = path.with_suffix(".py")
    ext = L.External(
        name.text,
        cpp,
        params,
        reads,
        writes,
        h.text.strip('"'),
        str(ref.resolve()) if ref.is_file() else None,
        loc(c.line, name),
        str(path.resolve()),
    )
    try:
        return name.text, leaf_fn(ext)
    except Exception as e:  # the user's NumPy reference: any failure is theirs, located here
        raise c.error(
            f"the NumPy reference {ref} of '{name.text}' cannot be used: {e}", name
        ) from None


def schedule(c: Cursor, subs, refs: list) -> Schedule:
    """``schedule {warpspecialize: B, persistent: B}`` with ``stages %buf: D, …`` and
    ``channel %e1 -> %e2, …`` lines."""
    c.expect("schedule")
    a = attrs(c)
    c.end()
    stages: dict[str, int] = {}
    channels: dict[str, tuple[str, ...]] = {}
    for s in subs:
        if s.accept("stages"):
            for _ in range(len(s.line.toks)):
                b = s.kind("sym", "a buffer (%A)").name
                s.expect(":")
                stages[b] = s.integer("the stage depth")
                if not s.accept(","):
                    break
        else:
            s.expect("channel", "a schedule line is `stages %A: 2, ...` or `channel %e1 -> %e2`")
            p = s.kind("sym", "the producer copy (%e1)")
            s.expect("->")
            cons = [s.kind("sym", "a consumer event")]
            while s.accept(","):
                cons.append(s.kind("sym", "a consumer event"))
            refs += [(s.line, t) for t in (p, *cons)]
            channels[p.name] = tuple(t.name for t in cons)
        s.end()
    ws, persistent = (bool(a.get(k, (False,))[0]) for k in ("warpspecialize", "persistent"))
    return Schedule(channels, stages, ws, persistent)


def resources(c: Cursor, subs) -> Resources:
    """``resources {smem_bytes: …, smem_limit: …, barrier_offset: …, barrier_bytes: …}``
    with one line per shared tensor, per byte-sharing pair and the register line."""
    c.expect("resources")
    a = attrs(c)
    c.end()
    missing = [k for k in _RESOURCE_KEYS if k not in a]
    if missing:
        raise c.error(
            f"resources without {', '.join(missing)}",
            c.line.toks[0],
            "resources {" + ", ".join(f"{k}: N" for k in _RESOURCE_KEYS) + "}",
        )
    smem: dict[str, SmemSlot] = {}
    war: list[tuple[str, str]] = []
    regs: tuple[int, tuple] | None = None
    for s in subs:
        if s.accept("registers"):
            n = s.integer("the registers per consumer thread")
            s.words(", budget (")
            budget = (s.integer("the producer's registers"), 0)
            s.expect(",")
            regs = (n, (budget[0], s.integer("the consumer's registers")))
            s.expect(")")
        else:
            x = s.kind("sym", "a shared tensor (%A: [0, 1024) 1024 bytes, 1 stage(s))")
            if s.accept("and"):
                war.append((x.name, s.kind("sym", "the tensor sharing its bytes").name))
                s.words("share bytes")
            else:
                s.words(": [")
                off = s.integer("the offset")
                s.expect(",")
                s.integer("the end")
                s.expect(")")
                size = s.integer("the bytes")
                s.words("bytes,")
                smem[x.name] = SmemSlot(off, size, s.integer("the stages"))
                s.words("stage(s)")
        s.end()
    if regs is None:
        raise c.error("resources without its `registers N, budget (P, C)` line", c.line.toks[0])
    v = {k: a[k][0] for k in _RESOURCE_KEYS}
    return Resources(
        smem,
        v["smem_bytes"],
        v["barrier_offset"],
        v["barrier_bytes"],
        v["smem_limit"],
        tuple(war),
        regs[0],
        regs[1],
    )
