"""Pass 4, ``resource-allocation`` (Cypress paper §4.2.4, Fig. 11).

Binds every SHARED tensor to a byte range of the block's shared memory.  An
interference graph (networkx) starts *complete*: every pair of tensors gets an edge,
real when their live ranges overlap, auxiliary otherwise.  Auxiliary edges are
dropped, largest pair first, until a first-fit assignment fits the mapping's
``smem_limit`` (default: the machine's per-block maximum); tensors left without an
edge share bytes, and the pass records a write-after-read edge from the last readers
of the earlier tensor to the first writer of the later one.  When even the real
interference graph does not fit, the error tabulates every tensor, its bytes and its
live range, and names the knobs to turn: this program's own tile and warpgroup tunables
(:mod:`cypressc.passes.hints`), and only mapping knobs that can still move.

Buffers of a pipelined loop (``for … pipeline(D)``) count D times; a tile that joins a stage
ring (:mod:`cypressc.passes.rings`: FlashAttention-3's peeled K and last V tiles) has no bytes
of its own and widens its ring's live range.  In a persistent
kernel the next tile writes every tensor again, so two tensors share bytes only when the
earlier one is copied in from GLOBAL memory once per tile, outside every loop (its next
copy then waits, through sync-insertion's ``tile`` edges, for the later one's readers too:
FlashAttention-3's peeled K tile under its last V tile), and neither is a pipeline buffer.
Among such pairs (with warp specialization), those whose later tensor is copied in once per
tile too go first: its copy then waits on an mbarrier the earlier tensor's readers release
(sync-insertion's ``free`` channel), where a later tensor that thread code writes (a staged
output tile) needs a named barrier of every warpgroup that reads the earlier one; then the
one whose earlier tensor comes latest in the tile (its next copy then waits least).  The per-thread register
footprint (REGISTER tensors plus a fixed overhead) is estimated and checked against
the consumer register budget the same way.

Results go to ``module.resources`` (:class:`~cypressc.ir.results.Resources`): the slot of
each tensor (offset, bytes, stages), the block's shared-memory bytes, the tensors that
share bytes (``war``), the register estimate and the producer/consumer register budget.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from cypressc.diagnostics import NO_LOC, CypressError
from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols, views_of
from cypressc.ir.origin import Sites
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.ir.target import Target, vector_buffer_bytes
from cypressc.lang.intrinsics import DTYPE_BYTES
from cypressc.lang.kinds import Mem, Proc
from cypressc.passes.base import ModulePass
from cypressc.passes.hints import fmt_tunables, tunable_roles
from cypressc.passes.rings import ring_joins

__all__ = ["resource_allocation", "DTYPE_BYTES", "REGISTER_OVERHEAD"]

ALIGN = 1024  # 128-byte-swizzled tiles must start on a 1024-byte boundary
# a vector has no swizzle; a TMA copy's shared-memory destination must be 128-byte aligned
VECTOR_ALIGN = 128
# Addresses, loop counters, descriptors, barrier phases.  ptxas -v (nvcc 13.0, sm_90a) with the
# consumers' setmaxnreg budget B: FA3 d64 with three consumer warpgroups (accumulators 134) spills
# at B = 152 and not at 160; the gemm h100 tile (accumulators 128) spills at none of 136-160.  24
# accepts the first at 160 and refuses it at 152 (was 40, from the GEMM prototype).
REGISTER_OVERHEAD = 24


def _bytes(a: N.Alloc, sites: Sites | None = None, tma_filled: bool = False) -> int:
    """Bytes of one copy of shared tensor ``a`` (a vector that a TMA copy fills,
    ``tma_filled``: its copy's aligned box, rounded to 128 bytes,
    :func:`~cypressc.ir.target.vector_buffer_bytes`); E045 at the ``mems`` entry that put it in SHARED (dependence
    analysis' ``sites``) when an extent is only known at run time."""
    n = DTYPE_BYTES[a.dtype]
    for s in a.shape:
        v = static(s)
        if v is None:
            t = sites.tensors.get(a.name) if sites is not None else None
            what, loc, notes = f"shared tensor %{a.name}", NO_LOC, ()
            if t is not None and t.mem_loc is not None:
                what += f" ('{t.param}' of instance '{t.instance}')"
                loc, notes = t.mem_loc, ((f"the launch of '{t.task}' passes it here", t.loc),)
            raise CypressError(
                "E045",
                f"{what} has a run-time extent; shared memory needs static tile shapes",
                loc,
                notes=notes,
                hint="partition by tunable block sizes",
            )
        n *= v
    return vector_buffer_bytes(n) if tma_filled and len(a.shape) == 1 else n


def _replicas(a: N.Alloc) -> int:
    """Copies of a shared tensor: one per warpgroup/warp it is allocated for."""
    n = 1
    for d in a.dims:
        if d.proc in (Proc.WARPGROUP, Proc.WARP):
            n *= static(d.extent) or 1
    return n


class _ProgramOrder:
    """The ops of a module in program order: each op's position, the sequential loops around it
    (outermost first) and a loop's extent (its own position to its body's last op)."""

    def __init__(self, m: N.Module) -> None:
        self.ops = list(walk_ops(m.body))
        self.pos = {id(o): i for i, o in enumerate(self.ops)}
        self.loops: dict[int, list[N.For]] = {}

        def visit(b: N.Block, outer: list[N.For]) -> None:
            for o in b.ops:
                self.loops[id(o)] = outer
                if isinstance(o, (N.For, N.PFor)):
                    visit(o.body, outer + [o] if isinstance(o, N.For) else outer)

        visit(m.body, [])

    def extent(self, lp: N.For) -> tuple[int, int]:
        return self.pos[id(lp)], max(
            [self.pos[id(x)] for x in walk_ops(lp.body)] + [self.pos[id(lp)]]
        )


def _live(
    m: N.Module, joins: dict | None = None
) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """Live range in one tile (first, last position in program order) and stage count per
    SHARED tensor; a ring member's (``joins``, :mod:`cypressc.passes.rings`) widens its ring's."""
    po = _ProgramOrder(m)
    order, pos = po.ops, po.pos
    spans: dict[str, list[int]] = {}
    stages: dict[str, int] = {}
    loop_span: dict[str, tuple[int, int]] = {}
    for o in order:
        if isinstance(o, N.Alloc) and o.mem == Mem.SHARED:
            loops = po.loops[id(o)]
            pipe = [lp for lp in loops if lp.pipeline]
            stages[o.name] = pipe[-1].pipeline if pipe else 1
            if loops:
                loop_span[o.name] = po.extent(loops[0])
    parts = {x.name: x for x in order if isinstance(x, N.Partition)}
    for o in order:
        names = [] if isinstance(o, (N.For, N.PFor)) else _roots(o, parts)
        if isinstance(o, N.Alloc):
            names.append(o.name)
        for n in names:
            if n in stages:
                spans.setdefault(n, []).append(pos[id(o)])
    out = {}
    for n, ps in spans.items():
        lo, hi = min(ps), max(ps)
        if n in loop_span:  # a loop buffer is live across all iterations of its loop
            lo, hi = min(lo, loop_span[n][0]), max(hi, loop_span[n][1])
        out[n] = (lo, hi)
    for name, j in (joins or {}).items():
        if name in out and j.ring in out:
            a, b = out.pop(name), out[j.ring]
            out[j.ring] = (min(a[0], b[0]), max(a[1], b[1]))
        stages.pop(name, None)
    return out, stages


def _tile_loaded(m: N.Module) -> set[str]:
    """SHARED tensors outside every loop whose every write is a copy from GLOBAL memory (a
    TMA load once per tile, like FlashAttention-3's peeled V tile).  In a persistent block the
    next tile's copy into one waits on an *empty* mbarrier that sync-insertion gives it
    (``tile`` edges), so a tensor used after it in the tile may share its bytes: that copy
    then also waits for the later tensor's readers."""
    po, sym = _ProgramOrder(m), Symbols(m)
    out = {
        o.name
        for o in po.ops
        if isinstance(o, N.Alloc) and o.mem == Mem.SHARED and not po.loops[id(o)]
    }
    copied = set()
    for o in po.ops:
        if isinstance(o, (N.For, N.PFor, N.Alloc, N.Partition)):
            continue
        for v, _, wr in views_of(o):
            root = sym.root(v)
            if not wr or root not in out:
                continue
            if isinstance(o, N.Copy) and not po.loops[id(o)] and sym.mem(o.src) == Mem.GLOBAL:
                copied.add(root)
            else:
                out.discard(root)
    return out & copied


def _assign(
    g: nx.Graph, size: dict[str, int], order: list[str], align: dict[str, int]
) -> tuple[dict[str, int], int]:
    """First fit of each tensor, in ``order``, at an offset that is a multiple of its
    ``align`` and overlaps no neighbour's bytes in ``g``: (offsets, bytes in all)."""
    off: dict[str, int] = {}
    for n in order:
        taken = sorted((off[x], off[x] + size[x]) for x in g.neighbors(n) if x in off)
        o = 0
        for lo, hi in taken:
            if o + size[n] <= lo:
                break
            o = max(o, -(-hi // align[n]) * align[n])
        off[n] = o
    total = max((off[n] + size[n] for n in off), default=0)
    return off, total


def resource_allocation(m: N.Module) -> N.Module:
    """Allocate shared memory and check registers (paper §4.2.4) for ``m.target`` (the
    machine and the BLOCK knobs; :meth:`Target.default` for a module written by hand).

    Raises :class:`CypressError` E046 (shared memory) or E047 (registers) with a table of
    every tensor, its bytes and live range, and the mapping knobs to turn.
    """
    target = m.target or Target.default(m.name)
    knobs = target.block
    device_max = target.smem_max
    limit = knobs.smem_limit if knobs.smem_limit is not None else device_max
    if limit > device_max:
        raise CypressError(
            "E046",
            f"smem_limit {limit} exceeds the {device_max} bytes a block can have "
            f"on {target.machine.name}",
            target.knob_loc("smem_limit"),
            hint=f"lower `smem_limit:` to at most {_kib(device_max)}, or leave it out "
            "(the default is the machine's maximum)",
        )
    persistent = bool(knobs.persistent)
    # a copy's wait on its readers' release needs a producer role apart from those readers
    ws = bool(knobs.warpspecialize)
    joins = ring_joins(
        m, ws
    )  # tiles that take a position of a stage ring have no bytes of their own
    allocs = {
        o.name: o
        for o in walk_ops(m.body)
        if isinstance(o, N.Alloc) and o.mem == Mem.SHARED and o.name not in joins
    }
    live, stages = _live(m, joins)
    sym = Symbols(m)
    filled = {
        sym.root(o.dst)
        for o in walk_ops(m.body)
        if isinstance(o, N.Copy) and o.reduce is None and sym.mem(o.src) == Mem.GLOBAL
    }
    size = {
        n: _bytes(a, m.sites, n in filled) * stages.get(n, 1) * _replicas(a)
        for n, a in allocs.items()
    }
    pipe = max(stages.values(), default=1)
    barrier_bytes = 2 * 8 * pipe + ALIGN  # full/empty mbarriers + alignment slack
    g = nx.Graph()
    g.add_nodes_from(allocs)
    # (a persistent block's tensors are placed in name order, as when none could share bytes;
    # vectors after the tiles that start with them: no 1024-byte padding after each)
    align = {n: VECTOR_ALIGN if len(a.shape) == 1 else ALIGN for n, a in allocs.items()}
    names = sorted(
        allocs, key=lambda n: (0 if persistent else live.get(n, (0, 0))[0], -align[n], n)
    )
    reloaded = _tile_loaded(m) if persistent else set()
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            la, lb = live.get(a, (0, 0)), live.get(b, (0, 0))
            apart = la[1] < lb[0] or lb[1] < la[0]
            if persistent:  # the next tile writes the earlier one again: only a reloaded copy may
                first = a if la[1] < lb[0] else b
                apart = apart and first in reloaded and stages.get(a, 1) == stages.get(b, 1) == 1
            g.add_edge(a, b, aux=apart)
    # in a persistent block: a later tensor that a copy fills waits on an mbarrier the producer
    # waits on, not a barrier of the consumer warpgroups; and the earlier tensor's next-tile
    # copy waits for the later one's readers: the later that copy comes, the less it costs
    aux = sorted(
        ((a, b) for a, b, d in g.edges(data=True) if d["aux"]),
        key=lambda e: (
            -(size[e[0]] + size[e[1]]),
            -(e[0] in reloaded and e[1] in reloaded) if persistent and ws else 0,
            -min(live[e[0]][0], live[e[1]][0]) if persistent else 0,
        ),
    )
    off, total = _assign(g, size, names, align)
    while total + barrier_bytes > limit and aux:
        g.remove_edge(*aux.pop(0))
        off, total = _assign(g, size, names, align)
    if total + barrier_bytes > limit:
        rows = "\n".join(
            f"  %{n:<24} {size[n]:>8} B  stages {stages.get(n, 1)}  live {live.get(n)}"
            for n in names
        )
        raise CypressError(
            "E046",
            f"shared memory does not fit: {total + barrier_bytes} bytes needed, the limit is "
            f"{limit}\n{rows}\n  (+{barrier_bytes} B of mbarriers and alignment)",
            target.knob_loc("smem_limit") if limit < device_max else target.loc,
            hint=_smem_hint(m, target, pipe, limit, device_max),
        )
    war = [
        (a, b) if live.get(a, (0, 0)) <= live.get(b, (0, 0)) else (b, a)  # the earlier one first
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if not g.has_edge(a, b) and off[a] < off[b] + size[b] and off[b] < off[a] + size[a]
    ]
    regs = _registers(m)
    producer, consumer = _register_split(m, target)
    if regs > consumer:
        raise CypressError(
            "E047",
            f"the consumer threads need about {regs} registers each (accumulators "
            f"{regs - REGISTER_OVERHEAD} + {REGISTER_OVERHEAD} overhead); the budget is {consumer}",
            target.knob_loc("consumer_registers"),
            hint=_register_hint(m, target, regs, consumer, _max_consumer(m, target, producer)),
        )
    bar_off = -(-total // 16) * 16  # mbarriers are 8-byte objects; a vector may end the layout
    return replace(
        m,
        resources=N.Resources(
            smem={n: N.SmemSlot(off[n], size[n], stages.get(n, 1)) for n in names},
            smem_bytes=bar_off + barrier_bytes,
            barrier_offset=bar_off,
            barrier_bytes=barrier_bytes - ALIGN,
            smem_limit=limit,
            war=tuple(war),
            registers=regs,
            register_budget=(producer, consumer),
        ),
    )


def _warpgroups(m: N.Module) -> int:
    """Consumer warpgroups of the block: the largest static WARPGROUP extent (1 if none)."""
    wgs = 1
    for o in walk_ops(m.body):
        for d in getattr(o, "dims", ()):
            if d.proc == Proc.WARPGROUP:
                wgs = max(wgs, static(d.extent) or 1)
    return wgs


def _register_pool(wgs: int, ws: bool, file: int) -> tuple[int, int]:
    """(registers per thread at launch, their sum over one thread of each warpgroup).

    The kernel is compiled with ``__launch_bounds__(THREADS, 1)``, so ptxas gives every
    thread ``file / THREADS`` registers rounded down to the allocation unit of 8 (at most
    256), and the block is launched holding THREADS times that.  ``setmaxnreg`` only moves
    registers between the block's warpgroups: a consumer's ``setmaxnreg.inc`` that the
    producer's ``.dec`` cannot cover waits forever (5 warpgroups: 96 per thread, 61440 in
    all, not the 65536 of the register file)."""
    groups = wgs + (1 if ws else 0)
    per_thread = min(256, file // (128 * groups) // 8 * 8)
    return per_thread, groups * per_thread


def _register_split(m: N.Module, target: Target) -> tuple[int, int]:
    """Registers per producer / consumer thread (``setmaxnreg``), checked against what the
    block is launched with (:func:`_register_pool`): 128 x (producer + WGS x consumer) <=
    THREADS x the per-thread launch registers."""
    wgs = _warpgroups(m)
    knobs = target.block
    ws = bool(knobs.warpspecialize)
    file = target.machine.limits.get("registers_per_block", 65536)
    producer = (knobs.producer_registers or 40) if ws else 0
    launch, pool = _register_pool(wgs, ws, file)
    default = min(240, ((pool - producer) // wgs) // 8 * 8)
    consumer = knobs.consumer_registers or default
    if 128 * (producer + wgs * consumer) > 128 * pool:
        named = [
            f"`{k}: {getattr(knobs, k)}`"
            for k in ("consumer_registers", "producer_registers")
            if getattr(knobs, k)
        ]
        wg = tunable_roles(m).warpgroups
        fewer = (
            f"lower the warpgroup count {fmt_tunables(wg, 'and')}"
            if wg
            else "use fewer consumer warpgroups"
        )
        threads = 128 * (wgs + (1 if ws else 0))
        raise CypressError(
            "E047",
            f"registers: {wgs} consumer warpgroup(s) x {consumer} + a producer warpgroup x "
            f"{producer} per thread need {128 * (producer + wgs * consumer)} of the {128 * pool} registers "
            f"a block of {threads} threads is launched with ({launch} per thread of the {file}; "
            "setmaxnreg cannot take more)",
            target.knob_loc("consumer_registers", "producer_registers"),
            hint=_join([f"lower {' or '.join(named)}" if named else "", fewer]),
        )
    if ws and producer > consumer:
        raise CypressError(
            "E047",
            f"the producer warpgroup gets {producer} registers per thread, more than the "
            f"consumers' {consumer}: it only issues TMA copies, and setmaxnreg gives what it frees "
            "to the consumers",
            target.knob_loc("producer_registers", "consumer_registers"),
            hint="lower `producer_registers:` (default 40) or raise `consumer_registers:`",
        )
    return producer, consumer


def _max_consumer(m: N.Module, target: Target, producer: int) -> int:
    """The most registers per consumer thread that setmaxnreg (<= 256) and the registers the
    block is launched with (:func:`_register_pool`) allow."""
    ws = bool(target.block.warpspecialize)
    wgs = _warpgroups(m)
    _, pool = _register_pool(wgs, ws, target.machine.limits.get("registers_per_block", 65536))
    return min(256, ((pool - producer) // wgs) // 8 * 8)


def _kib(n: int) -> str:
    return f"{n // 1024}KiB" if n % 1024 == 0 else f"{n} bytes"


def _join(opts: list[str]) -> str:
    """``a, b, or c`` over the non-empty options."""
    opts = [o for o in opts if o]
    return opts[0] if len(opts) == 1 else ", ".join(opts[:-1]) + ", or " + opts[-1]


def _smem_hint(m: N.Module, target: Target, pipe: int, limit: int, device_max: int) -> str:
    """E046's remedies, in this program's and this mapping's own terms: the pipeline depth
    if the loop is pipelined, the tunables that size its shared tiles, ``persistent`` when
    it is what keeps tensors from sharing bytes, ``smem_limit`` only if it can still grow."""
    tiles = tunable_roles(m).tiles(Mem.SHARED)
    opts = [
        f"lower `pipeline: {pipe}`" if pipe > 1 else "",
        f"shrink the tile tunables {fmt_tunables(tiles)}"
        if tiles
        else "shrink the blocks the program partitions into shared memory",
    ]
    if target.block.persistent:
        live, _ = _live(m)
        spans = sorted(live.values())
        if any(a[1] < b[0] for a, b in zip(spans, spans[1:])):
            opts.append(
                "drop `persistent: true` (in a persistent block only a tensor copied in once "
                "per tile, outside the main loop, shares its bytes with one used after it)"
            )
    if limit < device_max:
        opts.append(f"raise `smem_limit:` (at most {_kib(device_max)} on {target.machine.name})")
    return _join(opts)


def _register_hint(m: N.Module, target: Target, regs: int, consumer: int, most: int) -> str:
    """E047's remedies for accumulators that do not fit: more warpgroups (the program's own
    warpgroup-count tunable), smaller register tiles, or a larger budget if setmaxnreg allows."""
    roles = tunable_roles(m)
    wg, tiles = roles.warpgroups, roles.tiles(Mem.REGISTER)
    opts = [
        f"raise the warpgroup count {fmt_tunables(wg, 'and')} so that each warpgroup holds "
        "fewer rows"
        if wg
        else "split the tile over more consumer warpgroups (a prange "
        "launching WARPGROUP instances)",
        f"shrink the tile tunables {fmt_tunables(tiles)}" if tiles else "",
    ]
    if consumer < most and regs <= most:
        opts.append(f"raise `consumer_registers:` to {-(-regs // 8) * 8} (at most {most})")
    return _join(opts)


def _roots(o: N.Op, parts: dict[str, N.Partition]) -> list[str]:
    """The root tensors of the views op ``o`` names (its layouts included)."""
    from cypressc.ir.subst import map_views

    names: list[str] = []

    def grab(v):
        while isinstance(v, N.Piece):
            v = parts[v.partition].base
        names.append(v.name)
        return v

    map_views(o, grab)
    return names


def _registers(m: N.Module) -> int:
    """Registers per consumer thread: the most 32-bit words of REGISTER tensors live at one
    point of the block program (a tensor from its first to its last use; one made before a
    loop and used in it, across the whole loop), plus :data:`REGISTER_OVERHEAD`."""
    po = _ProgramOrder(m)
    order, pos, loops = po.ops, po.pos, po.loops
    parts = {x.name: x for x in order if isinstance(x, N.Partition)}
    regs = {o.name: o for o in order if isinstance(o, N.Alloc) and o.mem == Mem.REGISTER}
    span: dict[str, list[int]] = {}

    for o in order:
        if isinstance(o, (N.For, N.PFor)):
            continue
        for n in _roots(o, parts):
            if n not in regs:
                continue
            lo = hi = pos[id(o)]
            for lp in loops[id(o)]:
                if lp not in loops[id(regs[n])] and lp is not regs[n]:
                    lo, hi = min(lo, po.extent(lp)[0]), max(hi, po.extent(lp)[1])
                    break  # the outermost loop the tensor outlives
            sp = span.setdefault(n, [lo, hi])
            sp[0], sp[1] = min(sp[0], lo), max(sp[1], hi)

    def words(a: N.Alloc) -> int:
        n = DTYPE_BYTES[a.dtype]
        for s in a.shape:
            n *= static(s) or 1
        return -(-n // 4)

    events = sorted({p for lo, hi in span.values() for p in (lo, hi)})
    peak = max(
        (sum(words(regs[n]) for n, (lo, hi) in span.items() if lo <= p <= hi) for p in events),
        default=0,
    )
    return peak + REGISTER_OVERHEAD


class ResourceAllocation(ModulePass):
    """The pass object of :func:`resource_allocation`."""

    name, section = "resource-allocation", "§4.2.4"

    def apply(self, m: N.Module) -> N.Module:
        return resource_allocation(m)
