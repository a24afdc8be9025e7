"""Print the event IR in the paper's notation (Figs. 7–10).

Events are renumbered ``%e1, %e2, …`` in print order so that dumps are stable and
diffable across unrelated changes; tensors, partitions and scalars keep the names the
dependence analysis gave them (source names, uniquified ``x``, ``x_1``, …).
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.subst import walk_ops
from cypressc.ir.sync import SYNC_OPS

__all__ = ["print_module", "event_names", "fmt_expr", "fmt_view", "sync_line", "PROC_ID"]

PROC_ID = {"BLOCK": "block_id", "WARPGROUP": "warpgroup_id", "WARP": "warp_id", "THREAD": "lane_id"}


def fmt_expr(e: N.IExpr) -> str:
    if isinstance(e, N.IConst):
        return str(e.value)
    if isinstance(e, N.IVar):
        return f"%{e.name}"
    if isinstance(e, N.IProc):
        base = PROC_ID.get(e.proc, e.proc.lower() + "_id")
        return f"{base}.{'xyz'[e.dim]}" if e.proc == "BLOCK" else f"{base}()"
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


class _Printer:
    def __init__(self, roles: dict[str, str] | None = None, body: N.Block | None = None) -> None:
        self.names: dict[str, str] = {}
        self.lines: list[str] = []
        self.roles = roles or {}
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
        rep = f"  # per {self.ty(op.dims)}" if op.dims and not isinstance(op, N.AsyncOp) else ""
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
            self.lines.append(
                f"{pad}{self.ev(op.ev)}: {self.ty(op.dims)} = copy {fmt_view(op.src)} -> "
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
            self.lines.append(pad + sync_line(op, self.ev, self.ty))
        else:  # pragma: no cover
            raise TypeError(op)


def print_module(m: N.Module) -> str:
    """The module as text: a header with parameters and sizes, then the body."""
    p = _Printer(m.role_map(), m.body)
    params = ", ".join(
        f"%{a.name}: [{', '.join(fmt_expr(s) for s in a.shape)}] {a.dtype} @{a.mem}"
        for a in m.params
    )
    sizes = ", ".join(f"%{s}" for s in m.scalars)
    floats = "".join(f" floats({', '.join(f'%{s}' for s in m.floats)})" if m.floats else "")
    p.lines.append(f"module @{m.name}({params}) sizes({sizes}){floats} {{")
    p.block(m.body, 1)
    p.lines.append("}")
    p.lines += _results(m, p)
    return "\n".join(p.lines) + "\n"


def event_names(m: N.Module) -> dict[str, str]:
    """Internal event name -> the ``%eN`` name the printer shows (for comments elsewhere)."""
    p = _Printer(m.role_map(), m.body)
    return {k: "%" + v for k, v in p.names.items()}


def _results(m: N.Module, p: _Printer) -> list[str]:
    """What the later passes decided, as comments under the module."""
    out: list[str] = []
    r = m.resources
    if r is not None:
        out.append(
            f"// shared memory: {r.smem_bytes} bytes (mbarriers and 1024-byte alignment included)"
        )
        for name, slot in r.smem.items():
            out.append(
                f"//   %{name}: [{slot.offset}, {slot.offset + slot.bytes}) {slot.bytes} bytes, "
                f"{slot.stages} stage(s)"
            )
        for x, y in r.war:
            out.append(f"//   %{x} and %{y} share bytes: WAR edge from the last readers of %{x}")
        out.append(f"// registers per consumer thread (estimate): {r.registers}")
    if (
        m.schedule is not None and not m.synchronized
    ):  # after sync-insertion the mbarrier decls say it
        for prod, cons in m.schedule.channels.items():
            out.append(
                f"// channel {p.ev(prod)} -> {', '.join(p.ev(c) for c in cons)}: full/empty "
                f"mbarrier pair per stage"
            )
    if m.kernel is not None:  # the backend's plan describes itself
        out += m.kernel.summary()
    return out


def _edges(edges, ev) -> str:
    """``// from %e3 -> %e5 (raw %A), …``: the event edges a sync op realizes (the hazards of
    one pair of events on one tensor printed together)."""
    if not edges:
        return ""
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
        if via == "end":
            out.append(f"{', '.join(names)} -> end (the TMA store reads %{tensor})")
            continue
        how = {
            "same": "",
            "entry": ", into the loop",
            "after": ", after the loop",
            "carried": f", {dist} iteration(s) later",
            "tile": ", the next tile",
            "ring": f", its stage's next fill, {dist} ring position(s) on",
        }[via]
        if (
            hz == "turn"
        ):  # the Tensor Core, not a tensor: the previous warpgroup's run, then this one's
            out.append(f"{', '.join(names)} -> {ev(dst)} (turn{how})")
            continue
        out.append(f"{', '.join(names)} -> {ev(dst)} ({hz} %{tensor}{how})")
    return "  // from " + "; ".join(out)


def sync_line(op, ev, ty) -> str:
    """One sync op in the paper's style (``ev`` names events, ``ty`` prints dims)."""
    inner = tuple(
        d for d in getattr(op, "dims", ()) if d.proc != "BLOCK"
    )  # once per block otherwise
    per = f" per {ty(inner)}" if inner else ""
    at = lambda bar, stage: f"%{bar}[{fmt_expr(stage)}]"  # noqa: E731
    if isinstance(op, S.MBarrier):
        return (
            f"%{op.name} = mbarrier[{op.stages}] {op.kind} arrivals({op.count}) arrive @{op.arrive_role} "
            f"wait @{op.wait_role}{' (this tile)' if op.same_tile else ''}  "
            f"// channel of {', '.join(ev(e) for e in op.channel)}"
        )
    if isinstance(op, S.ArriveExpectTx):
        return f"arrive_expect_tx {at(op.bar, op.stage)} {op.bytes} bytes{per}  @{op.role}{_edges(op.edges, ev)}"
    if isinstance(op, S.Wait):
        return (
            f"wait {at(op.bar, op.stage)} parity {fmt_expr(op.parity)}{per}  @{op.role}"
            f"{_edges(op.edges, ev)}"
        )
    guard = getattr(op, "when", None)
    when = f" if {fmt_expr(guard.a)} >= {fmt_expr(guard.b)}" if guard is not None else ""
    if isinstance(op, S.Arrive):
        return f"arrive {at(op.bar, op.stage)}{when}{per}  @{op.role}{_edges(op.edges, ev)}"
    if isinstance(op, S.CommitGroup):
        return f"commit_group {op.unit}{per}  @{op.role}  // closes the group of {', '.join(ev(e) for e in op.events)}"
    if isinstance(op, S.WaitGroup):
        return f"wait_group {op.unit} {op.pending}{per}  @{op.role}{_edges(op.edges, ev)}"
    if isinstance(op, S.SyncWarp):
        return f"syncwarp{when}{per}  @{op.role}{_edges(op.edges, ev)}"
    if isinstance(op, S.BarSync):
        return f"bar_sync {fmt_expr(op.id)}, {op.threads}{per}  @{op.role}{_edges(op.edges, ev)}"
    if isinstance(op, S.Turn):
        return f"turn {op.kind} {fmt_expr(op.id)}, {op.threads}{when}{per}  @{op.role}{_edges(op.edges, ev)}"
    if isinstance(op, S.Fence):
        return f"fence {op.kind}{per}  @{op.role}{_edges(op.edges, ev)}"
    raise TypeError(op)
