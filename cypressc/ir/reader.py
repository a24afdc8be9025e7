"""Read the printed event IR back into a :class:`~cypressc.ir.nodes.Module` (Cypress paper
§4.1, Fig. 7; the text :func:`cypressc.ir.printer.print_module` writes), so that one pass can
run on a module written by hand or dumped by ``cypressc explain --dump-ir``
(``cypressc opt FILE.ir -p PASS``).

``print_module(parse_module(print_module(m)))`` is ``print_module(m)`` for every module the
pipeline builds, and every pass gives the same printed result on the module read back
(tests/ir/test_reader.py).  What is carried is what the passes and the verifiers read:

* the ops, with their processor dimensions, roles, loop pipelining (``pipeline(D)``,
  ``ring(+N per tile)``), copies' completion barriers and the sync ops with their edges;
* ``Module.target`` (``target h100 {knob: value}``: :class:`~cypressc.ir.target.Target`,
  located at its line, each knob at its key), ``schedule`` and ``resources``;
* each call's leaf function: an intrinsic by name, or a user C++ function declared by an
  ``external`` line, resolved like the program's ``include()`` (the header found next to
  the IR file or in ``include_dirs``, its NumPy reference beside it).

A partition's piece shape is computed from its base, as the dependence analysis does
(:func:`cypressc.ir.shapes.mma_piece_shape`).  Not carried, because no pass reads them:
``Call.task``, ``Module.sites`` (the program and mapping lines a pass error points at: a
hand-written module's errors point at its ``target`` line), ``size_aliases`` and the
target's declared privileges (both only the CUDA lowering reads).

The tokens and the shared pieces (expressions, views, event types) are
:mod:`cypressc.ir.reader_lex`'s, the sync ops :mod:`cypressc.ir.reader_sync`'s, the lines
around the module :mod:`cypressc.ir.reader_headers`'s.  Errors: E063 at the offending token,
with a hint.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cypressc.diagnostics import Loc
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.printer import block_grid
from cypressc.ir.reader_lex import Cursor, Line, Tok, ir_error, lex
from cypressc.ir.reader_sync import SYNC_KEYWORDS, mbarrier, sync_op
from cypressc.ir import reader_headers as H
from cypressc.ir.kinds import Role
from cypressc.ir.shapes import mma_piece_shape
from cypressc.ir.target import Target
from cypressc.lang.kinds import Mem, OperandKind, PartKind, Proc

__all__ = ["parse_module"]


def parse_module(text: str, filename: str = "<ir>", include_dirs=()) -> N.Module:
    """The module ``text`` (read from ``filename``) describes; E063 where it is malformed.
    ``include_dirs`` are searched, after the file's folder, for the headers of ``external``
    lines."""
    return _Reader(text, filename, tuple(include_dirs)).module()


class _Reader:
    def __init__(self, text: str, file: str, include_dirs: tuple) -> None:
        self.file, self.lines, self.i = file, lex(text, file), 0
        here = Path(file).parent if Path(file).is_file() else Path(".")
        self.dirs = [here, *(Path(d) for d in include_dirs)]
        self.shapes: dict[str, tuple] = {}  # tensor or partition -> (a piece's) shape
        self.parts: set[str] = set()  # the partitions among them
        self.leaves: dict[str, object] = {}  # externals declared: name -> LeafFn
        self.events: dict[str, Tok] = {}  # defined events -> where
        self.refs: list[tuple[Line, Tok]] = []  # event uses, checked at the end
        self.roles: list[tuple[str, Role]] = []

    # ------------------------------------------------------------------ lines
    def peek(self) -> Line | None:
        return self.lines[self.i] if self.i < len(self.lines) else None

    def take(self) -> Cursor:
        self.i += 1
        return Cursor(self.lines[self.i - 1], self.file)

    def first(self) -> str:
        line = self.peek()
        return "" if line is None else line.toks[0].text

    # ------------------------------------------------------------------ the module
    def module(self) -> N.Module:
        target = None
        while self.first() in ("target", "external"):
            if self.first() == "target":
                target = H.target(self.take(), self.loc)
            else:
                name, leaf = H.external(self.take(), self.dirs, self.loc)
                self.leaves[name] = leaf
        line = self.peek()
        if line is None or line.toks[0].text != "module":
            raise ir_error(
                self.file,
                line,
                "expected the module: `module @name(%A: [%M, %K] f16 @GLOBAL, ...) sizes(%M, %K) {`",
                line.toks[0] if line else None,
                "write `cypressc explain PROG -m MAP --dump-ir DIR` for examples of the notation",
            )
        c = self.take()
        c.expect("module")
        name = c.kind("at", "the module's name (@name)").name
        c.expect("(")
        params = tuple(c.listed(lambda: self.param(c), ")"))
        c.expect("sizes")
        c.expect("(")
        scalars = tuple(t.name for t in c.listed(lambda: c.kind("sym", "a size (%M)"), ")"))
        floats: tuple[str, ...] = ()
        if c.accept("floats"):
            c.expect("(")
            floats = tuple(t.name for t in c.listed(lambda: c.kind("sym", "a float (%x)"), ")"))
        synchronized = c.accept("synchronized") is not None
        c.expect("{")
        c.end()
        if target is None:  # hand-written IR without one: the default machine, errors here
            target = replace(Target.default(self.file), loc=self.loc(c.line))
        body = self.block(0)
        close = self.peek()
        if close is None or [t.text for t in close.toks] != ["}"] or close.indent:
            at = close or self.lines[-1]  # the line in its place, or the file's last
            raise ir_error(self.file, at, "expected `}` closing the module at column 1", None)
        self.i += 1
        m = N.Module(
            name, params, scalars, body, synchronized, tuple(self.roles), floats, target=target
        )
        while self.peek() is not None:
            word = self.first()
            if word == "schedule":
                c = self.take()
                m = replace(m, schedule=H.schedule(c, self.sub_lines(), self.refs))
            elif word == "resources":
                c = self.take()
                m = replace(m, resources=H.resources(c, self.sub_lines()))
            else:
                raise self.take().error(
                    f"unexpected {word!r} after the module",
                    hint="only schedule and resources follow it",
                )
        self.check_events()
        return replace(m, body=_with_grid(m.body, block_grid(m.body)))

    def loc(self, line: Line, tok: Tok | None = None) -> Loc:
        col = tok.col if tok else line.indent + 1
        return Loc(self.file, line.no, col, col + len(tok.text) if tok else 0, line.text)

    def param(self, c: Cursor) -> N.Alloc:
        t = c.kind("sym", "a parameter (%A: [%M, %K] f16 @GLOBAL)")
        c.expect(":")
        c.expect("[")
        shape = tuple(c.listed(c.expr, "]"))
        dtype = c.kind("name", "an element type (f16, f32, ...)").text
        mem = c.tag(Mem, "a memory", "at")
        self.shapes[t.name] = shape
        return N.Alloc(t.name, shape, dtype, mem)

    def check_events(self) -> None:
        for line, t in self.refs:
            if t.name not in self.events:
                raise ir_error(
                    self.file,
                    line,
                    f"event %{t.name} is not defined",
                    t,
                    "an event is the result of a copy, call, for or pfor: `%e1: [...] = copy ...`",
                )

    # ------------------------------------------------------------------ headers
    # ------------------------------------------------------------------ blocks and ops
    def block(self, parent: int) -> N.Block:
        """The ops indented deeper than ``parent``, up to a ``yield`` or a shallower line."""
        ops: list = []
        yields: tuple = ()
        indent = None
        while (line := self.peek()) is not None and line.indent > parent:
            if indent is None:
                indent = line.indent
            if line.indent != indent:
                raise ir_error(
                    self.file,
                    line,
                    f"unexpected indentation (the block is at column {indent + 1})",
                    None,
                    "a loop body is indented under its `do` line",
                )
            c = self.take()
            if c.accept("yield"):
                refs = [self.evref(c)]
                while c.accept(","):
                    refs.append(self.evref(c))
                yields = tuple(refs)
                c.end()
                break
            ops.append(self.op(c, indent))
        return N.Block(tuple(ops), yields)

    def evref(self, c: Cursor) -> N.EvRef:
        t, r = c.evref()
        self.refs.append((c.line, t))
        return r

    def pre(self, c: Cursor) -> tuple[N.EvRef, ...]:
        c.expect("{", "the events an op waits for: {%e1[block_id.x], ...} ({} for none)")
        return tuple(c.listed(lambda: self.evref(c), "}"))

    def op(self, c: Cursor, indent: int):
        t = c.peek()
        assert t is not None
        if t.kind == "name" and t.text in SYNC_KEYWORDS:
            refs: list[Tok] = []
            op = self.sync(c, lambda: sync_op(c, refs))
            self.refs += [(c.line, r) for r in refs]
            return op
        name = c.kind("sym", "an op (%x = ..., %e1: [...] = ..., or a sync op)")
        if c.accept(":"):
            return self.async_op(c, name, indent)
        c.expect(
            "=", "`%x = tensor ...`, `%x = partition_by_...`, `%x = <expr>`, or `%e1: TYPE = ...`"
        )
        if c.at("mbarrier"):
            refs = []
            op = self.sync(c, lambda: mbarrier(c, name.name, refs))
            self.refs += [(c.line, r) for r in refs]
            return op
        if c.accept("tensor"):
            c.expect("[")
            shape = tuple(c.listed(c.expr, "]"))
            dtype = c.kind("name", "an element type").text
            mem = c.tag(Mem, "a memory", "at")
            layout = self.view(c) if c.accept("layout") else None
            self.shapes[name.name] = shape
            return N.Alloc(name.name, shape, dtype, mem, layout, self.per(c))
        k = c.peek()
        if k is not None and k.text.startswith("partition_by_"):
            return self.partition(c, name)
        value = c.expr()
        return N.Let(name.name, value, self.per(c))

    def per(self, c: Cursor) -> tuple[N.Dim, ...]:
        dims = c.dims() if c.accept("per") else ()
        c.end()
        return dims

    def sync(self, c: Cursor, read):
        try:
            op = read()
        except ValueError as e:  # a sync op's own checks (sync.py): a bad kind, count, …
            raise c.error(f"bad sync op: {e}", c.line.toks[0]) from None
        c.end()
        return op

    def partition(self, c: Cursor, name: Tok) -> N.Partition:
        k = c.kind("name", "partition_by_blocks, _slices or _mma")
        try:
            kind = PartKind(k.text.removeprefix("partition_by_"))
        except ValueError:
            raise c.error(
                f"unknown partition '{k.text}'",
                k,
                " or ".join(f"partition_by_{p}" for p in PartKind),
            ) from None
        base = self.view(c)
        shape = self.shape_of(base)
        c.expect("(")
        if kind == PartKind.MMA:
            toks = c.listed(lambda: c.kind("name", "an atom, processor or operand"), ")")
            if len(toks) != 3:
                raise c.error("partition_by_mma takes (ATOM, PROC, OPERAND)", k)
            params: tuple = (
                toks[0].text,
                c.tag(Proc, "a processor level", tok=toks[1]),
                toks[2].text,
            )
            piece = mma_piece_shape(shape, *params, self.loc(c.line, k))
        else:
            params = tuple(c.listed(c.expr, ")"))
            if kind == PartKind.BLOCKS:
                piece = params
            elif (
                len(params) != 1
                or not isinstance(params[0], N.IConst)
                or not 0 <= params[0].value < len(shape)
            ):
                raise c.error(
                    f"partition_by_slices takes the sliced dimension (0..{len(shape) - 1})", k
                )
            else:
                piece = tuple(x for i, x in enumerate(shape) if i != params[0].value)
        self.shapes[name.name] = piece
        self.parts.add(name.name)
        return N.Partition(name.name, base, kind, params, piece, self.per(c))

    def view(self, c: Cursor) -> N.View:
        """A view whose tensor or partition an earlier line defines."""
        t = c.peek()
        v = c.view()
        piece = isinstance(v, N.Piece)
        name = v.partition if piece else v.name  # type: ignore[union-attr]
        if name not in self.shapes or piece != (name in self.parts):
            what = "partition" if piece else "tensor"
            raise c.error(
                f"{what} %{name} is not defined before this line",
                t,
                f"define it first: `%{name} = "
                + ("partition_by_blocks %A (64, 64)`" if piece else "tensor [64, 64] f16 @SHARED`"),
            )
        return v

    def shape_of(self, v: N.View) -> tuple:
        return self.shapes[v.name if isinstance(v, N.TRef) else v.partition]

    def multicast(self, c: Cursor) -> tuple[int, ...]:
        """``(block_id.x, …)`` after ``multicast``: the grid dimensions a copy is shared along."""
        c.expect("(")
        out = []
        while True:
            tok = c.peek()
            e = c.expr()
            if not (isinstance(e, N.IProc) and e.proc == Proc.BLOCK):
                raise c.error(
                    "a multicast names grid dimensions", tok, "write multicast(block_id.x)"
                )
            out.append(e.dim)
            if not c.accept(","):
                break
        c.expect(")")
        return tuple(out)

    def async_op(self, c: Cursor, name: Tok, indent: int):
        if name.name in self.events:
            raise c.error(f"event %{name.name} is defined twice", name)
        self.events[name.name] = name
        dims = c.dims()
        c.expect("=")
        kw = c.kind("name", "copy, call, for or pfor")
        ev = name.name
        if kw.text == "copy":
            rt = c.kind("name", "a reduction (add)") if c.accept(".") else None
            red = rt.text if rt is not None else None
            if red not in (None, "add"):
                raise c.error(f"unknown reduction copy.{red}", rt, "the one reduction is copy.add")
            ordered = red is not None and c.accept(".") is not None
            if ordered:
                ot = c.kind("name", "ordered")
                if ot.text != "ordered":
                    raise c.error(f"unknown copy.add.{ot.text}", ot, "write copy.add.ordered")
            src = self.view(c)
            c.expect("->")
            dst = self.view(c)
            pre = self.pre(c)
            bar = S.BarIdx(*self.bar(c)) if c.accept("on") else None
            multicast = self.multicast(c) if bar is not None and c.accept("multicast") else ()
            op: N.Op = N.Copy(ev, src, dst, pre, dims, bar, red, ordered, multicast)
        elif kw.text == "call":
            op = self.call(c, ev, dims)
        elif kw.text in ("for", "pfor"):
            var = c.kind("sym", "the loop variable (%k)").name
            c.expect("in")
            c.expect("[")
            lo = c.expr()
            c.expect(",")
            hi = c.expr()
            c.expect(")", "a loop range is [lo, hi)")
            if kw.text == "pfor":
                proc = c.tag(Proc, "a processor level")
                pre = self.pre(c)
                c.expect("do")
                c.end()
                return N.PFor(ev, var, lo, hi, proc, pre, self.block(indent), dims[:-1])
            pipe = extra = 0
            if c.accept("pipeline"):
                c.expect("(")
                pipe = c.integer("the pipeline depth")
                c.expect(")")
            if c.accept("ring"):
                c.words("(+")
                extra = c.integer("the ring positions per tile")
                c.words("per tile)")
            pre = self.pre(c)
            c.expect("do")
            c.end()
            return N.For(ev, var, lo, hi, pre, self.block(indent), dims, pipe, extra)
        else:
            raise c.error(f"unknown op '{kw.text}'", kw, "copy, call, for or pfor")
        if (t := c.peek()) is not None and t.kind == "at":
            self.roles.append((ev, c.role()))
        c.end()
        return op

    def bar(self, c: Cursor) -> tuple[str, N.IExpr]:
        t = c.kind("sym", "an mbarrier stage (%bar[stage])")
        c.expect("[")
        stage = c.expr()
        c.expect("]")
        return t.name, stage

    def call(self, c: Cursor, ev: str, dims) -> N.Call:
        from cypressc.lang.intrinsics import LEAF_FUNCTIONS

        f = c.kind("name", "a leaf function")
        leaf = self.leaves.get(f.text) or LEAF_FUNCTIONS.get(f.text)
        if leaf is None:
            raise c.error(
                f"unknown leaf function '{f.text}'",
                f,
                "an intrinsic (docs/language.md §5) or a function declared by an `external` line",
            )
        c.expect("(")
        args = []
        for j, rule in enumerate(leaf.operands):  # type: ignore[attr-defined]
            if j:
                c.expect(",", f"{f.text}() takes {len(leaf.operands)} operands")  # type: ignore[attr-defined]
            if rule.kind == OperandKind.ATOM:
                args.append(N.AtomArg(c.kind("name", "an instruction atom (WGMMA_64x128x16)").text))
            elif rule.kind == OperandKind.SCALAR:
                args.append(c.expr())
            else:
                args.append(self.view(c))
        c.expect(")", f"{f.text}() takes {len(leaf.operands)} operands")  # type: ignore[attr-defined]
        ext = leaf if f.text in self.leaves else None
        return N.Call(ev, f.text, tuple(args), self.pre(c), dims, ext=ext)

    # ------------------------------------------------------------------ results
    def sub_lines(self):
        """The cursors of the lines indented under a result header."""
        while (line := self.peek()) is not None and line.indent > 0:
            yield self.take()


def _with_grid(b: N.Block, grid: tuple[N.Dim, ...]) -> N.Block:
    """``b`` with the block program's BLOCK dimensions added to each sync op whose ``per``
    lists none (the printer leaves them out)."""
    if not grid:
        return b
    ops = []
    for op in b.ops:
        if isinstance(op, S.SYNC_OPS) and all(d.proc != Proc.BLOCK for d in op.dims):
            op = replace(op, dims=grid + op.dims)
        elif isinstance(op, (N.For, N.PFor)):
            op = replace(op, body=_with_grid(op.body, grid))
        ops.append(op)
    return N.Block(tuple(ops), b.yields)
