"""Pass 1, ``dependence-analysis`` (Cypress paper §4.2.1, Fig. 8).

A syntax-directed, in-order walk of the instantiated task tree that emits event IR.
Each launch is lowered with the copy-in/copy-out discipline, in four steps:

1. a fresh allocation per tensor argument, in the memory the mapping names;
2. a copy-in for each argument the callee reads, after the argument's last writers;
3. the callee's body, lowered recursively with the fresh tensors (a leaf becomes a
   ``call``);
4. a copy-out for each argument the callee writes, after the callee's last writers of
   the fresh tensor and after every earlier reader and writer of the destination
   (true and anti dependences).

The walk keeps, per allocation, its last writers and the readers since; ``prange``
becomes ``pfor`` whose event array later users wait on with a broadcast ``e[:]``;
``srange`` becomes ``for`` with the outer events it needs as its precondition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.analysis import dedup_refs
from cypressc.ir.shapes import mma_piece_shape, static
from cypressc.lang import syntax as S
from cypressc.lang.intrinsics import LEAF_FUNCTIONS
from cypressc.mapping.tasktree import TaskNode, TaskTree

__all__ = ["dependence_analysis", "Namer"]


class Namer:
    """Deterministic unique names: ``x``, ``x_1``, ``x_2``…"""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.events = 0

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def event(self) -> str:
        # '#' cannot appear in a source name, so events never collide with tensors
        self.events += 1
        return f"ev#{self.events}"


@dataclass
class TState:
    """Events of one allocation: its last writers, and its readers since then."""

    writes: list[N.EvRef] = field(default_factory=list)
    reads: list[N.EvRef] = field(default_factory=list)


class _Frame:
    """One block being emitted: its ops, the per-allocation state, and, for loop bodies,
    the outer events the body needs (they become the loop's precondition) and the outer
    allocations it touched (their final events become the body's yield)."""

    def __init__(self, outer: "_Frame | None", sequential: bool = True) -> None:
        self.sequential = sequential
        self.ops: list[N.Op] = []
        self.state: dict[str, TState] = {}
        self.outer = outer
        self.needs: list[N.EvRef] = []
        self.touched: dict[str, bool] = {}  # outer allocation -> written here?
        self.local: set[str] = set()
        self.pulled: dict[str, str] = {}

    def _outer(self, root: str) -> TState | None:
        f = self.outer
        while f is not None:
            if root in f.state:
                return f.state[root]
            f = f.outer
        return None

    def _outer_deps(self, root: str, st: TState, write: bool) -> list[N.EvRef]:
        if self.outer is None or root in self.local or st.writes:
            return []
        o = self._outer(root)
        if o is None:
            return []
        return list(o.writes) + (list(o.reads) if write else [])

    def _local(self, root: str, write: bool) -> tuple[TState, list[N.EvRef]]:
        """The local state of ``root`` and the outer events this access must wait for.

        In a ``pfor`` body they go straight onto the op (iterations are independent); in
        a ``for`` body they join the loop's precondition (paper Fig. 8, ``for … {e6}``)."""
        st = self.state.setdefault(root, TState())
        outer = self._outer_deps(root, st, write)
        if self.sequential:
            lvl = self.pulled.get(root)
            if lvl != "w" and (write or lvl is None):
                self.needs += outer
                self.pulled[root] = "w" if write else "r"
            return st, []
        return st, outer

    def read_deps(self, root: str) -> list[N.EvRef]:
        st, outer = self._local(root, False)
        return outer + list(st.writes)

    def write_deps(self, root: str) -> list[N.EvRef]:
        st, outer = self._local(root, True)
        return outer + list(st.writes) + list(st.reads)

    def did_read(self, root: str, ev: N.EvRef) -> None:
        self.state.setdefault(root, TState()).reads.append(ev)
        if root not in self.local:
            self.touched.setdefault(root, False)

    def did_write(self, root: str, ev: N.EvRef) -> None:
        st = self.state.setdefault(root, TState())
        st.writes, st.reads = [ev], []
        if root not in self.local:
            self.touched[root] = True


@dataclass
class _Scope:
    node: TaskNode
    env: dict[str, tuple[str, object]]


class _DA:
    def __init__(self, tree: TaskTree) -> None:
        self.tree = tree
        self.names = Namer()
        self.allocs: dict[str, N.Alloc] = {}
        self.parts: dict[str, N.Partition] = {}

    # -- helpers -----------------------------------------------------------------------
    def root(self, v: N.View) -> str:
        return N.view_root(v, self.parts)

    def shape(self, v: N.View) -> tuple[N.IExpr, ...]:
        if isinstance(v, N.TRef):
            return self.allocs[v.name].shape
        return self.parts[v.partition].piece_shape

    def dtype(self, v: N.View) -> str:
        return self.allocs[self.root(v)].dtype

    def emit(self, f: _Frame, op: N.Op) -> None:
        f.ops.append(op)
        if isinstance(op, N.Alloc):
            self.allocs[op.name] = op
            f.local.add(op.name)
        elif isinstance(op, N.Partition):
            self.parts[op.name] = op

    # -- expressions -------------------------------------------------------------------
    def scalar(self, e: S.Expr, sc: _Scope) -> N.IExpr:
        if isinstance(e, S.Const):
            return N.IConst(e.value)
        if isinstance(e, S.Name):
            kind, val = sc.env[e.id]
            assert kind == "scalar", (e.id, kind)
            return val  # type: ignore[return-value]
        if isinstance(e, S.BinOp):
            return N.ibin(e.op, self.scalar(e.lhs, sc), self.scalar(e.rhs, sc))
        if isinstance(e, S.Call):
            return N.ibin(e.fn, self.scalar(e.args[0], sc), self.scalar(e.args[1], sc))
        if isinstance(e, S.Shape):
            _, view = sc.env[e.tensor]
            return self.shape(view)[e.dim]  # type: ignore[arg-type]
        raise TypeError(e)

    def view(self, e: S.Expr, sc: _Scope) -> N.View:
        if isinstance(e, S.Name):
            kind, val = sc.env[e.id]
            assert kind == "tensor"
            return val  # type: ignore[return-value]
        assert isinstance(e, S.Piece)
        _, pname = sc.env[e.partition]
        return N.Piece(pname, tuple(self.scalar(i, sc) for i in e.indices))  # type: ignore[arg-type]

    def atom(self, e: S.Expr, sc: _Scope) -> str:
        if isinstance(e, S.Atom):
            return e.name
        assert isinstance(e, S.Name)
        return str(sc.env[e.id][1])

    def proc(self, e: S.Expr, sc: _Scope) -> str:
        assert isinstance(e, S.Name)
        if e.id in sc.env:
            return str(sc.env[e.id][1])
        return e.id

    # -- statements --------------------------------------------------------------------
    def body(self, stmts: tuple[S.Stmt, ...], sc: _Scope, f: _Frame) -> None:
        for s in stmts:
            if isinstance(s, S.Tunable):
                val = sc.node.tunables[s.name]
                kind = {"int": "scalar", "processor": "proc", "atom": "atom"}[s.kind]
                sc.env[s.name] = (kind, N.IConst(val) if kind == "scalar" else val)
            elif isinstance(s, S.Let):
                val = self.scalar(s.value, sc)
                if not isinstance(val, (N.IConst, N.IVar)):
                    name = self.names.fresh(s.name)
                    self.emit(f, N.Let(name, val))
                    val = N.IVar(name)
                sc.env[s.name] = ("scalar", val)
            elif isinstance(s, S.MakeTensor):
                name = self.names.fresh(s.name)
                self.emit(f, N.Alloc(name, tuple(self.scalar(d, sc) for d in s.dims), s.type.dtype, "NONE"))
                sc.env[s.name] = ("tensor", N.TRef(name))
            elif isinstance(s, S.PartitionDecl):
                self.partition(s, sc, f)
            elif isinstance(s, S.Loop):
                self.loop(s, sc, f)
            elif isinstance(s, S.Launch):
                self.launch(s, sc, f)
            elif isinstance(s, S.LeafCall):
                self.leaf_call(s, sc, f)

    def partition(self, s: S.PartitionDecl, sc: _Scope, f: _Frame) -> None:
        base = sc.env[s.tensor][1]
        assert isinstance(base, (N.TRef, N.Piece))
        shape = self.shape(base)
        if s.kind == "blocks":
            params = tuple(self.scalar(a, sc) for a in s.args)
            piece = params
        elif s.kind == "slices":
            d = s.args[0].value  # type: ignore[union-attr]
            params = (N.IConst(d),)
            piece = tuple(x for i, x in enumerate(shape) if i != d)
        else:
            atom_name = self.atom(s.args[0], sc)
            proc = self.proc(s.args[1], sc)
            op = s.args[2].value  # type: ignore[union-attr]
            params = (atom_name, proc, op)
            piece = mma_piece_shape(shape, atom_name, proc, op, s.loc)
        name = self.names.fresh(s.name)
        self.emit(f, N.Partition(name, base, s.kind, params, piece))
        sc.env[s.name] = ("part", name)

    def loop(self, s: S.Loop, sc: _Scope, f: _Frame) -> None:
        if s.kind == "srange":
            self._one_loop(s, 0, sc, f, sequential=True)
        else:
            self._one_loop(s, 0, sc, f, sequential=False)

    def _loop_proc(self, s: S.Loop, sc: _Scope) -> str:
        procs = {sc.node.child(st).proc for st in S.walk(s.body) if isinstance(st, S.Launch)}
        if len(procs) > 1:
            raise CypressError("E041", "a prange launches tasks mapped to different processor levels "
                               f"({', '.join(sorted(procs))})", s.loc,
                               hint="map every task launched in one prange to the same processor level")
        return procs.pop() if procs else sc.node.proc

    def _check_processors(self, s: S.Loop, sc: _Scope, proc: str, extent: N.IExpr) -> None:
        """A prange that hands work to the processors inside the current one (warps of a
        warpgroup, threads of a warp) has at most one iteration per processor: vectorization
        turns the loop variable into that processor's index (paper §4.2.2)."""
        here = sc.node.proc
        if proc in ("HOST", "BLOCK") or proc == here:
            if proc == "BLOCK" and here == "BLOCK":
                raise CypressError("E041", "a BLOCK task launches a parallel group of BLOCK tasks", s.loc,
                                   hint="map the launched tasks to WARPGROUP (or a deeper level)")
            return
        if len(s.vars) > 1:
            raise CypressError("E041", f"a {len(s.vars)}-dimensional prange over {proc}s: processors "
                               "below BLOCK are numbered in one dimension", s.loc,
                               hint="launch over one prange variable and partition in two steps")
        m = self.tree.machine
        inner, outer = m.level(proc).threads, m.level(here).threads
        if here == "BLOCK" or not inner or not outer:
            return
        want = outer // inner
        got = static(extent)
        if got is None or got > want:
            raise CypressError(
                "E041", f"this prange launches {proc} tasks from a {here} task: it may have at most {want} "
                f"iterations (one per {proc.lower()} in a {here.lower()}), it has "
                f"{got if got is not None else 'a run-time number of'}", s.loc,
                hint="set the tunable that sizes the prange (e.g. PIECES) to at most the processor count")

    def _one_loop(self, s: S.Loop, d: int, sc: _Scope, f: _Frame, sequential: bool) -> None:
        var = self.names.fresh(s.vars[d])
        sc.env[s.vars[d]] = ("scalar", N.IVar(var))
        inner = _Frame(f, sequential)
        if d + 1 < len(s.vars):
            self._one_loop(s, d + 1, sc, inner, sequential)
        else:
            self.body(s.body, sc, inner)
        ev = self.names.event()
        yields = dedup_refs(r for root in inner.touched for r in
                        inner.state[root].writes + inner.state[root].reads)
        block = N.Block(tuple(inner.ops), yields)
        pre = dedup_refs(inner.needs)
        hi = self.scalar(s.extents[d], sc)
        if sequential:
            pipe = sc.node.instance.pipeline or 0 if sc.node.proc == "BLOCK" else 0
            op: N.Op = N.For(ev, var, N.IConst(0), hi, pre, block, pipeline=pipe)
            ref = N.EvRef(ev)
        else:
            proc = self._loop_proc(s, sc)
            self._check_processors(s, sc, proc, hi)
            op = N.PFor(ev, var, N.IConst(0), hi, proc, pre, block)
            ref = N.EvRef(ev, (None,))
        self.emit(f, op)
        for root, written in inner.touched.items():
            # the loop's own event stands for everything its body did to `root`
            if written:
                f.write_deps(root)
                f.did_write(root, ref)
            else:
                f.read_deps(root)
                f.did_read(root, ref)

    def launch(self, s: S.Launch, sc: _Scope, f: _Frame) -> None:
        child = sc.node.child(s)
        cv = child.variant
        args = list(s.args)
        env: dict[str, tuple[str, object]] = {}
        fresh: list[tuple[S.Param, N.View, str]] = []
        for arg, p in zip(args, cv.params):
            if isinstance(p.type, S.ScalarType):
                env[p.name] = ("scalar", self.scalar(arg, sc))
                continue
            v = self.view(arg, sc)
            mem = child.mems[p.name]
            # step 1: a fresh allocation in the memory the mapping names
            name = self.names.fresh(f"{p.name}_{child.instance.instance}")
            alloc = N.Alloc(name, self.shape(v), p.type.dtype, mem, v if isinstance(v, N.Piece) else None)
            self.emit(f, alloc)
            # step 2: copy-in what the callee reads
            reads = p.name in cv.reads
            if reads:
                ev = N.EvRef(self.names.event())
                self.emit(f, N.Copy(ev.name, v, N.TRef(name), dedup_refs(f.read_deps(self.root(v)))))
                f.did_read(self.root(v), ev)
                f.did_write(name, ev)
            else:
                f.state[name] = TState()
            env[p.name] = ("tensor", N.TRef(name))
            fresh.append((p, v, name))
        # step 3: the callee's body
        csc = _Scope(child, env)
        self.body(cv.body, csc, f)
        # step 4: copy-out what the callee writes
        for p, v, name in fresh:
            if p.name not in cv.writes:
                continue
            root = self.root(v)
            deps = list(f.state[name].writes) + f.write_deps(root)
            ev = N.EvRef(self.names.event())
            self.emit(f, N.Copy(ev.name, N.TRef(name), v, dedup_refs(deps)))
            f.did_read(name, ev)
            f.did_write(root, ev)

    def leaf_call(self, s: S.LeafCall, sc: _Scope, f: _Frame) -> None:
        fn = LEAF_FUNCTIONS[s.fn]
        for p, mem in sc.node.mems.items():
            if mem == "NONE":
                raise CypressError(
                    "E042", f"leaf '{sc.node.variant.name}' touches '{p}', which instance "
                    f"'{sc.node.instance.instance}' maps to NONE", sc.node.variant.loc,
                    hint="a leaf computes on data: map its tensors to REGISTER, SHARED or GLOBAL")
        args: list[object] = []
        pre: list[N.EvRef] = []
        roots: list[tuple[str, bool, bool]] = []
        for a, rule in zip(s.args, fn.operands):
            if rule.kind == "atom":
                args.append(N.AtomArg(self.atom(a, sc)))
            elif rule.kind == "scalar":
                args.append(self.scalar(a, sc))
            else:
                v = self.view(a, sc)
                args.append(v)
                root = self.root(v)
                if rule.writes:
                    pre += f.write_deps(root)
                elif rule.reads:
                    pre += f.read_deps(root)
                roots.append((root, rule.reads, rule.writes))
        self._check_leaf_mems(s, sc, fn, args)
        ev = N.EvRef(self.names.event())
        self.emit(f, N.Call(ev.name, s.fn, tuple(args), dedup_refs(pre), task=sc.node.variant.name))
        for root, r, w in roots:
            if w:
                f.did_write(root, ev)
            elif r:
                f.did_read(root, ev)

    def _check_leaf_mems(self, s: S.LeafCall, sc: _Scope, fn, args) -> None:
        for a, rule in zip(args, fn.operands):
            if rule.kind != "tensor" or not rule.mems:
                continue
            mem = self.allocs[self.root(a)].mem
            if mem not in rule.mems:
                raise CypressError(
                    "E043", f"{s.fn}() takes '{rule.name}' in {' or '.join(rule.mems)}, but instance "
                    f"'{sc.node.instance.instance}' places it in {mem}", s.loc,
                    hint="change the instance's mems in the mapping")

    # -- module ------------------------------------------------------------------------
    def run(self) -> N.Module:
        root = self.tree.root
        v = root.variant
        env: dict[str, tuple[str, object]] = {}
        params: list[N.Alloc] = []
        scalars: list[str] = []
        for p in v.params:
            if isinstance(p.type, S.TensorType):
                dims = []
                for d in range(p.type.rank):
                    size = p.type.dims[d] if p.type.dims else None
                    if size is not None and size in env:
                        dims.append(env[size][1])
                        continue
                    n = self.names.fresh(size or f"{p.name}_d{d}")
                    scalars.append(n)
                    dims.append(N.IVar(n))
                    if size is not None:
                        env[size] = ("scalar", N.IVar(n))
                name = self.names.fresh(p.name)
                a = N.Alloc(name, tuple(dims), p.type.dtype, "GLOBAL")
                self.allocs[name] = a
                params.append(a)
                env[p.name] = ("tensor", N.TRef(name))
            else:
                n = self.names.fresh(p.name)
                scalars.append(n)
                env[p.name] = ("scalar", N.IVar(n))
        f = _Frame(None)
        sc = _Scope(root, env)
        self.body(v.body, sc, f)
        return N.Module(self.tree.program.path.rsplit("/", 1)[-1].removesuffix(".cyp"),
                        tuple(params), tuple(scalars), N.Block(tuple(f.ops)), {})


def dependence_analysis(tree: TaskTree) -> N.Module:
    """Lower an instantiated task tree to event IR (paper §4.2.1).

    Raises :class:`CypressError` (E040–E043) when a tile does not fit its mma atom, a
    ``prange`` mixes processor levels, or a leaf is mapped to touch a NONE tensor or a
    memory its leaf function cannot read.
    """
    return _DA(tree).run()
