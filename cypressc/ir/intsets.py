"""Exact answers to "can these two tile indices ever be equal?" over the loop ranges and
sizes a module gives (Cypress paper §4.2.1: dependences between tasks are decided by
whether their sub-tensors can alias).  The dependence analysis drops an event edge only
when this module *proves* two accesses apart; anything else keeps the edge.

Each question is one SMT query to Z3 (``z3-solver``, the solver Exo uses for the same
job): is there an integer assignment of the free variables that satisfies

* every loop variable ``v`` within its loop, ``lo <= v < hi`` (bounds are themselves
  index expressions over sizes, outer loop variables and Lets),
* every run-time size between 0 and ``INT32_MAX`` (what the launcher accepts),
* the definition of every Let the expressions use (substituted),
* a shifted variable (a pipelined loop's iteration ``k + d``) inside its loop too,

and makes every pair of indices equal?  ``//``, ``%``, ``cdiv``, ``min`` and ``max`` are
encoded exactly with Python's floor semantics (a fresh quotient ``q`` with
``b*q <= a < b*q + b`` for ``b > 0``, the mirror for ``b < 0``); products of variables are
left to Z3's non-linear arithmetic.  *unsat* is the only answer that means "apart";
*sat*, *unknown*, a timeout (:data:`TIMEOUT_MS`), or an expression the encoding does not
cover (a float, a kernel condition) all mean "may meet".  A processor index is an
unconstrained non-negative integer: one value on both sides for BLOCK (both accesses run
in one block; edges across blocks are the grid's), one per side below it.

Why Z3 rather than isl: index expressions multiply run-time sizes by loop variables
(``k * K``) and guard trip counts by ``min(N, q0 + U + (1 - causal) * N)``, which are not
quasi-affine; isl would have to refuse them, Z3 decides most of them and answers
*unknown* (kept as an edge) for the rest.

Variables bound by a loop that only one side runs in (an access before a loop and one in
it, or two different loops) are renamed apart: the same name on the two sides is then two
independent values, each within its own loop's range.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import z3

from cypressc.ir import nodes as N
from cypressc.lang.kinds import Proc

__all__ = [
    "IndexSpace",
    "AtLeast",
    "may_meet",
    "may_be_empty",
    "blocks_may_share",
    "always_increases",
    "stays_inside",
    "Unsupported",
    "TIMEOUT_MS",
    "INT32_MAX",
    "stats",
]

TIMEOUT_MS = 2000  # per query; a timeout answers "may meet"
# per order proof (:func:`blocks_may_share`, :func:`always_increases`, :func:`stays_inside`):
# Z3's resource limit, not a wall-clock one, so that a loaded machine gets the same answer.  The
# attention backward's proofs take at most 1.1e6 (about half a second); "unknown" at the limit
# refuses the knob
ORDER_RLIMIT = 50_000_000
INT32_MAX = 2**31 - 1

# queries asked / answered from the cache / answered apart / unknown (for tests and --timings)
stats = {"queries": 0, "cached": 0, "apart": 0, "unknown": 0}
_ANSWERS: dict[
    str, dict
] = {}  # the answers of each set of constraints (IndexSpace._cache), oldest first
_lock = threading.Lock()
# Z3's default context is not thread-safe (the tuner compiles candidates on threads): every
# term and solver of this module is made and used under this lock
_z3_lock = threading.RLock()


@dataclass(frozen=True)
class AtLeast:
    """A shift of any distance ``>= n`` (some later iteration, however far)."""

    n: int


class Unsupported(Exception):
    """An expression the encoding does not cover: the caller answers "may meet"."""


@dataclass(frozen=True)
class IndexSpace:
    """The integer constraints a module puts on its index variables.

    ``loops``: loop variable -> ``(lo, hi)`` (``lo <= v < hi``); ``lets``: Let name -> value;
    ``sizes``: run-time sizes (``0 <= s <= INT32_MAX``).  Any other variable is an
    unconstrained integer.  :class:`cypressc.ir.hazards.Program` builds one from its walk of
    a module; tests build one by hand."""

    loops: Mapping[str, tuple[N.IExpr, N.IExpr]] = field(default_factory=dict)
    lets: Mapping[str, N.IExpr] = field(default_factory=dict)
    sizes: frozenset[str] = frozenset()
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # answers depend only on the constraints: spaces with equal ones share them (a module
        # and its variants with a sync op more or less, as the verifier sees them in turn)
        # repr, not ==: IConst(1) == IConst(1.0) == IConst(True), which encode differently
        content = repr((sorted(self.loops.items()), sorted(self.lets.items()), sorted(self.sizes)))
        with _lock:
            shared = _ANSWERS.setdefault(content, self._cache)
            while len(_ANSWERS) > 256:
                _ANSWERS.pop(next(iter(_ANSWERS)))
        object.__setattr__(self, "_cache", shared)


class _Encoder:
    """Index expressions of one side of a query as Z3 terms, collecting the constraints
    (loop ranges, size bounds, division definitions) the terms rely on."""

    def __init__(
        self,
        space: IndexSpace,
        facts: list,
        side: str,
        private: frozenset[str],
        shift: Mapping[str, int],
        shared: dict,
        blocks_apart: bool = False,
        named: bool = False,
        ctx: z3.Context | None = None,
    ) -> None:
        self.space, self.facts, self.side = space, facts, side
        self.private, self.shift, self.shared = private, shift, shared
        self.blocks_apart = blocks_apart
        self.memo: dict = {}
        # ``named``: a Let is a variable of its own, equal to its value, and `a // b` and
        # `a % b` share one quotient.  Z3's non-linear arithmetic reasons about `n` far better
        # than about every copy of `nq - causal * q`, and need not rediscover that two
        # quotients are one (the order proofs below are "unknown" without both).  Only the
        # order proofs use it, so the edges the hazard queries keep do not move.
        self.named = named
        self.ctx = ctx  # None: Z3's main context
        self.quotients: dict = shared.setdefault("//", {}) if named else {}

    def var(self, name: str):
        sp = self.space
        if name in sp.lets and not self.named:
            return self.enc(sp.lets[name])
        if name in sp.lets:
            key = f"{name}={self.side}"
            if key not in self.shared:
                self.shared[key] = z3.Int(key, self.ctx)
                self.facts.append(self.shared[key] == self.enc(sp.lets[name]))
            return self.shared[key]
        private = name in self.private
        key = f"{name}@{self.side}" if private else name
        if key not in self.shared:
            v = z3.Int(key, self.ctx)
            self.shared[key] = v
            if name in sp.loops:
                lo, hi = sp.loops[name]
                # the bounds are read on the side the variable is bound on: an inner loop's
                # bounds may use outer variables, private or not
                self.facts += [self.enc(lo) <= v, v < self.enc(hi)]
            elif name in sp.sizes:
                self.facts += [v >= 0, v <= INT32_MAX]
        v = self.shared[key]
        d = self.shift.get(name, 0)
        if d:
            lo, hi = sp.loops[name]
            if isinstance(d, AtLeast):
                dist = self.shared.setdefault(f"{name}+", z3.Int(f"{name}+", self.ctx))
                self.facts.append(dist >= d.n)
                d = dist
            shifted = v + d
            self.facts += [self.enc(lo) <= shifted, shifted < self.enc(hi)]
            return shifted
        return v

    def enc(self, e: N.IExpr):
        key = e
        if key in self.memo:
            return self.memo[key]
        out = self._enc(e)
        self.memo[key] = out
        return out

    def _div(self, a, b):
        """Floor quotient ``a // b`` (Python's) as a fresh variable with its definition (one
        per pair of terms)."""
        key = (a.get_id(), b.get_id())
        if key in self.quotients:
            return self.quotients[key]
        q = z3.FreshInt("q", self.ctx)
        if self.named:  # the hazard queries keep one quotient per occurrence, as before
            self.quotients[key] = q
        if z3.is_int_value(b):
            c = b.as_long()
            if c == 0:
                raise Unsupported("division by zero")
            self.facts += [c * q <= a, a < c * q + c] if c > 0 else [c * q >= a, a > c * q + c]
        else:
            self.facts += [
                b != 0,
                z3.Implies(b > 0, z3.And(b * q <= a, a < b * q + b)),
                z3.Implies(b < 0, z3.And(b * q >= a, a > b * q + b)),
            ]
        return q

    def _enc(self, e: N.IExpr):
        if isinstance(e, N.IConst):
            if not isinstance(e.value, int) or isinstance(e.value, bool):
                raise Unsupported(f"non-integer constant {e.value!r}")
            return z3.IntVal(e.value, self.ctx)
        if isinstance(e, N.IVar):
            return self.var(e.name)
        if isinstance(e, N.IProc):
            # one block: both sides run in it (edges across blocks are the grid's); below
            # BLOCK, the two sides may be different instances
            own = e.proc != Proc.BLOCK or self.blocks_apart
            key = f"{e.proc}.{e.dim}" + (f"@{self.side}" if own else "")
            if key not in self.shared:
                self.shared[key] = z3.Int(key, self.ctx)
                self.facts.append(self.shared[key] >= 0)
            return self.shared[key]
        if not isinstance(e, N.IBin):
            raise Unsupported(type(e).__name__)
        a, b = self.enc(e.a), self.enc(e.b)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op == "min":
            return z3.If(a <= b, a, b)
        if e.op == "max":
            return z3.If(a >= b, a, b)
        if e.op == "//":
            return self._div(a, b)
        if e.op == "%":
            return a - b * self._div(a, b)
        if e.op == "cdiv":
            return -self._div(-a, b)
        if e.op == "/":  # on integers the IR's `/` floors, like `//` (ir.interp)
            return self._div(a, b)
        raise Unsupported(f"operator {e.op!r}")


def may_meet(
    pairs: Iterable[tuple[N.IExpr, N.IExpr]],
    space: IndexSpace,
    *,
    private: Iterable[str] = (),
    shift: Mapping[str, int | AtLeast] | None = None,
) -> bool:
    """Whether some execution makes ``a == b`` for every ``(a, b)`` in ``pairs`` at once.

    ``space`` gives the loop ranges, Lets and sizes.  Loop variables in ``private`` are
    bound separately on the two sides (each side its own iteration); the others are one
    value.  ``shift`` maps a loop variable to ``d``: on the ``b`` side the variable stands
    for ``v + d`` (iteration ``d`` later, also inside the loop); ``AtLeast(n)``: any
    ``d >= n``.  False only when Z3
    proves the conjunction unsatisfiable; True on *sat*, *unknown*, a timeout or an
    expression it cannot encode.  Raises nothing."""
    pairs = tuple(pairs)
    shift = {k: v for k, v in (shift or {}).items() if v}
    if not pairs:
        return True
    if all(a == b for a, b in pairs) and not shift:
        return True
    if all(isinstance(a, N.IConst) and isinstance(b, N.IConst) for a, b in pairs):
        return all(a.value == b.value for a, b in pairs)
    private = frozenset(private) & frozenset(space.loops)
    # the whole private set in the key: a private loop variable can enter through another's
    # bounds (k in [m, m + 1)), not only through the pairs
    key = (pairs, private, tuple(sorted(shift.items(), key=repr)))
    with _lock:
        stats["queries"] += 1
        if key in space._cache:
            stats["cached"] += 1
            return space._cache[key]
    with _z3_lock:
        result = _decide(pairs, space, private, shift)
    with _lock:
        space._cache[key] = result
        stats["apart"] += not result
    return result


def _decide(
    pairs: Sequence[tuple[N.IExpr, N.IExpr]],
    space: IndexSpace,
    private: frozenset[str],
    shift: Mapping[str, int],
) -> bool:
    facts: list = []
    shared: dict = {}
    ea = _Encoder(space, facts, "a", private, {}, shared)
    eb = _Encoder(space, facts, "b", private, shift, shared)
    try:
        eqs = [ea.enc(a) == eb.enc(b) for a, b in pairs]
    except (Unsupported, z3.Z3Exception, RecursionError):
        return True
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    s.add(*facts, *eqs)
    try:
        r = s.check()
    except z3.Z3Exception:
        return True
    if r == z3.unknown:
        with _lock:
            stats["unknown"] += 1
    return r != z3.unsat


def may_be_empty(lo: N.IExpr, hi: N.IExpr, space: IndexSpace) -> bool:
    """Whether a loop ``[lo, hi)`` may run no iteration (``lo >= hi`` satisfiable over
    ``space``).  False only when Z3 proves it always runs; raises nothing."""
    key = ("empty", lo, hi)
    if key in space._cache:
        return space._cache[key]
    with _z3_lock:
        r = _empty(lo, hi, space)
    space._cache[key] = r
    return r


def _empty(lo: N.IExpr, hi: N.IExpr, space: IndexSpace) -> bool:
    facts: list = []
    enc = _Encoder(space, facts, "a", frozenset(), {}, {})
    try:
        cond = enc.enc(lo) >= enc.enc(hi)
    except (Unsupported, z3.Z3Exception, RecursionError):
        return True
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    s.add(*facts, cond)
    try:
        return s.check() != z3.unsat
    except z3.Z3Exception:
        return True


def blocks_may_share(
    index: Sequence[N.IExpr], space: IndexSpace, grid: Sequence[N.IExpr], free: int
) -> bool:
    """Whether two blocks of a grid that differ in some dimension other than ``free`` may
    reach the same value of ``index`` (a tuple of index expressions over the block's
    ``block_id`` dims, loop variables and sizes), each in an iteration of its own.

    ``grid``: the grid's extent per dimension (``block_id`` dim d ranges over
    ``[0, grid[d])``).  False only when Z3 proves it impossible; raises nothing.  Used by
    :mod:`cypressc.passes.reduction_order`: the blocks that add into one tile differ only
    along ``free``, so ordering them along it orders every tile's sum."""
    with _z3_lock:
        facts: list = []
        shared: dict = {}
        private = frozenset(space.loops)
        ctx = z3.Context()  # a fresh one: how long Z3 takes must not depend on earlier queries
        ea = _Encoder(space, facts, "a", private, {}, shared, True, True, ctx)
        eb = _Encoder(space, facts, "b", private, {}, shared, True, True, ctx)
        try:
            eqs = [ea.enc(x) == eb.enc(x) for x in index]
            ids = list(zip(_in_grid(ea, grid), _in_grid(eb, grid)))
        except (Unsupported, z3.Z3Exception, RecursionError):
            return True
        # one query per dimension, and `<` for `!=`: the two sides are the same expressions,
        # so a pair of blocks apart in dimension d is, one way round, a pair with a's index
        # below b's.  Z3 answers these in well under a second where the disjunction of `!=`
        # over the dimensions takes it from one second to past any timeout, depending on
        # its search (measured on the attention backward's dQ tile)
        return any(
            _sat(facts + eqs + [pa < pb], ctx) for d, (pa, pb) in enumerate(ids) if d != free
        )


