"""``cuda-lowering`` (paper §4.2.6), the kernel's interface: a parallelized HOST loop around
the block program (a grid dimension), the kernel parameters' privileges, the launcher's
requirements on the sizes and the useful FLOPs (typed expressions over the sizes, which
:mod:`cypressc.backend.cexpr` prints).  The program's names need no checking here: the
emitter spells each so that it meets no name of the kernel (:mod:`cypressc.backend.names`).
Mixed into :class:`cypressc.backend.lower._Lower`."""

from __future__ import annotations

from dataclasses import replace

from cypressc.abi.dtypes import DTYPES
from cypressc.backend import plan as P
from cypressc.backend.refusal import refuse as _refuse
from cypressc.ir import nodes as N
from cypressc.backend.cexpr import KVar, cexpr
from cypressc.ir.analysis import exprs_of, free_vars, grid_extents, reduces, slices_of, views_of
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import PartKind

__all__ = ["KernelInterface"]


class KernelInterface:
    """The HOST-loop and parameter half of the lowering (needs ``self.m``, ``self.sym``,
    ``self.lets``, ``self.target``, ``self.lp`` and the host-loop fields of :class:`_Lower`)."""

    def _mentions(self, e: N.IExpr, var: str) -> bool:
        """Whether ``e`` depends on ``var``, through Lets too."""
        return any(
            n == var or (n in self.lets and self._mentions(self.lets[n], var)) for n in free_vars(e)
        )

    def _when(self, root: str) -> N.IExpr | None:
        """The condition writes of ``root`` are kept under (a last-iteration write: the block's
        coordinate along the HOST loop's grid dimension is the last), or None."""
        if root not in self.last_only:
            return None
        d = self.host_dim
        return N.IBin("==", KVar(f"b{d}"), N.IBin("-", KVar(f"tiles{d}"), N.IConst(1)))

    def _host_loop(self, hl: N.For) -> list[N.Op]:
        """A sequential HOST loop around the block program becomes the last grid dimension.

        Its iterations may run in parallel when (1) no iteration reads a global tensor that
        an iteration writes, (2) every write whose view depends on the loop variable ``j``
        goes to a piece ``P[.., j, ..]`` of a blocks partition (disjoint for distinct j),
        and (3) loop bounds and shapes inside do not depend on ``j``.  A write whose view
        does not depend on ``j`` goes to the same elements in every iteration and nothing
        reads them, so sequentially only the last iteration's write survives: it is kept
        under ``j == last`` (lastprivate) — the programs' result, not an approximation.
        A reduction (``copy.add``) is neither: the iterations' reductions commute.
        """
        j = hl.var
        params = {a.name for a in self.m.params}
        reads: set[str] = set()
        writes: dict[str, list[N.View]] = {}
        reduced: set[str] = set()
        for o in walk_ops(hl.body):
            for e in [
                getattr(o, "lo", None),
                getattr(o, "hi", None),
                *(d.extent for d in getattr(o, "dims", ())),
                *(getattr(o, "shape", ()) or ()),
                *(
                    x
                    for x in (getattr(o, "params", ()) if isinstance(o, N.Partition) else ())
                    if isinstance(x, (N.IConst, N.IVar, N.IBin, N.IProc))
                ),
            ]:
                if e is not None and self._mentions(e, j):
                    _refuse(
                        f"a loop bound, shape or tile size inside the HOST loop over {j} depends on {j}"
                    )
            for v, r, w in views_of(o):
                root = self.sym.root(v)
                if root not in params:
                    continue
                if w and reduces(o):
                    # reductions into one tile commute: iterations may add into the same
                    # elements as parallel blocks (neither a read nor a last-only write)
                    reduced.add(root)
                    continue
                if r:
                    reads.add(root)
                if w:
                    writes.setdefault(root, []).append(v)
        both = sorted(reads & (set(writes) | reduced))
        if both:
            _refuse(
                f"iterations of the HOST loop over {j} read {', '.join(both)}, which iterations "
                "write: they cannot run as parallel blocks"
            )
        for root, views in writes.items():
            dep = [
                any(self._mentions(i, j) for p in self.sym.chain(v) for i in p.idx) for v in views
            ]
            if not any(dep):
                self.last_only.add(root)
                continue
            for v, d in zip(views, dep):
                ok = False
                for piece in self.sym.chain(v):
                    part = self.sym.parts[piece.partition]
                    for i in piece.idx:
                        if isinstance(i, N.IVar) and i.name == j and part.kind == PartKind.BLOCKS:
                            ok = True
                        elif self._mentions(i, j):
                            _refuse(
                                f"{fmt_view(v)} indexes with an expression of {j}; "
                                f"iterations of the HOST loop must write disjoint pieces P[.., {j}, ..]"
                            )
                if not (d and ok):
                    _refuse(
                        f"%{root} is written both at pieces that depend on {j} and at pieces that "
                        "do not"
                    )
        self.host_var, self.host_lo = j, hl.lo
        return list(hl.body.ops)

    # -- expressions over the sizes: what the launcher, the runtime and the tuner evaluate --
    def _sized(self, e: N.IExpr) -> N.IExpr:
        """``e`` with its Lets inlined: an expression over the size arguments when ``e`` is one
        the launcher can compute (unlike :meth:`_Lower.k`, the main loop's bound stays itself,
        not the kernel's ``num_k``)."""
        if isinstance(e, N.IVar) and e.name in self.lets:
            return self._sized(self.lets[e.name])
        if isinstance(e, N.IBin):
            return N.IBin(e.op, self._sized(e.a), self._sized(e.b))
        return e

    def _require(self, lhs: N.IExpr, op: str, rhs: N.IExpr, why: str) -> P.Require:
        lhs, rhs = self._sized(lhs), self._sized(rhs)
        return P.Require(lhs, op, rhs, why)

    def _requires(self, plan: P.KernelPlan) -> list[P.Require]:
        """The launcher's conditions on the sizes: a tensor the TMA reads or stores needs
        16-byte row strides (an innermost extent that is a multiple of 8 16-bit elements;
        not one that only vector pieces are read from, through a flattened map), a
        16-bit tensor stored from registers is written in pairs (an even extent), and a
        tensor read through TMA must not be empty along a dimension no output has (an empty
        output needs no launch; an empty reduction dimension has no TMA map)."""
        shapes = {a.name: a.shape for a in self.m.params}
        out_dims = {d for t in plan.tensors if t.writes for d in shapes[t.name]}
        zero = N.IConst(0)
        reqs = []
        for t in plan.tensors:
            inner = shapes[t.name][-1]
            if t.name in plan.pointer_reads:  # loaded by pointer, never by TMA
                if plan.read_in_pairs(t.name):
                    reqs.append(  # a fragment loads (or adds) its elements in pairs
                        self._require(
                            N.IBin("%", inner, N.IConst(2)),
                            "==",
                            zero,
                            f"the innermost extent of {t.name} ({t.dims[-1]}) must be even",
                        )
                    )
                continue
            maps = [m for m in plan.maps if m.tensor == t.name]
            flat = maps and all(len(m.box) == 1 for m in maps)  # vector pieces: no row stride
            if not flat and (
                t.reads
                or any(isinstance(s, P.TmaStore) and s.map.tensor == t.name for s in plan.epilogue)
            ):
                per16 = 16 // DTYPES[t.dtype].itemsize  # elements in 16 bytes
                reqs.append(
                    self._require(
                        N.IBin("%", inner, N.IConst(per16)),
                        "==",
                        zero,
                        f"the innermost extent of {t.name} ({t.dims[-1]}) must be a "
                        f"multiple of {per16}: TMA needs 16-byte row strides",
                    )
                )
            elif t.writes and (
                t.dtype in ("f16", "bf16")
                or any(isinstance(s, P.StoreDirect) and s.tensor == t.name for s in plan.epilogue)
            ):  # stored from registers in pairs
                reqs.append(
                    self._require(
                        N.IBin("%", inner, N.IConst(2)),
                        "==",
                        zero,
                        f"the innermost extent of {t.name} ({t.dims[-1]}) must be even",
                    )
                )
            if t.reads:
                for d in dict.fromkeys(x for x in shapes[t.name] if x not in out_dims):
                    r = self._require(d, ">", zero, "")
                    reqs.append(
                        replace(
                            r,
                            why=f"{t.name} is read through TMA, which needs a non-empty "
                            f"tensor ({r.c})",
                        )
                    )
        reqs += self._exact_divisions(plan) + self._covered(plan) + self._sliced(plan)
        return list(dict.fromkeys(reqs))

    def _exact_divisions(self, plan: P.KernelPlan) -> list[P.Require]:
        """``a / b`` is exact division in the language (E048 when static); over run-time sizes
        (grouped-query attention's ``H / HK``) the launcher checks ``a % b == 0``."""
        sizes = set(plan.sizes)
        out = []

        def visit(e: N.IExpr) -> None:
            if isinstance(e, N.IBin):
                visit(e.a)
                visit(e.b)
                if e.op == "/" and free_vars(e) and free_vars(e) <= sizes:
                    r = self._require(N.IBin("%", e.a, e.b), "==", N.IConst(0), "")
                    out.append(
                        replace(
                            r,
                            why=f"{cexpr(e)} is the program's exact division: {cexpr(e.a)} "
                            f"must be a multiple of {cexpr(e.b)}",
                        )
                    )

        for o in walk_ops(self.m.body):
            for e in exprs_of(o):
                visit(self._sized(e))
        return out

    def _sliced(self, plan: P.KernelPlan) -> list[P.Require]:
        """A parameter sliced by a loop's counter (``SAs[k]`` in ``for k in srange(n)``) or by
        a grid index (a host ``prange`` over ``j < n`` reading ``SBp[j, 0]`` of blocks of one
        row) along a dimension of run-time extent ``E`` reads slices 0 … n - 1: the launcher
        checks ``n <= E`` (else the kernel reads zeros past the tensor, a silently wrong
        result: gemm_fp8_blockwise's KB scale rows against its cdiv(K, 128) K blocks, its NB
        block scales of B against its cdiv(N, 128) column tiles).  A slice is a
        ``partition_by_slices`` piece or a ``partition_by_blocks`` piece one element wide; an
        index that never exceeds a loop's counter (``max(k - 1, 0)``, ``k - 1``) is checked as
        the counter (conservative: its last slice may go unread).  An index formed from sizes
        alone (``SAs[nk - 1]`` after the loop) is not checked."""
        params = {a.name for a in self.m.params}
        # a counter or a grid index -> how many values it takes
        steps: dict[N.IExpr, N.IExpr] = dict(grid_extents(self.m.body))
        for o in walk_ops(self.m.body):
            if isinstance(o, N.For) and static(o.lo) == 0:
                steps[N.IVar(o.var)] = o.hi
        out, seen = [], set()
        for o in walk_ops(self.m.body):
            for v, _, _ in views_of(o):
                if self.sym.root(v) not in params:
                    continue
                for part, d, idx in slices_of(self.sym, v):
                    # an index a counter bounds (``SAs[max(k - 1, 0)]``) counts as the counter
                    idx = next((c for c in steps if c == idx or _at_most(idx, c)), None)
                    if idx is None:
                        continue
                    extent = self.sym.shape(part.base)[d]
                    if not free_vars(self._sized(extent)) <= set(plan.sizes):
                        continue
                    r = self._require(steps[idx], "<=", extent, "")
                    if (r.lhs, r.rhs) in seen or r.lhs == r.rhs:
                        continue
                    seen.add((r.lhs, r.rhs))
                    by = "loop's step" if isinstance(idx, N.IVar) else "grid's blocks"
                    out.append(
                        replace(
                            r,
                            why=f"{self.sym.root(v)} is sliced by the {by} along dimension "
                            f"{d}: its {cexpr(self._sized(extent))} slices must cover the "
                            f"{cexpr(r.lhs)} steps",
                        )
                    )
        return out

    def _covered(self, plan: P.KernelPlan) -> list[P.Require]:
        """A written tensor's blocks partition indexed only by constants along a dimension
        (FlashAttention's O[i, 0]: one block of E columns) writes all of that dimension only
        when it fits those blocks: the launcher checks ``extent <= (largest index + 1) * block``
        (else elements would be left unwritten)."""
        params = {a.name for a in self.m.params}
        consts: dict[tuple[str, int], set[int]] = {}
        free: set[tuple[str, int]] = set()
        for o in walk_ops(self.m.body):
            for v, _, w in views_of(o):
                if not w or self.sym.root(v) not in params:
                    continue
                for piece in self.sym.chain(v):
                    part = self.sym.parts[piece.partition]
                    if part.kind != PartKind.BLOCKS:
                        continue
                    for d, i in enumerate(piece.idx):
                        key = (piece.partition, d)
                        if isinstance(i, N.IConst) and isinstance(i.value, int):
                            consts.setdefault(key, set()).add(i.value)
                        else:
                            free.add(key)
        out = []
        for (name, d), idx in consts.items():
            if (name, d) in free:
                continue
            part = self.sym.parts[name]
            extent, block = self.sym.shape(part.base)[d], part.params[d]
            if not free_vars(self._sized(extent)) <= set(plan.sizes) or not free_vars(extent):
                continue  # a static extent: the block checks (E049) cover it
            bound = N.ibin("*", N.IConst(max(idx) + 1), block)
            r = self._require(extent, "<=", bound, "")
            out.append(
                replace(
                    r,
                    why=f"{self.sym.root(part.base)} is written in block(s) {sorted(idx)} of "
                    f"{cexpr(block)} along dimension {d} only: {cexpr(self._sized(extent))} must be "
                    f"at most {cexpr(bound)}",
                )
            )
        return out

    def _flops(self, plan: P.KernelPlan) -> N.IExpr:
        """Useful floating-point operations: for each wgmma, 2.0 x (rows of A) x (columns of
        B) x K, over the global tensors its operands are loaded from (batch dimensions
        multiply); a wgmma with a shared operand no load fills (a constant table the threads
        write, such as the ones of a row sum) is not counted.  The double constant first keeps
        every product floating, as in C."""
        src = {ld.buffer: ld.map.tensor for ld in plan.loads}
        shapes = {a.name: a.shape for a in self.m.params}
        total: N.IExpr | None = None
        # a register-sourced A (a converted accumulator) has the rows of the block's other products
        rows = next(
            (_a_shape(shapes[src[mm.a_buf]], mm) for mm in plan.body if not mm.a_frag), None
        )
        seen: set = set()  # a product whose steps are peeled off the loop (a prologue) counts once
        for mm in plan.body:
            if mm.b_buf not in src or not mm.a_frag and mm.a_buf not in src:
                continue  # an operand the kernel writes itself (a table of constants): not the program's product
            b = shapes[src[mm.b_buf]]
            if mm.b_kmajor:  # B stored N x K: its K is the last dimension
                b = (*b[:-2], b[-1], b[-2])
            if not mm.a_frag:
                a = _a_shape(shapes[src[mm.a_buf]], mm)
            elif rows is not None:
                a = (*rows[:-1], b[-2])
            else:
                continue
            dims = (*a[:-2], a[-2], b[-1], a[-1])
            key = ("" if mm.a_frag else src[mm.a_buf], src[mm.b_buf], dims)
            if key in seen:
                continue
            seen.add(key)
            term: N.IExpr = N.IConst(2.0)
            for d in dims:
                term = N.IBin("*", term, self._sized(d))
            total = term if total is None else N.IBin("+", total, term)
        return N.IConst(0.0) if total is None else total

    def _access(self, name: str, writes: bool) -> bool:
        """Whether any copy or leaf reads (or writes) global tensor ``name``, by the
        leaf functions' operand rules."""
        return any(
            self.sym.root(v) == name and (w if writes else r)
            for o in walk_ops(self.m.body)
            for v, r, w in views_of(o)
        )

    def _privileges(self, name: str) -> tuple[bool, bool]:
        """(reads, writes) of a kernel parameter.  A parameter no operation touches (a program
        whose entry task declares it but never passes it on) keeps its declared privilege: the
        kernel takes it and leaves it alone."""
        reads, writes = self._reads(name), self._writes(name)
        if any(reduces(o) and self.sym.root(o.dst) == name for o in walk_ops(self.m.body)):
            reads = True  # a reduction adds into the value the tensor holds
        if not (reads or writes):
            declared_reads, writes = self.target.declared.get(name, (True, False))
            reads = not writes or declared_reads
        return reads, writes

    def _reads(self, name: str) -> bool:
        return self._access(name, writes=False)

    def _writes(self, name: str) -> bool:
        return self._access(name, writes=True)


def _a_shape(shape: tuple, mm: P.Mma) -> tuple:
    """The global shape of a wgmma's shared A operand as the product's M x K (an A stored
    K x M, read MN-major, swaps its last two dimensions)."""
    return (*shape[:-2], shape[-1], shape[-2]) if mm.a_mnmajor else shape


def _at_most(e: N.IExpr, counter: N.IExpr) -> bool:
    """Whether ``e`` is at most ``counter`` wherever the counter runs from 0: the counter itself,
    the counter minus a non-negative constant, or a ``max`` of such a term and a non-positive
    constant (``max(k - 1, 0)``), or a ``min`` with one such side."""
    if e == counter:
        return isinstance(counter, N.IVar)
    if isinstance(e, N.IBin) and e.op == "-" and isinstance(e.b, N.IConst):
        return isinstance(e.b.value, int) and e.b.value >= 0 and _at_most(e.a, counter)
    if isinstance(e, N.IBin) and e.op == "max":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, N.IConst) and isinstance(y.value, int) and y.value <= 0:
                return _at_most(x, counter)
        return False
    if isinstance(e, N.IBin) and e.op == "min":
        return _at_most(e.a, counter) or _at_most(e.b, counter)
    return False
