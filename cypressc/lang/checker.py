"""Static checks of a parsed program (Cypress paper §3.2; DESIGN §1).

:func:`check_program` collects every error of a file before raising
:class:`~cypressc.diagnostics.CypressErrors`.  The checks and their codes:

======  =====================================================================
E020    two variants share a function name
E021    a launch names a task no variant implements
E022    a launch passes the wrong number of arguments
E023    a launch argument has the wrong kind, rank or dtype
E024    variants of one task disagree on their signature or privileges' shape
E025    a privilege names something that is not a tensor parameter
E026    a name is used before it is defined, or defined twice
E027    a launch exceeds the caller's privileges
E028    an Inner variant touches tensor data (calls a leaf function)
E029    a Leaf variant launches tasks, loops or partitions
E030    a prange's writes are not provably disjoint
E031    a tunable is used as the wrong kind (int / processor / atom)
E032    an unknown or misused leaf function
E033    a leaf function writes a tensor its variant does not hold writes on
E034    a bad partition (rank of the block tuple, index count, operand)
E035    a scalar expression is ill-typed (tensor used as a number, bad dimension)
E036    an unknown instruction atom
======  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang import syntax as S
from cypressc.lang.externals import leaf_functions
from cypressc.lang.intrinsics import is_atom_name

__all__ = ["check_program", "Signature", "signature", "VariantEnv", "variant_env"]


@dataclass(frozen=True, slots=True)
class Signature:
    """A task's signature: one entry per parameter, ``int`` or ``tensor[r, dt]``."""

    params: tuple[str, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(self.params) + ")"


def signature(v: S.Variant) -> Signature:
    return Signature(tuple(str(p.type) for p in v.params))


# --------------------------------------------------------------------------- environment
@dataclass(frozen=True, slots=True)
class Binding:
    """What a name means inside one variant."""

    kind: str  # tensor | partition | scalar | float | tunable_int | tunable_processor | tunable_atom | loopvar
    type: S.TensorType | None = None  # tensors; for partitions the *piece* type
    tensor: str | None = None  # partitions: the partitioned tensor
    pkind: str | None = None  # partitions: blocks | mma | slices
    operand: str | None = None  # mma partitions: A | B | C
    index_rank: int = 0  # partitions: number of indices P[...] takes
    local: bool = False  # tensors made with make_tensor
    loc: Loc | None = None


VariantEnv = dict[str, Binding]


def _const_value(e: S.Expr) -> int | None:
    return e.value if isinstance(e, S.Const) and isinstance(e.value, int) else None


class _Checker:
    def __init__(self, prog: S.Program) -> None:
        self.prog = prog
        self.errors: list[CypressError] = []
        self.tasks = prog.tasks()
        self.leaves = leaf_functions(prog)

    def error(
        self,
        code: str,
        msg: str,
        loc: Loc,
        hint: str | None = None,
        notes: tuple[tuple[str, Loc], ...] = (),
    ) -> None:
        self.errors.append(CypressError(code, msg, loc, hint=hint, notes=notes))

    # -- program level -----------------------------------------------------------------
    def run(self) -> None:
        seen: dict[str, S.Variant] = {}
        for v in self.prog.variants:
            if v.name in seen:
                self.error(
                    "E020",
                    f"variant '{v.name}' is defined twice",
                    v.loc,
                    notes=(("first defined here", seen[v.name].loc),),
                )
            seen[v.name] = v
        for task, vs in self.tasks.items():
            first = vs[0]
            for v in vs[1:]:
                if signature(v) != signature(first):
                    self.error(
                        "E024",
                        f"variant '{v.name}' of task '{task}' has signature {signature(v)}, "
                        f"but '{first.name}' has {signature(first)}",
                        v.loc,
                        "all variants of a task share one signature; give a different computation "
                        "its own task name",
                        notes=((f"'{first.name}' declared here", first.loc),),
                    )
        for v in self.prog.variants:
            self.variant(v)

    # -- variant level -----------------------------------------------------------------
    def variant(self, v: S.Variant) -> None:
        env: VariantEnv = {}
        for p in v.params:
            env[p.name] = _param_binding(p)
        for p in v.tensor_params:
            for d in p.type.dims or ():  # type: ignore[union-attr]
                if d in env and env[d].kind != "scalar":
                    self.error("E026", f"size name '{d}' is already defined", p.loc)
                env.setdefault(d, Binding("scalar", loc=p.loc))
        tensor_names = {p.name for p in v.tensor_params}
        for priv in ("reads", "writes"):
            for n in getattr(v, priv):
                if n not in tensor_names:
                    self.error(
                        "E025",
                        f"{priv}= names '{n}', which is not a tensor parameter of '{v.name}'",
                        v.loc,
                        f"tensor parameters: {', '.join(sorted(tensor_names)) or '(none)'}",
                    )
        if v.kind == "leaf":
            for s in S.walk(v.body):
                if not isinstance(s, (S.LeafCall, S.Tunable, S.Let)):
                    what = {
                        S.Launch: "launch tasks",
                        S.Loop: "contain loops",
                        S.PartitionDecl: "partition tensors",
                        S.MakeTensor: "make tensors",
                    }
                    self.error(
                        "E029",
                        f"a Leaf variant cannot {what.get(type(s), 'do this')}",
                        s.loc,
                        "move this into an Inner variant; leaves only call leaf functions",
                    )
        self.block(v, v.body, env, loopvars=())

    def define(self, env: VariantEnv, name: str, b: Binding, loc: Loc) -> None:
        if name in env:
            prev = env[name].loc
            self.error(
                "E026",
                f"'{name}' is already defined",
                loc,
                notes=((("previously defined here", prev),) if prev else ()),
            )
            return
        env[name] = b

    def block(
        self,
        v: S.Variant,
        stmts: tuple[S.Stmt, ...],
        env: VariantEnv,
        loopvars: tuple[tuple[S.Loop, str], ...],
    ) -> None:
        for s in stmts:
            if isinstance(s, S.Tunable):
                self.define(env, s.name, Binding(f"tunable_{s.kind}", loc=s.loc), s.loc)
            elif isinstance(s, S.Let):
                self.scalar(s.value, env)
                self.define(env, s.name, Binding("scalar", loc=s.loc), s.loc)
            elif isinstance(s, S.MakeTensor):
                if len(s.dims) != s.type.rank:
                    self.error(
                        "E034",
                        f"make_tensor gives {len(s.dims)} extent(s) for a rank-"
                        f"{s.type.rank} tensor",
                        s.loc,
                    )
                for d in s.dims:
                    self.scalar(d, env)
                self.define(env, s.name, Binding("tensor", s.type, local=True, loc=s.loc), s.loc)
            elif isinstance(s, S.PartitionDecl):
                b = self.partition(s, env)
                if b is not None:
                    self.define(env, s.name, b, s.loc)
            elif isinstance(s, S.Loop):
                for e in s.extents:
                    self.scalar(e, env)
                inner = dict(env)
                for var in s.vars:
                    self.define(inner, var, Binding("loopvar", loc=s.loc), s.loc)
                lv = loopvars + tuple((s, var) for var in s.vars)
                self.block(v, s.body, inner, lv)
            elif isinstance(s, S.Launch):
                self.launch(v, s, env, loopvars)
            elif isinstance(s, S.LeafCall):
                self.leaf_call(v, s, env)

    # -- expressions -------------------------------------------------------------------
    def scalar(self, e: S.Expr, env: VariantEnv, value: bool = False) -> None:
        """Check that ``e`` is well-typed scalar index arithmetic, or, with ``value``, a
        number for a leaf's scalar operand or a ``float`` parameter (``float`` parameters
        allowed: they are never indices, E035)."""
        if isinstance(e, S.Const):
            return
        if isinstance(e, S.Name):
            b = env.get(e.id)
            if b is None:
                self.error("E026", f"'{e.id}' is not defined", e.loc)
            elif b.kind == "float" and not value:
                self.error(
                    "E035",
                    f"'{e.id}' is a float parameter, not an index",
                    e.loc,
                    "a float is a value for a leaf's scalar operand or a float parameter; "
                    "extents, indices, offsets and int parameters take ints",
                )
            elif b.kind not in ("scalar", "loopvar", "tunable_int", "float"):
                self.error(
                    "E035" if b.kind in ("tensor", "partition") else "E031",
                    f"'{e.id}' is a {b.kind.replace('_', ' ')}, not a number",
                    e.loc,
                )
        elif isinstance(e, S.BinOp):
            self.scalar(e.lhs, env, value)
            self.scalar(e.rhs, env, value)
        elif isinstance(e, S.Call):
            if len(e.args) != 2:
                self.error("E035", f"{e.fn}() takes two arguments", e.loc)
            for a in e.args:
                self.scalar(a, env, value)
        elif isinstance(e, S.Shape):
            b = env.get(e.tensor)
            if b is None:
                self.error("E026", f"'{e.tensor}' is not defined", e.loc)
            elif b.kind != "tensor":
                self.error("E035", f"'{e.tensor}' is not a tensor, it has no shape", e.loc)
            elif not 0 <= e.dim < b.type.rank:  # type: ignore[union-attr]
                self.error(
                    "E035",
                    f"'{e.tensor}' has rank {b.type.rank}; shape[{e.dim}] is out of range",  # type: ignore[union-attr]
                    e.loc,
                )
        else:
            self.error("E035", "expected a scalar expression", e.loc)

    def partition(self, s: S.PartitionDecl, env: VariantEnv) -> Binding | None:
        b = env.get(s.tensor)
        if b is None or b.kind != "tensor":
            self.error(
                "E026" if b is None else "E034",
                f"'{s.tensor}' is not {'defined' if b is None else 'a tensor'}",
                s.loc,
            )
            return None
        t = b.type
        assert t is not None
        if s.kind == "blocks":
            if len(s.args) != t.rank:
                self.error(
                    "E034",
                    f"partition_by_blocks of rank-{t.rank} '{s.tensor}' needs {t.rank} "
                    f"block extents, got {len(s.args)}",
                    s.loc,
                )
            for a in s.args:
                self.scalar(a, env)
            return Binding("partition", t, s.tensor, "blocks", index_rank=t.rank, loc=s.loc)
        if s.kind == "slices":
            dim = _const_value(s.args[0])
            if t.rank < 2 or dim is None or not 0 <= dim < t.rank:
                self.error(
                    "E034",
                    f"partition_by_slices needs a dimension of a tensor of rank >= 2 "
                    f"('{s.tensor}' has rank {t.rank})",
                    s.loc,
                )
                return None
            return Binding(
                "partition",
                S.TensorType(t.rank - 1, t.dtype),
                s.tensor,
                "slices",
                index_rank=1,
                loc=s.loc,
            )
        atom_e, proc_e, op_e = s.args
        self.atom_arg(atom_e, env)
        if isinstance(proc_e, S.Name):
            pb = env.get(proc_e.id)
            if pb is None and proc_e.id not in S.PROCESSORS:
                self.error(
                    "E026",
                    f"'{proc_e.id}' is not defined",
                    proc_e.loc,
                    f"processors: {', '.join(S.PROCESSORS)}",
                )
            elif pb is not None and pb.kind != "tunable_processor":
                self.error(
                    "E031",
                    f"'{proc_e.id}' must be a processor (tunable(processor) or WARP/THREAD)",
                    proc_e.loc,
                )
        else:
            self.error("E034", "the processor of partition_by_mma must be a name", proc_e.loc)
        op = op_e.value if isinstance(op_e, S.Str) else "C"
        if t.rank != 2 and not (t.rank == 1 and op == "C"):
            self.error(
                "E034",
                'partition_by_mma splits rank-2 tiles (and rank-1 per-row vectors as "C")',
                s.loc,
            )
        return Binding("partition", t, s.tensor, "mma", operand=op, index_rank=1, loc=s.loc)

    def atom_arg(self, e: S.Expr, env: VariantEnv) -> None:
        if isinstance(e, S.Atom):
            if not is_atom_name(e.name):
                self.error(
                    "E036",
                    f"unknown instruction atom '{e.name}'",
                    e.loc,
                    "atoms are WGMMA_64xNx16() with N a multiple of 8 from 8 to 256",
                )
        elif isinstance(e, S.Name):
            b = env.get(e.id)
            if b is None:
                self.error("E026", f"'{e.id}' is not defined", e.loc)
            elif b.kind != "tunable_atom":
                self.error(
                    "E031",
                    f"'{e.id}' is not an atom",
                    e.loc,
                    "declare it with tunable(atom) or write WGMMA_64xNx16()",
                )
        else:
            self.error("E036", "expected an instruction atom such as WGMMA_64x256x16()", e.loc)

    def tensor_arg(self, e: S.Expr, env: VariantEnv) -> tuple[S.TensorType, str] | None:
        """Type and root tensor of a tensor-valued argument (a tensor or a piece)."""
        if isinstance(e, S.Name):
            b = env.get(e.id)
            if b is None:
                self.error("E026", f"'{e.id}' is not defined", e.loc)
                return None
            if b.kind == "tensor":
                return b.type, e.id  # type: ignore[return-value]
            if b.kind == "partition":
                self.error(
                    "E023", f"'{e.id}' is a partition; pass one piece of it, e.g. {e.id}[i]", e.loc
                )
                return None
            return None
        if isinstance(e, S.Piece):
            b = env.get(e.partition)
            if b is None:
                self.error("E026", f"'{e.partition}' is not defined", e.loc)
                return None
            if b.kind != "partition":
                self.error(
                    "E034",
                    f"'{e.partition}' is not a partition and cannot be indexed",
                    e.loc,
                    "partition it first with partition_by_blocks / partition_by_mma",
                )
                return None
            if len(e.indices) != b.index_rank:
                self.error(
                    "E034",
                    f"partition '{e.partition}' takes {b.index_rank} index(es), got "
                    f"{len(e.indices)}",
                    e.loc,
                )
            for i in e.indices:
                self.scalar(i, env)
            return b.type, b.tensor  # type: ignore[return-value]
        return None

    # -- launches ----------------------------------------------------------------------
    def launch(
        self, v: S.Variant, s: S.Launch, env: VariantEnv, loopvars: tuple[tuple[S.Loop, str], ...]
    ) -> None:
        if v.kind == "leaf":
            return  # reported as E029
        vs = self.tasks.get(s.task)
        if not vs:
            self.error(
                "E021",
                f"no variant implements task '{s.task}'",
                s.loc,
                f"tasks defined: {', '.join(sorted(self.tasks))}",
            )
            return
        callee = vs[0]
        if len(s.args) != len(callee.params):
            self.error(
                "E022",
                f"task '{s.task}' takes {len(callee.params)} argument(s), {len(s.args)} given",
                s.loc,
                f"signature: {signature(callee)}",
            )
            return
        caller_reads, caller_writes = set(v.reads), set(v.writes)
        for arg, param in zip(s.args, callee.params):
            if isinstance(param.type, S.ScalarType):
                self.scalar(arg, env, value=param.type.kind == "float")
                continue
            ta = self.tensor_arg(arg, env)
            if ta is None:
                if not isinstance(arg, (S.Name, S.Piece)) or (
                    isinstance(arg, S.Name)
                    and env.get(arg.id) is not None
                    and env[arg.id].kind not in ("tensor", "partition")
                ):
                    self.error(
                        "E023",
                        f"argument for '{param.name}' of '{s.task}' must be a tensor {param.type}",
                        arg.loc,
                    )
                continue
            ty, root = ta
            if ty.rank != param.type.rank or ty.dtype != param.type.dtype:
                self.error(
                    "E023",
                    f"argument for '{param.name}' of '{s.task}' is {ty}, expected {param.type}",
                    arg.loc,
                )
            reads_it = any(param.name in c.reads for c in vs)
            writes_it = any(param.name in c.writes for c in vs)
            if env[root].local:
                pass
            else:
                if writes_it and root not in caller_writes:
                    self.error(
                        "E027",
                        f"'{s.task}' writes its parameter '{param.name}', but '{v.name}' holds no "
                        f"write privilege on '{root}'",
                        arg.loc,
                        f"add \"{root}\" to writes= of '{v.name}' or pass a tensor it may write",
                    )
                elif reads_it and root not in caller_reads | caller_writes:
                    self.error(
                        "E027",
                        f"'{s.task}' reads its parameter '{param.name}', but '{v.name}' holds no "
                        f"privilege on '{root}'",
                        arg.loc,
                        f"add \"{root}\" to reads= of '{v.name}'",
                    )
            if writes_it:
                self.disjoint(s, arg, env, loopvars, param.name)

    def disjoint(
        self,
        s: S.Launch,
        arg: S.Expr,
        env: VariantEnv,
        loopvars: tuple[tuple[S.Loop, str], ...],
        pname: str,
    ) -> None:
        """Writes inside a prange must go to distinct pieces for distinct iterations."""
        pvars = [var for loop, var in loopvars if loop.kind == "prange"]
        if not pvars:
            return
        hint = (
            "index a partition of the written tensor with every prange variable, "
            "e.g. Cp[i, j], so each iteration writes its own piece"
        )
        if not isinstance(arg, S.Piece):
            self.error(
                "E030", f"every iteration of the prange writes all of '{pname}'", arg.loc, hint
            )
            return
        b = env[arg.partition]
        if b.pkind == "mma" and b.operand != "C":
            self.error(
                "E030",
                f"pieces of an mma partition for operand {b.operand} overlap; they "
                f"cannot be written in a prange",
                arg.loc,
                'only the "C" operand partition splits a tile into disjoint pieces',
            )
            return
        plain = {i.id for i in arg.indices if isinstance(i, S.Name)}
        missing = [var for var in pvars if var not in plain]
        if missing:
            self.error(
                "E030",
                f"writes to '{arg.partition}' are not provably disjoint: prange "
                f"variable(s) {', '.join(missing)} do not index the piece",
                arg.loc,
                hint,
            )

    # -- leaves ------------------------------------------------------------------------
    def leaf_call(self, v: S.Variant, s: S.LeafCall, env: VariantEnv) -> None:
        if v.kind == "inner":
            self.error(
                "E028",
                f"Inner variant '{v.name}' calls leaf function '{s.fn}'",
                s.loc,
                "inner variants only partition and launch; put computation in a Leaf variant",
            )
            return
        fn = self.leaves.get(s.fn)
        if fn is None:
            self.error(
                "E032",
                f"unknown leaf function '{s.fn}'",
                s.loc,
                f"leaf functions: {', '.join(sorted(self.leaves))}",
            )
            return
        if len(s.args) != len(fn.operands):
            self.error(
                "E032",
                f"{s.fn}() takes {len(fn.operands)} argument(s), {len(s.args)} given",
                s.loc,
                f"{s.fn}({', '.join(r.name for r in fn.operands)})",
            )
            return
        for arg, rule in zip(s.args, fn.operands):
            if rule.kind == "atom":
                self.atom_arg(arg, env)
            elif rule.kind == "scalar":
                self.scalar(arg, env, value=True)
            else:
                ta = self.tensor_arg(arg, env)
                if ta is None:
                    if not (isinstance(arg, S.Name) and arg.id not in env):
                        self.error(
                            "E032", f"argument '{rule.name}' of {s.fn}() must be a tensor", arg.loc
                        )
                    continue
                ty, root = ta
                if rule.dtypes and ty.dtype not in rule.dtypes:
                    self.error(
                        "E032",
                        f"'{rule.name}' of {s.fn}() must be "
                        f"{' or '.join(rule.dtypes)}, got {ty.dtype}",
                        arg.loc,
                    )
                if rule.rank and ty.rank != rule.rank:
                    self.error(
                        "E032",
                        f"'{rule.name}' of {s.fn}() must have rank {rule.rank}, got {ty.rank}",
                        arg.loc,
                    )
                if rule.writes and root not in v.writes:
                    self.error(
                        "E033",
                        f"{s.fn}() writes '{rule.name}', but '{v.name}' does not hold "
                        f"writes on '{root}'",
                        arg.loc,
                        f'add "{root}" to writes=',
                    )
                elif rule.reads and root not in set(v.reads) | set(v.writes):
                    self.error(
                        "E033",
                        f"{s.fn}() reads '{rule.name}', but '{v.name}' does not hold "
                        f"reads on '{root}'",
                        arg.loc,
                        f'add "{root}" to reads=',
                    )


def _param_binding(p: S.Param) -> Binding:
    if isinstance(p.type, S.TensorType):
        return Binding("tensor", p.type, loc=p.loc)
    return Binding("float" if p.type.kind == "float" else "scalar", loc=p.loc)


def variant_env(v: S.Variant) -> VariantEnv:
    """The name bindings of a checked variant's top-level body (used by later stages)."""
    c = _Checker(S.Program(v.loc.file, (), (v,)))
    env: VariantEnv = {}
    for p in v.params:
        env[p.name] = _param_binding(p)
    c.block(v, v.body, env, ())
    return env


def check_program(prog: S.Program) -> S.Program:
    """Run every static check on ``prog``; raise :class:`CypressErrors` listing all errors.

    Returns ``prog`` unchanged when it is well formed.
    """
    c = _Checker(prog)
    c.run()
    if c.errors:
        raise CypressErrors(c.errors)
    return prog