def always_increases(index: Sequence[N.IExpr], var: str, space: IndexSpace) -> bool:
    """Whether ``index`` (a tuple of index expressions) is lexicographically greater at
    iteration ``var + 1`` than at ``var`` whenever both are iterations of ``var``'s loop
    (``space.loops[var]``): the tiles one block visits, in the order it visits them.  True only
    when Z3 proves it; raises nothing."""
    if var not in space.loops:
        return False
    with _z3_lock:
        facts: list = []
        shared: dict = {}
        ctx = z3.Context()
        ea = _Encoder(space, facts, "a", frozenset(), {}, shared, named=True, ctx=ctx)
        eb = _Encoder(space, facts, "b", frozenset(), {var: 1}, shared, named=True, ctx=ctx)
        try:
            xs, ys = [ea.enc(x) for x in index], [eb.enc(x) for x in index]
        except (Unsupported, z3.Z3Exception, RecursionError):
            return False
        later = z3.BoolVal(False, ctx)
        for x, y in reversed(list(zip(xs, ys))):  # y > x lexicographically, outermost first
            later = z3.Or(y > x, z3.And(y == x, later))
        return not _sat(facts + [z3.Not(later)], ctx)


def stays_inside(
    index: Sequence[N.IExpr],
    extents: Sequence[N.IExpr],
    space: IndexSpace,
    grid: Sequence[N.IExpr],
) -> bool:
    """Whether every coordinate of ``index`` but the first stays within ``[0, extent)`` of its
    dimension (``extents``, one per coordinate) whenever that extent is positive, in every
    iteration of every block of ``grid`` (``block_id`` dim d in ``[0, grid[d])``).  Then the
    row-major offset of ``index`` orders tiles as ``index`` does lexicographically (what
    :func:`always_increases` proves).  True only when Z3 proves it; raises nothing."""
    with _z3_lock:
        ctx = z3.Context()
        facts: list = []
        enc = _Encoder(space, facts, "a", frozenset(), {}, {}, named=True, ctx=ctx)
        try:
            xs = [enc.enc(x) for x in index]
            ns = [enc.enc(n) for n in extents]
            _in_grid(enc, grid)
        except (Unsupported, z3.Z3Exception, RecursionError):
            return False
        return not any(
            _sat(facts + [n >= 1, z3.Or(x < 0, x >= n)], ctx) for x, n in zip(xs[1:], ns[1:])
        )


def _in_grid(enc: _Encoder, grid: Sequence[N.IExpr]) -> list:
    """The ``block_id`` of each grid dimension on ``enc``'s side, each bounded by its extent
    (facts added to ``enc``'s list)."""
    ids = [enc.enc(N.IProc(Proc.BLOCK, d)) for d in range(len(grid))]
    enc.facts += [i < enc.enc(ext) for i, ext in zip(ids, grid)]
    return ids


def _sat(constraints: list, ctx: z3.Context) -> bool:
    """Whether ``constraints`` (terms of ``ctx``) may hold: False only on *unsat*, within
    :data:`ORDER_RLIMIT`."""
    s = z3.Solver(ctx=ctx)
    s.set("rlimit", ORDER_RLIMIT)
    s.add(*constraints)
    try:
        return s.check() != z3.unsat
    except z3.Z3Exception:
        return True
