"""Print the event IR in the paper's notation (Figs. 7–10).

Events are renumbered ``%e1, %e2, …`` in print order so that dumps are stable and
diffable across unrelated changes; tensors, partitions and scalars keep the names the
dependence analysis gave them (source names, uniquified ``x``, ``x_1``, …).

The text is what :mod:`cypressc.ir.reader` reads back: everything a pass reads is printed
(``print_module(parse_module(print_module(m))) == print_module(m)``, and a pass gives the
same result on the module read back).  ``//`` outside parentheses starts a comment (inside,
``(a // b)`` is floor division).  Around the module body:

* before it, ``target MACHINE {knob: value, …}`` (``Module.target``: the machine model and
  the BLOCK knobs the mapping set) and one ``external`` line per user C++ leaf function
  called (paper §3.2's call-external: its parameters, privileges, C++ name and header);
* after it, ``schedule {…}`` (warp specialization's stage depths and channels) and
  ``resources {…}`` (resource allocation's shared-memory plan and register estimate).

Ops that are not events print the processor dimensions they are replicated over as
``per [(n, PROC), …]``.  A sync op's ``per`` leaves out the BLOCK dimensions when they are
the block program's (:func:`block_grid`: a sync op runs once per block otherwise), and its
event edges follow ``from`` (``%e3 -> %e5 (raw %A)``: :func:`edges_text`).
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import Hazard, Role, Via
from cypressc.ir.subst import walk_ops
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.kinds import Proc

__all__ = [
    "print_module",
    "event_names",
    "fmt_expr",
    "fmt_view",
    "sync_line",
    "edges_text",
    "block_grid",
    "PROC_ID",
    "VIA_TEXT",
]

PROC_ID = {
    Proc.BLOCK: "block_id",
    Proc.WARPGROUP: "warpgroup_id",
    Proc.WARP: "warp_id",
    Proc.THREAD: "lane_id",
}
# how an edge reaches its consumer, after the hazard: ``(raw %A, into the loop)``; carried and
# ring edges add their distance (``{}``)
VIA_TEXT = {
    Via.SAME: "",
    Via.ENTRY: ", into the loop",
    Via.AFTER: ", after the loop",
    Via.CARRIED: ", {} iteration(s) later",
    Via.TILE: ", the next tile",
    Via.RING: ", its stage's next fill, {} ring position(s) on",
}


def fmt_expr(e: N.IExpr) -> str:
    if isinstance(e, N.IConst):
        return str(e.value)
    if isinstance(e, N.IVar):
        return f"%{e.name}"
    if isinstance(e, N.IProc):
        base = PROC_ID.get(e.proc, e.proc.lower() + "_id")
        return f"{base}.{'xyz'[e.dim]}" if e.proc == Proc.BLOCK else f"{base}()"
    if isinstance(e, N.IBin):
        if e.op in ("cdiv", "min", "max"):
            return f"{e.op}({fmt_expr(e.a)}, {fmt_expr(e.b)})"
        return f"({fmt_expr(e.a)} {e.op} {fmt_expr(e.b)})"
    raise TypeError(e)


def fmt_view(v: N.View) -> str:
    if isinstance(v, N.TRef):
        return f"%{v.name}"
    return f"%{v.partition}[{', '.join(fmt_expr(i) for i in v.idx)}]"


def _param(p) -> str:
    if isinstance(p, tuple):
        return "(" + ", ".join(_param(x) for x in p) + ")"
    if isinstance(p, str):
        return p
    return fmt_expr(p)


def block_grid(body: N.Block) -> tuple[N.Dim, ...]:
    """The block program's BLOCK dimensions: the longest run of leading BLOCK dimensions of
    an op of ``body`` that is not a sync op (the first such op's).  Sync ops run once per
    block instance, over these."""
    best: tuple[N.Dim, ...] = ()
    for op in walk_ops(body):
        if isinstance(op, SYNC_OPS):
            continue
        n = 0
        while n < len(op.dims) and op.dims[n].proc == Proc.BLOCK:
            n += 1
        if n > len(best):
            best = op.dims[:n]
    return best


class _Printer:
    def __init__(self, roles: dict[str, Role] | None = None, body: N.Block | None = None) -> None:
        self.names: dict[str, str] = {}
        self.lines: list[str] = []
        self.roles = roles or {}
        self.grid = block_grid(body) if body is not None else ()
        if body is not None:  # number events in definition order: sync ops name later events
            for op in walk_ops(body):
                if isinstance(op, N.AsyncOp):
                    self.ev(op.ev)

    def role(self, ev: str) -> str:
        return f"  @{self.roles[ev]}" if ev in self.roles else ""

    def ev(self, name: str) -> str:
        if name not in self.names:
            self.names[name] = f"e{len(self.names) + 1}"
        return "%" + self.names[name]

    def ref(self, r: N.EvRef) -> str:
        s = self.ev(r.name)
        if r.idx:
            s += "[" + ", ".join(":" if i is None else fmt_expr(i) for i in r.idx) + "]"
        return s

    def pre(self, pre) -> str:
        return "{" + ", ".join(self.ref(r) for r in pre) + "}"

    def ty(self, dims) -> str:
        return N.ev_type_str(dims, fmt_expr)

    def block(self, b: N.Block, ind: int) -> None:
        # name events defined in this block first, so uses inside loops number stably
        for op in b.ops:
            self.op(op, ind)
        if b.yields:
            self.lines.append("  " * ind + "yield " + ", ".join(self.ref(r) for r in b.yields))

    def op(self, op: N.Op, ind: int) -> None:
        pad = "  " * ind
        rep = f"  per {self.ty(op.dims)}" if op.dims and not isinstance(op, N.AsyncOp) else ""
        if isinstance(op, N.Alloc):
            lay = f" layout {fmt_view(op.layout)}" if op.layout is not None else ""
            shape = ", ".join(fmt_expr(s) for s in op.shape)
            self.lines.append(f"{pad}%{op.name} = tensor [{shape}] {op.dtype} @{op.mem}{lay}{rep}")
        elif isinstance(op, N.Let):
            self.lines.append(f"{pad}%{op.name} = {fmt_expr(op.value)}{rep}")
        elif isinstance(op, N.Partition):
            self.lines.append(
                f"{pad}%{op.name} = partition_by_{op.kind} {fmt_view(op.base)} "
                f"{_param(tuple(op.params))}{rep}"
            )
        elif isinstance(op, N.Copy):
            bar = f" on %{op.bar.bar}[{fmt_expr(op.bar.stage)}]" if op.bar is not None else ""
            if op.multicast:
                axes = ", ".join(fmt_expr(N.IProc(Proc.BLOCK, d)) for d in op.multicast)
                bar += f" multicast({axes})"
            red = f".{op.reduce}" if op.reduce is not None else ""
            red += ".ordered" if op.ordered else ""
            self.lines.append(
                f"{pad}{self.ev(op.ev)}: {self.ty(op.dims)} = copy{red} {fmt_view(op.src)} -> "
                f"{fmt_view(op.dst)} {self.pre(op.pre)}{bar}{self.role(op.ev)}"
            )
        elif isinstance(op, N.Call):
            args = ", ".join(
                fmt_view(a)
                if isinstance(a, (N.TRef, N.Piece))
                else a.name
                if isinstance(a, N.AtomArg)
                else fmt_expr(a)
                for a in op.args
            )
            self.lines.append(
                f"{pad}{self.ev(op.ev)}: {self.ty(op.dims)} = call {op.fn}({args}) "
                f"{self.pre(op.pre)}{self.role(op.ev)}"
            )
        elif isinstance(op, N.For):
            pipe = f" pipeline({op.pipeline})" if op.pipeline else ""
            pipe += f" ring(+{op.ring_extra} per tile)" if op.ring_extra else ""
            self.lines.append(
                f"{pad}{self.ev(op.ev)}: {self.ty(op.dims)} = for %{op.var} in "
                f"[{fmt_expr(op.lo)}, {fmt_expr(op.hi)}){pipe} {self.pre(op.pre)} do"
            )
            self.block(op.body, ind + 1)
        elif isinstance(op, N.PFor):
            inner = self.ty(op.dims + (N.Dim(N.ibin("-", op.hi, op.lo), op.proc),))
            self.lines.append(
                f"{pad}{self.ev(op.ev)}: {inner} = pfor %{op.var} in "
                f"[{fmt_expr(op.lo)}, {fmt_expr(op.hi)}) {op.proc} {self.pre(op.pre)} do"
            )
            self.block(op.body, ind + 1)
        elif isinstance(op, SYNC_OPS):
            self.lines.append(pad + sync_line(op, self.ev, self.ty, self.grid))
        else:  # pragma: no cover
            raise TypeError(op)


def print_module(m: N.Module) -> str:
    """The module as text: its target and externals, a header with parameters and sizes,
    the body, then what the passes decided about the whole block (schedule, resources)."""
    p = _Printer(m.role_map(), m.body)
    p.lines += _headers(m)
    params = ", ".join(
        f"%{a.name}: [{', '.join(fmt_expr(s) for s in a.shape)}] {a.dtype} @{a.mem}"
        for a in m.params
    )
    sizes = ", ".join(f"%{s}" for s in m.scalars)
    floats = "".join(f" floats({', '.join(f'%{s}' for s in m.floats)})" if m.floats else "")
    sync = " synchronized" if m.synchronized else ""
    p.lines.append(f"module @{m.name}({params}) sizes({sizes}){floats}{sync} {{")
    p.block(m.body, 1)
    p.lines.append("}")
    p.lines += _results(m, p)
    return "\n".join(p.lines) + "\n"


def event_names(m: N.Module) -> dict[str, str]:
    """Internal event name -> the ``%eN`` name the printer shows (for comments elsewhere)."""
    p = _Printer(m.role_map(), m.body)
    return {k: "%" + v for k, v in p.names.items()}


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "(" + ", ".join(_value(x) for x in v) + ")"
    return str(v)


def _attrs(pairs) -> str:
    """``{key: value, …}`` (the mapping file's flow style) of the pairs whose value is set."""
    return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in pairs if v is not None) + "}"


def _headers(m: N.Module) -> list[str]:
    """``target`` and ``external`` lines: what the module is compiled for and the user C++
    functions its calls name (:mod:`cypressc.lang.externals`)."""
    from dataclasses import fields

    out = []
    t = m.target
    if t is not None:
        knobs = [
            (f.name, getattr(t.block, f.name)) for f in fields(t.block) if f.name != "instance"
        ]
        set_ = [(k, v) for k, v in knobs if v is not None]
        out.append(f"target {t.machine.name}" + (f" {_attrs(set_)}" if set_ else ""))
    seen: set[str] = set()
    for op in walk_ops(m.body):
        ext = getattr(op, "ext", None)
        if ext is None or ext.name in seen or ext.external is None:
            continue
        seen.add(ext.name)
        e = ext.external
        params = ", ".join(f"{q.name}: {q.type}" for q in e.params)
        out.append(
            f"external {e.name}({params}) reads({', '.join(e.reads)}) "
            f'writes({", ".join(e.writes)}) = "{e.cpp}" in "{e.header}"'
        )
    return out


def _results(m: N.Module, p: _Printer) -> list[str]:
    """What the passes decided about the whole block, under the module."""
    out: list[str] = []
    s = m.schedule
    if s is not None:
        out.append(
            "schedule "
            + _attrs([("warpspecialize", s.warpspecialize), ("persistent", s.persistent)])
        )
        if s.stages:
            out.append("  stages " + ", ".join(f"%{b}: {d}" for b, d in s.stages.items()))
        if not m.synchronized:  # after sync-insertion the mbarrier decls say it
            for prod, cons in s.channels.items():
                out.append(
                    f"  channel {p.ev(prod)} -> {', '.join(p.ev(c) for c in cons)}  "
                    "// a full/empty mbarrier pair per stage"
                )
    r = m.resources
    if r is not None:
        out.append(
            "resources "
            + _attrs(
                [
                    ("smem_bytes", r.smem_bytes),
                    ("smem_limit", r.smem_limit),
                    ("barrier_offset", r.barrier_offset),
                    ("barrier_bytes", r.barrier_bytes),
                ]
            )
            + "  // shared memory: mbarriers and 1024-byte alignment included"
        )
        for name, slot in r.smem.items():
            out.append(
                f"  %{name}: [{slot.offset}, {slot.offset + slot.bytes}) {slot.bytes} bytes, "
                f"{slot.stages} stage(s)"
            )
        for x, y in r.war:
            out.append(f"  %{x} and %{y} share bytes  // a WAR edge from the last readers of %{x}")
        out.append(
            f"  registers {r.registers}, budget {_value(r.register_budget)}  "
            "// per consumer thread (estimate); setmaxnreg of the producer, consumer"
        )
    if m.kernel is not None:  # the backend's plan describes itself
        out += m.kernel.summary()
    return out


def edges_text(edges, ev) -> str:
    """``%e3 -> %e5 (raw %A); …``: the event edges a sync op realizes, the hazards of one
    pair of events on one tensor printed together (``raw+war``), and the sources of equal
    hazards on one consumer listed together (``%e3, %e4 -> %e5``); ``start`` is the start of
    the block program, ``end`` its end (``ev`` names events)."""
    groups: dict[tuple, list[str]] = {}
    for e in edges:
        groups.setdefault((e.src, e.dst, e.via, e.distance, e.tensor), []).append(e.hazard)
    srcs: dict[tuple, list[str]] = {}
    for (src, dst, via, dist, tensor), hz in groups.items():
        srcs.setdefault((dst, via, dist, tensor, "+".join(hz)), []).append(
            ev(src) if src else "start"
        )
    out = []
    for (dst, via, dist, tensor, hz), names in srcs.items():
        if via == Via.END:
            out.append(f"{', '.join(names)} -> end (the TMA store reads %{tensor})")
            continue
        how = VIA_TEXT[via].format(dist)
        # a turn: the Tensor Core, not a tensor (the previous warpgroup's run, then this one's)
        if hz == Hazard.TURN:
            out.append(f"{', '.join(names)} -> {ev(dst)} (turn{how})")
            continue
        out.append(f"{', '.join(names)} -> {ev(dst)} ({hz} %{tensor}{how})")
    return "; ".join(out)


def sync_line(op, ev, ty, grid: tuple[N.Dim, ...] = ()) -> str:
    """One sync op in the paper's style (``ev`` names events, ``ty`` prints dims; ``grid``,
    the block program's BLOCK dimensions, is left out of its ``per``)."""
    dims = getattr(op, "dims", ())
    shown = dims[len(grid) :] if grid and dims[: len(grid)] == grid else dims
    per = f" per {ty(shown)}" if shown else ""
    edges = getattr(op, "edges", ())
    frm = f"  from {edges_text(edges, ev)}" if edges else ""
    at = lambda bar, stage: f"%{bar}[{fmt_expr(stage)}]"  # noqa: E731
    if isinstance(op, S.MBarrier):
        return (
            f"%{op.name} = mbarrier[{op.stages}] {op.kind} arrivals({op.count}) arrive @{','.join(op.arrive_role)} "
            f"wait @{','.join(op.wait_role)}{' (this tile)' if op.same_tile else ''}{per}  "
            f"channel of {', '.join(ev(e) for e in op.channel)}{frm}"
        )
    if isinstance(op, S.ArriveExpectTx):
        return f"arrive_expect_tx {at(op.bar, op.stage)} {op.bytes} bytes{per}  @{op.role}{frm}"
    if isinstance(op, S.Wait):
        return f"wait {at(op.bar, op.stage)} parity {fmt_expr(op.parity)}{per}  @{op.role}{frm}"
    guard = getattr(op, "when", None)
    when = f" if {fmt_expr(guard.a)} >= {fmt_expr(guard.b)}" if guard is not None else ""
    if isinstance(op, S.Arrive):
        kw = "arrive.cluster" if op.cluster else "arrive"
        return f"{kw} {at(op.bar, op.stage)}{when}{per}  @{op.role}{frm}"
    if isinstance(op, S.CommitGroup):
        return f"commit_group {op.unit}{per}  @{op.role}  closes the group of {', '.join(ev(e) for e in op.events)}"
    if isinstance(op, S.WaitGroup):
        return f"wait_group {op.unit} {op.pending}{per}  @{op.role}{frm}"
    if isinstance(op, S.SyncWarp):
        return f"syncwarp{when}{per}  @{op.role}{frm}"
    if isinstance(op, S.BarSync):
        return f"bar_sync {fmt_expr(op.id)}, {op.threads}{per}  @{op.role}{frm}"
    if isinstance(op, S.Turn):
        return f"turn {op.kind} {fmt_expr(op.id)}, {op.threads}{when}{per}  @{op.role}{frm}"
    if isinstance(op, S.Fence):
        return f"fence {op.kind}{per}  @{op.role}{frm}"
    raise TypeError(op)
