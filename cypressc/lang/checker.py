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
E037    the file's name cannot name a kernel (not a C identifier, a C++ keyword, ``main``)
E038    a parameter in ``reduces=`` and also in ``writes=`` or ``reads=``
======  =====================================================================
"""

from __future__ import annotations

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang import syntax as S
from cypressc.lang.syntax import CXX_KEYWORDS
from cypressc.lang.check_calls import CallChecks
from cypressc.lang.check_env import Binding, VariantEnv, _param_binding, signature
from cypressc.lang.check_exprs import ExprChecks
from cypressc.lang.externals import leaf_functions

__all__ = ["check_program", "variant_env"]


class _Checker(ExprChecks, CallChecks):
    """The checks of one program, every error collected (:meth:`run`).  Expressions and
    partitions, launches and leaf calls are its parts in :mod:`cypressc.lang.check_exprs`
    and :mod:`cypressc.lang.check_calls`."""

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
    def kernel_name(self) -> None:
        """E037: the kernel is named after the file, and that name becomes C symbols and file
        names (``<name>.cu``, ``<name>_launch``, ``lib<name>.so``) beside the harness's fixed
        ``main.cu`` / ``main.h``: a file name no C compiler takes, or one that would replace the
        harness, is refused before anything is generated."""
        name = self.prog.kernel_name
        if not (name.isascii() and name.isidentifier()):
            why = "is not a C identifier"
        elif name in CXX_KEYWORDS:
            why = "is a C++ keyword"
        elif name == "main":
            why = "is the host harness's (main.cu, main.h and C's main function)"
        else:
            return
        self.error(
            "E037",
            f"the kernel takes its name from the file, and '{name}' {why}",
            Loc(self.prog.path),
            "rename the .cyp file: a C identifier (letters, digits, '_'; no digit first), e.g. my_kernel.cyp",
        )

    def run(self) -> None:
        self.kernel_name()
        seen: dict[str, S.Variant] = {}
        for v in self.prog.variants:
            if v.name in seen:
                first, again, note, hint = seen[v.name], v, "first defined here", None
                if first.loc.file == self.prog.path and again.loc.file != self.prog.path:
                    # an import after the program's own variant: the error is the program's
                    first, again, note = again, first, "imported from here"
                if first.loc.file != again.loc.file:
                    hint = (
                        f"import the task without defining '{v.name}', or drop the task from "
                        "the import to use your own variants (an import brings all of a task's)"
                    )
                self.error(
                    "E020",
                    f"variant '{v.name}' is defined twice",
                    again.loc,
                    hint,
                    notes=((note, first.loc),),
                )
                continue
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
        for priv in ("reads", "writes", "reduces"):
            for n in getattr(v, priv):
                if n not in tensor_names:
                    self.error(
                        "E025",
                        f"{priv}= names '{n}', which is not a tensor parameter of '{v.name}'",
                        v.loc,
                        f"tensor parameters: {', '.join(sorted(tensor_names)) or '(none)'}",
                    )
        for n in v.reduces:
            both = [priv for priv in ("writes", "reads") if n in getattr(v, priv)]
            if both:
                self.error(
                    "E038",
                    f"'{v.name}' holds reduces= and {both[0]}= on '{n}'",
                    v.loc,
                    f"keep '{n}' in one of them: reduces= (the task only adds into it, so "
                    f"launches adding into one piece commute) or {both[0]}=",
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
