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

An argument the callee holds ``reduces=`` on (Legion's reduction privilege) gets no
copy-in: its fresh tensor is private and undefined until the callee writes it (E052 when
the callee reads it first), and its copy-out is ``copy.add`` (``dst += src``), which waits
for the destination's writers and readers but not for its other reducers, so reductions
into one piece (a ``prange`` of them) run in any order.

The walk keeps, per allocation, its last writers and the readers since; ``prange``
becomes ``pfor`` whose event array later users wait on with a broadcast ``e[:]``;
``srange`` becomes ``for`` with the outer events it needs as its precondition.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.analysis import dedup_refs
from cypressc.ir.origin import Origin, PartitionSite, Sites, TensorSite
from cypressc.ir.shapes import mma_piece_shape
from cypressc.ir.target import target_of
from cypressc.lang import syntax as S
from cypressc.lang.externals import leaf_functions
from cypressc.lang.kinds import Mem, OperandKind, PartKind, Proc
from cypressc.mapping.tasktree import TaskTree
from cypressc.lang.atoms import AUTO_ATOM
from cypressc.passes.atom_derivation import AtomDerivation
from cypressc.passes.dependence_checks import MappingChecks, ReductionChecks, _Misfit
from cypressc.passes.dependence_state import REDUCE, WRITE, Namer, TState, _Frame, _Scope
from cypressc.passes.entry_sizes import entry_sizes
from cypressc.passes.extents import check_block, check_division, check_extent, check_value
from cypressc.passes.kernels import KernelSegment, kernel_name, split_kernels
from cypressc.passes.levels import check_mma_pieces, check_processors, loop_proc

__all__ = ["dependence_analysis", "kernel_modules"]


class _DA(MappingChecks, ReductionChecks, AtomDerivation):
    """The walk: the task tree in, the event IR module out (:meth:`run`); the mapping
    errors it finds on the way, and the reads of undefined private copies of ``reduces=``
    arguments, are its parts in :mod:`cypressc.passes.dependence_checks`,
    the atoms it derives for atom tunables the mapping leaves unbound its part in
    :mod:`cypressc.passes.atom_derivation`."""

    def __init__(self, tree: TaskTree) -> None:
        self.leaves = leaf_functions(tree.program)
        self.tree = tree
        self.names = Namer()
        self.allocs: dict[str, N.Alloc] = {}
        self.parts: dict[str, N.Partition] = {}
        self.sites = Sites({}, {})
        self.extents: dict[str, N.IExpr] = {}  # loop variable -> its extent
        self.pieces: list[tuple] = []  # mma pieces indexed in the loop bodies being lowered
        self.misfits: list[_Misfit] = []  # wgmmas whose atom's N is not their tile's width
        self.issuers: set[str] = set()  # instances whose leaf issues a wgmma
        self.part_procs: dict[
            str, tuple[Origin, ...]
        ] = {}  # mma partition -> its processor's origin
        self.bound = 0  # tunables bound so far: orders origins by depth
        self.segments: list[KernelSegment] = []  # the kernels, when there are several
        # the private copies of reduces= arguments nothing has written yet (E052)
        self.undefined: dict[str, tuple[S.Launch, str, str]] = {}

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

    def mapping_loc(self, instance: str, *key: str | int) -> Loc:
        return self.tree.mapping.instance_loc(instance, *key)

    # -- expressions -------------------------------------------------------------------
    def scalar(self, e: S.Expr, sc: _Scope, index: bool = True) -> N.IExpr:
        """Evaluate a scalar expression, folding what the tunables make static.  Index
        arithmetic (everything but a leaf's scalar operands) must stay integral and
        representable: E048 otherwise, where it is written."""
        if isinstance(e, S.Const):
            v: N.IExpr = N.IConst(e.value)
        elif isinstance(e, S.Name):
            kind, val = sc.env[e.id]
            assert kind == "scalar", (e.id, kind)
            v = val  # type: ignore[assignment]
        elif isinstance(e, (S.BinOp, S.Call)):
            op, (x, y) = (e.op, (e.lhs, e.rhs)) if isinstance(e, S.BinOp) else (e.fn, e.args)
            a, b = self.scalar(x, sc, index), self.scalar(y, sc, index)
            if index:
                check_division(e, op, a, b)
            v = N.ibin(op, a, b)
        elif isinstance(e, S.Shape):
            _, view = sc.env[e.tensor]
            return self.shape(view)[e.dim]  # type: ignore[arg-type]
        else:
            raise TypeError(e)
        if index:
            check_value(e, v)
        return v

    def extent(self, e: S.Expr, sc: _Scope, what: str) -> N.IExpr:
        """A loop range, block extent or make_tensor extent: E049 when it is a number <= 0."""
        v = self.scalar(e, sc)
        check_extent(e, v, what)
        return v

    def view(self, e: S.Expr, sc: _Scope) -> N.View:
        if isinstance(e, S.Name):
            kind, val = sc.env[e.id]
            assert kind == "tensor"
            return val  # type: ignore[return-value]
        assert isinstance(e, S.Piece)
        _, pname = sc.env[e.partition]
        idx = tuple(self.scalar(i, sc) for i in e.indices)
        part = self.parts.get(pname)  # type: ignore[arg-type]
        if (
            part is not None and part.kind == PartKind.MMA
        ):  # checked once the loop's own checks have run
            self.pieces.append((e, part, idx, sc.here(f"the loop indexes '{e.partition}' here")))
        return N.Piece(pname, idx)  # type: ignore[arg-type]

    def atom(self, e: S.Expr, sc: _Scope) -> str:
        if isinstance(e, S.Atom):
            return e.name
        assert isinstance(e, S.Name)
        return str(sc.env[e.id][1])

    def proc(self, e: S.Expr, sc: _Scope) -> Proc:
        """A processor argument: a processor tunable's value or a level the program names."""
        assert isinstance(e, S.Name)
        return Proc(sc.env[e.id][1] if e.id in sc.env else e.id)

    @staticmethod
    def origin(e: S.Expr, sc: _Scope) -> tuple[Origin, ...]:
        """The mapping value behind an atom or processor argument (none for a literal); for
        a derived atom, the values that set its tile's width."""
        if isinstance(e, S.Name) and e.id in sc.derived:
            return sc.derived[e.id].origins
        o = sc.origins.get(e.id) if isinstance(e, S.Name) else None
        return (o,) if o is not None else ()

    # -- statements --------------------------------------------------------------------
    def body(self, stmts: tuple[S.Stmt, ...], sc: _Scope, f: _Frame) -> None:
        for s in stmts:
            if isinstance(s, S.Tunable):
                val = sc.node.tunables[s.name]
                kind = {"int": "scalar", "processor": "proc", "atom": "atom"}[s.kind]
                self.bound += 1
                if val == AUTO_ATOM:  # unbound in the mapping: inherited or derived
                    self.bind_auto_atom(s, sc)
                    continue
                inst = sc.node.instance.instance
                row = self.tree.mapping.origins.get(inst)
                o = Origin(
                    s.name,
                    val,
                    inst,
                    self.mapping_loc(inst, "tunables", s.name),
                    self.bound,
                    shared=row is not None and s.name in row.shared,
                )
                sc.origins[s.name] = o
                sc.env[s.name] = (kind, N.IConst(val, (o,)) if kind == "scalar" else val)
            elif isinstance(s, S.Let):
                val = self.scalar(s.value, sc)
                if not isinstance(val, (N.IConst, N.IVar)):
                    name = self.names.fresh(s.name)
                    self.emit(f, N.Let(name, val))
                    val = N.IVar(name)
                sc.env[s.name] = ("scalar", val)
            elif isinstance(s, S.MakeTensor):
                name = self.names.fresh(s.name)
                dims = tuple(self.extent(d, sc, "make_tensor extent") for d in s.dims)
                self.emit(f, N.Alloc(name, dims, s.type.dtype, Mem.NONE))
                self.sites.tensors[name] = TensorSite(
                    sc.node.instance.instance, s.name, -1, Mem.NONE, s.loc
                )
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
        if s.kind == PartKind.BLOCKS:
            params = tuple(self.extent(a, sc, "block extent") for a in s.args)
            for d, (a, b, x) in enumerate(zip(s.args, params, shape)):
                check_block(a, b, x, s.tensor, d)
            piece = params
        elif s.kind == PartKind.SLICES:
            d = s.args[0].value  # type: ignore[union-attr]
            params = (N.IConst(d),)
            piece = tuple(x for i, x in enumerate(shape) if i != d)
        else:
            atom_name = self.partition_atom(s, sc, shape)
            proc = self.proc(s.args[1], sc)
            op = s.args[2].value  # type: ignore[union-attr]
            params = (atom_name, proc, op)
            try:
                piece = mma_piece_shape(
                    shape,
                    atom_name,
                    proc,
                    op,
                    s.loc,
                    atom_origin=self.origin(s.args[0], sc),
                    proc_origin=self.origin(s.args[1], sc),
                    breaks=sc.here(f"it breaks this partition of '{s.tensor}'"),
                )
            except CypressError as err:
                raise self.explain_derived(err, s, sc, shape) from None
        name = self.names.fresh(s.name)
        if s.kind == PartKind.MMA:
            self.part_procs[name] = self.origin(s.args[1], sc)
        self.emit(f, N.Partition(name, base, s.kind, params, piece))
        self.sites.partitions[name] = PartitionSite(
            sc.node.instance.instance, s.tensor, s.loc, self.root(base)
        )
        sc.env[s.name] = ("part", name)

    def loop(self, s: S.Loop, sc: _Scope, f: _Frame) -> None:
        his = tuple(self.extent(e, sc, f"{s.kind} extent") for e in s.extents)
        self._one_loop(s, 0, sc, f, his, sequential=s.kind == "srange")

    def _one_loop(
        self, s: S.Loop, d: int, sc: _Scope, f: _Frame, his: tuple[N.IExpr, ...], sequential: bool
    ) -> None:
        var = self.names.fresh(s.vars[d])
        sc.env[s.vars[d]] = ("scalar", N.IVar(var))
        self.extents[var] = his[d]
        inner = _Frame(f, sequential)
        if d + 1 < len(s.vars):
            self._one_loop(s, d + 1, sc, inner, his, sequential)
        else:
            self.body(s.body, sc, inner)
        ev = self.names.event()
        yields = dedup_refs(
            r
            for root in inner.touched
            for r in inner.state[root].writes + inner.state[root].reads + inner.state[root].reducers
        )
        block = N.Block(tuple(inner.ops), yields)
        pre = dedup_refs(inner.needs)
        hi = his[d]
        if sequential:
            pipe = sc.node.instance.pipeline or 0 if sc.node.proc == Proc.BLOCK else 0
            op: N.Op = N.For(ev, var, N.IConst(0), hi, pre, block, pipeline=pipe)
            ref = N.EvRef(ev)
        else:
            proc, kid = loop_proc(self.tree, s, sc.node)
            check_processors(self.tree, s, sc.node, proc, kid, hi)
            op = N.PFor(ev, var, N.IConst(0), hi, proc, pre, block)
            ref = N.EvRef(ev, (None,))
        for e, part, idx, breaks in [p for p in self.pieces if N.IVar(var) in p[2]]:
            check_mma_pieces(e, part, idx, self.extents, breaks)
        self.emit(f, op)
        for root, kind in inner.touched.items():
            # the loop's own event stands for everything its body did to `root` (a loop that
            # only reduces into it is one reducer: it commutes with the other reducers)
            if kind == WRITE:
                f.write_deps(root)
                f.did_write(root, ref)
            elif kind == REDUCE:
                f.reduce_deps(root)
                f.did_reduce(root, ref)
            else:
                f.read_deps(root)
                f.did_read(root, ref)

    def launch(self, s: S.Launch, sc: _Scope, f: _Frame) -> None:
        child = sc.node.child(s)
        cv = child.variant
        args = list(s.args)
        env: dict[str, tuple[str, object]] = {}
        fresh: list[tuple[S.Param, N.View, str]] = []
        tensor_index = {p.name: j for j, p in enumerate(cv.tensor_params)}
        for arg, p in zip(args, cv.params):
            if isinstance(p.type, S.ScalarType):
                env[p.name] = ("scalar", self.scalar(arg, sc, index=p.type.kind == "int"))
                continue
            v = self.view(arg, sc)
            self._check_piece_level(s, sc, child, arg, v)
            if p.name in cv.reduces and _passes_through(child, p.name):
                # no private copy: adding the children's sums into a zero copy, then that into
                # the view, adds what adding them into the view does (reductions commute)
                env[p.name] = ("tensor", v)
                continue
            mem = child.mems[p.name]
            # step 1: a fresh allocation in the memory the mapping names
            inst = child.instance.instance
            name = self.names.fresh(f"{p.name}_{inst}")
            alloc = N.Alloc(
                name, self.shape(v), p.type.dtype, mem, v if isinstance(v, N.Piece) else None
            )
            if p.name in cv.reduces:  # a private copy: it starts undefined until written
                self.undefined[name] = (s, p.name, cv.name)
            self.emit(f, alloc)
            j = tensor_index[p.name]
            self.sites.tensors[name] = TensorSite(
                inst, p.name, j, mem, s.loc, self.mapping_loc(inst, "mems", j), s.task, self.root(v)
            )
            # step 2: copy-in what the callee reads
            reads = p.name in cv.reads
            if reads:
                self.touch(self.root(v), True, s.loc, f"'{s.task}' reads it")
                ev = N.EvRef(self.names.event())
                self.emit(
                    f, N.Copy(ev.name, v, N.TRef(name), dedup_refs(f.read_deps(self.root(v))))
                )
                f.did_read(self.root(v), ev)
                f.did_write(name, ev)
            else:
                f.state[name] = TState()
            env[p.name] = ("tensor", N.TRef(name))
            fresh.append((p, v, name))
        # step 3: the callee's body
        csc = _Scope(child, env, caller=sc)
        self.body(cv.body, csc, f)
        # step 4: copy-out what the callee writes
        # (a reduces= argument's is ``copy.add``: it adds the private copy into the view)
        for p, v, name in fresh:
            reduce = p.name in cv.reduces
            if p.name not in cv.writes and not reduce:
                continue
            root = self.root(v)
            self.touch(root, reduce, s.loc, f"'{s.task}' reduces into it")
            # a private copy exists only where the callee reads or writes it (else it hands
            # the argument on, _passes_through), and a write comes first (E052 at a read)
            own = f.state[name]  # the copy reads the fresh tensor: after its writers and reducers
            deps = (
                list(own.writes)
                + list(own.reducers)
                + (f.reduce_deps(root) if reduce else f.write_deps(root))
            )
            ev = N.EvRef(self.names.event())
            self.emit(
                f,
                N.Copy(
                    ev.name, N.TRef(name), v, dedup_refs(deps), reduce="add" if reduce else None
                ),
            )
            f.did_read(name, ev)
            if reduce:
                f.did_reduce(root, ev)
            else:
                f.did_write(root, ev)

    def leaf_call(self, s: S.LeafCall, sc: _Scope, f: _Frame) -> None:
        fn = self.leaves[s.fn]
        for j, (p, mem) in enumerate(sc.node.mems.items()):
            if mem == Mem.NONE:
                inst = sc.node.instance.instance
                raise CypressError(
                    "E042",
                    f"leaf '{sc.node.variant.name}' touches '{p}', which instance "
                    f"'{inst}' maps to NONE",
                    self.mapping_loc(inst, "mems", j),
                    notes=((sc.here(f"{s.fn}() touches it"), s.loc),),
                    hint="a leaf computes on data: map its tensors to REGISTER, SHARED or GLOBAL",
                )
        args: list[object] = []
        pre: list[N.EvRef] = []
        roots: list[tuple[str, bool, bool]] = []
        for a, rule in zip(s.args, fn.operands):
            if rule.kind == OperandKind.ATOM:
                args.append(N.AtomArg(self.atom(a, sc)))
            elif rule.kind == OperandKind.SCALAR:
                args.append(self.scalar(a, sc, index=False))  # a value, not an index: 0.5 is fine
            else:
                v = self.view(a, sc)
                args.append(v)
                root = self.root(v)
                self.touch(root, rule.reads, s.loc, f"{s.fn}() reads it")
                if rule.writes:
                    pre += f.write_deps(root)
                elif rule.reads:
                    pre += f.read_deps(root)
                roots.append((root, rule.reads, rule.writes))
        self.check_leaf_atoms(s, sc, fn, args)
        self._check_leaf_mems(s, sc, fn, args)
        self._check_wgmma_atom(s, sc, fn, args)
        ev = N.EvRef(self.names.event())
        self.emit(
            f,
            N.Call(
                ev.name,
                s.fn,
                tuple(args),
                dedup_refs(pre),
                task=sc.node.variant.name,
                ext=fn if fn.external is not None else None,
            ),
        )
        for root, r, w in roots:
            if w:
                f.did_write(root, ev)
            elif r:
                f.did_read(root, ev)

    # -- module ------------------------------------------------------------------------
    def run(self) -> N.Module:
        root = self.tree.root
        v = root.variant
        env: dict[str, tuple[str, object]] = {}
        params: list[N.Alloc] = []
        scalars: list[str] = []
        floats: list[str] = []
        es = entry_sizes(v)  # one name per size the program ties (cypressc/passes/entry_sizes.py)
        ivar: dict[str, N.IVar] = {}

        def size(n: str) -> N.IVar:
            if n not in ivar:
                ivar[n] = N.IVar(self.names.fresh(n))
                scalars.append(ivar[n].name)
            return ivar[n]

        for p in v.params:
            if isinstance(p.type, S.TensorType):
                dims = [size(n) for n in es.dims[p.name]]
                for d, n in zip(p.type.dims or (), es.dims[p.name]):
                    env[d] = ("scalar", ivar[n])
                name = self.names.fresh(p.name)
                a = N.Alloc(name, tuple(dims), p.type.dtype, Mem.GLOBAL)
                self.allocs[name] = a
                params.append(a)
                env[p.name] = ("tensor", N.TRef(name))
            elif p.type.kind == "float":
                n = self.names.fresh(p.name)
                floats.append(n)
                env[p.name] = ("scalar", N.IVar(n))
            else:
                env[p.name] = ("scalar", size(es.ints[p.name]))
        aliases = tuple((a, ivar[n].name) for a, n in es.aliases.items())
        f = _Frame(None)
        sc = _Scope(root, env)
        kernels = [(st, _top_blocks(st, root)) for st in v.body]
        several = sum(len(b) for _, b in kernels) > 1
        for st, blocks in kernels:
            start = len(f.ops)
            self.body((st,), sc, f)
            if several and blocks:
                self.segments.append(_kernel_segment(st, blocks, start, len(f.ops)))
            elif several:
                _check_between_kernels(st, f.ops[start:])
        if self.misfits:
            self._raise_misfits()
        return N.Module(
            self.tree.program.kernel_name,
            tuple(params),
            tuple(scalars),
            N.Block(tuple(f.ops)),
            floats=tuple(floats),
            size_aliases=aliases,
            sites=self.sites,
        )


def _passes_through(node, pname: str) -> bool:
    """Whether ``node``'s variant only hands its ``reduces=`` parameter ``pname`` (or pieces
    of it) on to launches that reduce into it: then it needs no private copy of its own (Legion
    starts a reduction instance at the identity; here the children's ``copy.add`` go straight
    into the caller's view).  A leaf call on it, or a launch that reads or writes it, needs
    the private copy (and writes it first, E052)."""
    names = {pname}

    def named(a: S.Expr) -> bool:
        return (isinstance(a, S.Name) and a.id in names) or (
            isinstance(a, S.Piece) and a.partition in names
        )

    for st in S.walk(node.variant.body):
        if isinstance(st, S.PartitionDecl) and st.tensor in names:
            names.add(st.name)
        elif isinstance(st, S.Launch):
            callee = node.child(st).variant
            if any(
                named(a) and q.name not in callee.reduces for a, q in zip(st.args, callee.params)
            ):
                return False
        elif isinstance(st, S.LeafCall) and any(named(a) for a in st.args):
            return False
    return True


def _top_blocks(st: S.Stmt, node) -> list:
    """The BLOCK instances statement ``st`` of ``node``'s variant reaches first, each the
    block program of one kernel (a launch of a HOST task that launches two is two)."""

    if isinstance(st, S.Launch):
        return node.child(st).kernel_blocks()
    if isinstance(st, S.Loop):
        return [b for s in st.body for b in _top_blocks(s, node)]
    return []


def _kernel_segment(st: S.Stmt, blocks: list, start: int, end: int) -> KernelSegment:
    """The kernel that entry statement ``st`` launches; E051 when it launches several."""
    if len(blocks) > 1:
        raise CypressError(
            "E051",
            f"this statement launches {len(blocks)} kernels (block programs "
            f"{', '.join(repr(b.instance.instance) for b in blocks)}) in a program of several",
            st.loc,
            hint="launch each kernel from the entry task's body, one statement per kernel (a "
            "HOST task it launches may partition and prange over the blocks of one kernel)",
        )
    return KernelSegment(start, end, blocks[0], st.loc)


def _check_between_kernels(st: S.Stmt, ops: list) -> None:
    """The entry task's own statements between kernels may only name sizes and partitions:
    E051 for anything that would have to run on the host or live between two kernels."""
    for op in ops:
        if isinstance(op, (N.Let, N.Partition)):
            continue
        what = (
            "a tensor made here would live between kernels"
            if isinstance(op, N.Alloc)
            else "work outside a kernel has nowhere to run"
        )
        raise CypressError(
            "E051",
            f"the entry task of a program of several kernels may only compute sizes and "
            f"partitions between its kernels: {what}",
            st.loc,
            hint="pass a scratch tensor in as an entry parameter, and do the work in a kernel",
        )


def kernel_modules(tree: TaskTree) -> list[N.Module]:
    """The event IR of each kernel of the program (paper §4.2.1 per kernel; issue #38): one
    module when the entry task reaches one BLOCK program (exactly
    :func:`dependence_analysis`'s), else one per entry statement that launches one, cut by
    :func:`~cypressc.passes.kernels.split_kernels` and each targeted at its own BLOCK
    instance's knobs.  Raises what :func:`dependence_analysis` raises, and E051 when the
    entry task launches several kernels in one statement (a loop or a HOST task around
    two) or does anything but name sizes and partitions between them."""
    da = _DA(tree)
    m = da.run()
    if not da.segments:
        return [replace(m, target=target_of(tree))]
    insts = [s.block.instance.instance for s in da.segments]
    names = [kernel_name(m.name, insts, i) for i in range(len(insts))]
    targets = [target_of(tree, s.block) for s in da.segments]
    return split_kernels(m, da.segments, names, targets)


def dependence_analysis(tree: TaskTree) -> N.Module:
    """Lower an instantiated task tree to event IR (paper §4.2.1).

    Raises :class:`CypressError` (E040–E043) when a tile does not fit its mma atom (or a
    wgmma issues an atom whose N is not its accumulator tile's width), a ``prange`` mixes
    processor levels, a task takes a piece of a ``partition_by_mma`` laid out for another
    level, a leaf is mapped to touch a NONE tensor or a
    memory its leaf function cannot read, or an atom tunable the mapping leaves unbound
    cannot be derived (:mod:`cypressc.passes.atom_derivation`) — located at the mapping value that caused it
    when there is one (:mod:`cypressc.ir.origin`) — and E048/E049 when static index
    arithmetic divides by zero, is inexact, non-integral, out of range, or gives a
    non-positive extent (:mod:`cypressc.passes.extents`).  The module's
    ``sites`` traces its allocations and partitions back to the program and mapping.

    A program of several kernels is one module here, its kernels one after another (what
    the sequential interpreter runs); :func:`kernel_modules` cuts it into one per kernel.
    """
    return replace(_DA(tree).run(), target=target_of(tree))
