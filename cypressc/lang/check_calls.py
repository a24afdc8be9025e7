"""The static checks of launches and leaf calls (Cypress paper §3.2; DESIGN §1): a launch
names a task (E021) with the right number (E022) and kinds (E023) of arguments, within the
caller's privileges (E027: a callee's ``reduces=`` needs the caller's ``writes=`` or
``reduces=`` on the root), and a ``prange``'s writes provably disjoint (E030; reductions
into one piece commute, so ``reduces=`` arguments are exempt); a leaf call
names a known leaf function used as it takes its operands (E032), writing only what its
variant may write (E033).

:class:`CallChecks` is a part of :class:`cypressc.lang.checker._Checker` (it calls its
``error``, ``scalar``, ``atom_arg`` and ``tensor_arg`` and reads its ``tasks`` and
``leaves``).
"""

from __future__ import annotations

from cypressc.abi.dtypes import DTYPES
from cypressc.lang import syntax as S
from cypressc.lang.check_env import VariantEnv, signature
from cypressc.lang.kinds import OperandKind, PartKind

__all__ = ["CallChecks"]


class CallChecks:
    """Launches and leaf calls (a part of :class:`cypressc.lang.checker._Checker`)."""

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
        # a task holding reduces= on a tensor owns a private copy of it: its callees may
        # read, write and reduce into that copy
        caller_reads, caller_writes = set(v.reads), set(v.writes) | set(v.reduces)
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
            reduces_it = not writes_it and any(param.name in c.reduces for c in vs)
            if env[root].local:
                pass
            else:
                if reduces_it and root not in caller_writes:
                    self.error(
                        "E027",
                        f"'{s.task}' reduces into its parameter '{param.name}', but '{v.name}' "
                        f"holds no write or reduce privilege on '{root}'",
                        arg.loc,
                        f"add \"{root}\" to reduces= (or writes=) of '{v.name}'",
                    )
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
            if writes_it:  # reductions into one piece commute: no disjointness needed
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
        if b.pkind == PartKind.MMA and b.operand != "C":
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
            if rule.kind == OperandKind.ATOM:
                self.atom_arg(arg, env)
            elif rule.kind == OperandKind.SCALAR:
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
                        rule.dtype_hint
                        if ty.dtype in DTYPES and DTYPES[ty.dtype].itemsize == 1
                        else None,
                    )
                elif rule.same_dtype:
                    self._same_dtype(s, fn, rule, ty.dtype, arg.loc, env)
                if rule.rank and ty.rank != rule.rank:
                    self.error(
                        "E032",
                        f"'{rule.name}' of {s.fn}() must have rank {rule.rank}, got {ty.rank}",
                        arg.loc,
                    )
                # what a variant reduces into is its own private copy, as a local tensor
                if rule.writes and root not in set(v.writes) | set(v.reduces):
                    self.error(
                        "E033",
                        f"{s.fn}() writes '{rule.name}', but '{v.name}' does not hold "
                        f"writes on '{root}'",
                        arg.loc,
                        f'add "{root}" to writes=',
                    )
                elif rule.reads and root not in set(v.reads) | set(v.writes) | set(v.reduces):
                    self.error(
                        "E033",
                        f"{s.fn}() reads '{rule.name}', but '{v.name}' does not hold "
                        f"reads on '{root}'",
                        arg.loc,
                        f'add "{root}" to reads=',
                    )

    def _same_dtype(self, s: S.LeafCall, fn, rule, dtype: str, loc, env: VariantEnv) -> None:
        """E032 when operand ``rule`` (of ``dtype``) and the one it names in ``same_dtype``
        differ in element type: cypressc's wgmma multiplies f16 by f16, bf16 by bf16, e4m3 by
        e4m3 or e5m2 by e5m2 (PTX ISA §9.7.15.5 also mixes e4m3 with e5m2; not yet here)."""
        names = [r.name for r in fn.operands]
        other = self.tensor_arg(s.args[names.index(rule.same_dtype)], env)
        if other is None or other[0].dtype not in DTYPES or dtype not in DTYPES:
            return
        if dtype != other[0].dtype:
            self.error(
                "E032",
                f"'{rule.name}' of {s.fn}() is {dtype} but '{rule.same_dtype}' is "
                f"{other[0].dtype}: a wgmma's operands have one element type",
                loc,
            )
