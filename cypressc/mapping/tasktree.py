"""Task-tree instantiation and mapping/program cross-validation (paper §3.3; DESIGN §3).

Starting from the mapping's entrypoint, every ``launch`` of every instantiated variant
is resolved through the instance's ``calls`` to exactly one instance, whose variant
implements the launched task.  The result is the static tree of
(instance, variant, proc, mems, tunables) that every compiler pass walks.

Errors (all located in the YAML file, codes M010–M023) cover unknown machines and
variants, ``mems`` count and visibility, tunable binding and kinds (an int or processor
tunable must be bound; an atom tunable left unbound is derived later, see
:class:`TaskNode`), launch
resolution, processor nesting, recursion and NONE tensors of leaves (M023).  Unreachable instances are warnings
(W001), and so are BLOCK knobs that no compiler pass will read (W002, :func:`unused_knobs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.diagnostics import CypressError, CypressErrors, Warning_
from cypressc.lang import syntax as S
from cypressc.lang.externals import leaf_functions
from cypressc.lang.atoms import ATOM_FORMS, AUTO_ATOM, AutoAtom, is_atom_name
from cypressc.lang.kinds import Mem, Proc
from cypressc.mapping.loader import LoadedMapping
from cypressc.mapping.machine import Machine, load_machine, machine_names
from cypressc.mapping.schema import Instance
from cypressc.mapping.templates import expand

__all__ = ["TaskNode", "TaskTree", "instantiate", "unused_knobs"]

BLOCK_KNOBS = (
    "warpspecialize",
    "pipeline",
    "mma_in_flight",
    "smem_limit",
    "producer_registers",
    "consumer_registers",
    "raster",
    "persistent",
    "pingpong",
    "deterministic",
    "cluster",
)


@dataclass(eq=False)
class TaskNode:
    """One instantiated task: the instance, its variant, processor, a memory per tensor
    parameter (by parameter name), bound tunables, and a child per launch statement.

    Every tunable the variant declares has a value: the mapping's, or, for a
    ``tunable(atom)`` the instance does not bind, :data:`~cypressc.lang.atoms.AUTO_ATOM`
    (derived by dependence analysis: the calling instance's atom of the same name, else the
    first ``"C"`` tile's width; docs/language.md §5.2)."""

    instance: Instance
    variant: S.Variant
    proc: Proc
    mems: dict[str, Mem]
    # a processor tunable's value is a Proc; an atom tunable the mapping leaves unbound is
    # AUTO_ATOM, which dependence analysis derives from the tile (or the caller's atom)
    tunables: dict[str, int | str | AutoAtom]
    children: list[tuple[S.Launch, "TaskNode"]] = field(default_factory=list)

    def child(self, launch: S.Launch) -> "TaskNode":
        """The node a launch statement of this variant dispatches to (by identity)."""
        for stmt, node in self.children:
            if stmt is launch:
                return node
        raise KeyError(f"launch of '{launch.task}' was not instantiated")

    def walk(self):
        """This node and every descendant, pre-order."""
        yield self
        for _, c in self.children:
            yield from c.walk()

    def kernel_blocks(self) -> list["TaskNode"]:
        """The outermost BLOCK instances at or below this node, pre-order: the block program of
        each kernel it launches (a program of several kernels has one per kernel)."""
        if self.proc == Proc.BLOCK:
            return [self]
        return [b for _, c in self.children for b in c.kernel_blocks()]


@dataclass
class TaskTree:
    """The instantiated tree, the machine, and any warnings found on the way."""

    root: TaskNode
    machine: Machine
    program: S.Program
    mapping: LoadedMapping
    warnings: list[Warning_]

    def block_node(self) -> TaskNode | None:
        """The outermost BLOCK-level instance (the kernel's body), if any."""
        return next(iter(self.root.kernel_blocks()), None)


class _Instantiator:
    def __init__(self, prog: S.Program, lm: LoadedMapping) -> None:
        self.prog, self.lm, self.spec = prog, lm, lm.spec
        self.leaves = leaf_functions(prog)
        self.errors: list[CypressError] = []
        self.by_name: dict[str, tuple[int, Instance]] = {}
        self.reached: set[str] = set()

    def err(
        self,
        code: str,
        msg: str,
        inst: str | None,
        *key: str | int,
        hint: str | None = None,
        notes: tuple = (),
    ) -> None:
        loc = self.lm.instance_loc(inst, *key) if inst else self.lm.loc(*key)
        self.errors.append(CypressError(code, msg, loc, hint=hint, notes=notes))

    def run(self) -> tuple[TaskNode | None, Machine | None]:
        try:
            machine = load_machine(self.spec.machine)
        except KeyError:
            self.err(
                "M010",
                f"unknown machine '{self.spec.machine}'",
                None,
                "machine",
                hint=f"machines: {', '.join(machine_names())}",
            )
            return None, None
        self.machine = machine
        for i, inst in enumerate(self.spec.instances):
            if inst.instance in self.by_name:
                first = self.lm.loc("instances", self.by_name[inst.instance][0], "instance")
                self.err(
                    "M012",
                    f"instance '{inst.instance}' is defined twice",
                    None,
                    "instances",
                    i,
                    "instance",
                    notes=(("first defined here", first),),
                )
            else:
                self.by_name[inst.instance] = (i, inst)
        for inst in self.spec.instances:
            self.check_instance(inst)
        if self.spec.entrypoint not in self.by_name:
            self.err(
                "M011",
                f"entrypoint '{self.spec.entrypoint}' is not an instance",
                None,
                "entrypoint",
                hint=f"instances: {', '.join(self.by_name)}",
            )
            return None, machine
        root_inst = self.by_name[self.spec.entrypoint][1]
        if root_inst.proc != machine.processors[0].name:
            self.err(
                "M011",
                f"the entrypoint must run on {machine.processors[0].name}, "
                f"'{root_inst.instance}' runs on {root_inst.proc}",
                root_inst.instance,
                "proc",
            )
        if self.errors:
            return None, machine
        root = self.node(root_inst, stack=())
        return root, machine

    def check_instance(self, inst: Instance) -> None:
        name = inst.instance
        v = self.prog.variant(inst.variant)
        if v is None:
            self.err(
                "M013",
                f"no variant '{inst.variant}' in {self.prog.path}",
                name,
                "variant",
                hint="variants: " + ", ".join(x.name for x in self.prog.variants),
            )
            return
        m = self.machine
        tparams = v.tensor_params
        if len(inst.mems) != len(tparams):
            self.err(
                "M014",
                f"'{v.name}' has {len(tparams)} tensor parameter(s) "
                f"({', '.join(p.name for p in tparams)}), mems lists {len(inst.mems)}",
                name,
                "mems",
            )
        for j, (mem, p) in enumerate(zip(inst.mems, tparams)):
            if not m.visible(inst.proc, mem):
                self.err(
                    "M015",
                    f"{mem} is not visible from {inst.proc} (parameter '{p.name}')",
                    name,
                    "mems",
                    j,
                    hint=f"{inst.proc} can name: {', '.join(m.level(inst.proc).memories)}, NONE",
                )
        declared = v.tunables()
        for t, decl in declared.items():
            if t not in inst.tunables and decl.kind == "atom":
                continue  # derived from the tile by dependence analysis (AUTO_ATOM)
            if t not in inst.tunables:
                self.err(
                    "M016",
                    f"tunable '{t}' of '{v.name}' ({decl.kind}) is not bound",
                    name,
                    "tunables",  # the key, or the instance when it has none
                    hint=f"add `{t}: …` under tunables of instance '{name}'",
                )
                continue
            val = inst.tunables[t]
            if decl.kind == "int" and (
                not isinstance(val, int) or isinstance(val, bool) or val <= 0
            ):
                self.err(
                    "M016",
                    f"tunable '{t}' is an int; got {_shown(val)}",
                    name,
                    "tunables",
                    t,
                    hint="int tunables take positive integers",
                )
            elif decl.kind == "processor":
                if val not in m.processor_names:
                    self.err(
                        "M016",
                        f"tunable '{t}' is a processor; got {_shown(val)}",
                        name,
                        "tunables",
                        t,
                        hint=f"processors: {', '.join(m.processor_names)}",
                    )
                elif not m.level(str(val)).depth > m.level(inst.proc).depth:
                    self.err(
                        "M016",
                        f"processor tunable '{t}' = {val} must be below {inst.proc}",
                        name,
                        "tunables",
                        t,
                    )
            elif decl.kind == "atom" and not (isinstance(val, str) and is_atom_name(val)):
                self.err(
                    "M016",
                    f"tunable '{t}' is an instruction atom; got {_shown(val)}",
                    name,
                    "tunables",
                    t,
                    hint=f"atoms: {ATOM_FORMS}",
                )
        for t in inst.tunables:
            if t not in declared:
                self.err(
                    "M016",
                    f"'{v.name}' declares no tunable '{t}'",
                    name,
                    "tunables",
                    t,
                    hint=f"declared: {', '.join(declared) or '(none)'}",
                )
        if inst.proc != Proc.BLOCK:
            for knob in BLOCK_KNOBS:
                if getattr(inst, knob) is not None:
                    self.err(
                        "M022",
                        f"'{knob}' applies to BLOCK instances; '{name}' runs on {inst.proc}",
                        name,
                        knob,
                    )
        if v.kind == "leaf":
            for j, (mem, p) in enumerate(zip(inst.mems, tparams)):
                if mem == Mem.NONE:
                    self.err(
                        "M023",
                        f"leaf '{v.name}' touches '{p.name}', so it cannot be NONE here",
                        name,
                        "mems",
                        j,
                        hint="NONE means never materialized at this level; a leaf reads or "
                        f"writes its tensors, so map '{p.name}' to a memory {inst.proc} can name",
                    )
            for s in S.walk(v.body):
                if (
                    isinstance(s, S.LeafCall)
                    and s.fn in self.leaves
                    and self.leaves[s.fn].proc != inst.proc
                ):
                    self.err(
                        "M021",
                        f"leaf '{v.name}' calls {s.fn}(), which runs on "
                        f"{self.leaves[s.fn].proc}; the instance maps it to {inst.proc}",
                        name,
                        "proc",
                    )
        for j, c in enumerate(inst.calls):
            if c not in self.by_name:
                self.err("M018", f"calls names unknown instance '{c}'", name, "calls", j)

    def node(self, inst: Instance, stack: tuple[str, ...]) -> TaskNode:
        self.reached.add(inst.instance)
        v = self.prog.variant(inst.variant)
        assert v is not None
        mems = {p.name: mem for p, mem in zip(v.tensor_params, inst.mems)}
        kinds = v.tunables()
        tunables = {  # a processor's name (checked by now: M016) becomes its member
            t: Proc(x)
            if t in kinds and kinds[t].kind == "processor" and x in self.machine.processor_names
            else x
            for t, x in inst.tunables.items()
        }
        tunables.update(  # an atom left unbound is derived (cypressc.passes.atom_derivation)
            {t: AUTO_ATOM for t, d in kinds.items() if d.kind == "atom" and t not in tunables}
        )
        node = TaskNode(inst, v, inst.proc, mems, tunables)
        tasks = self.prog.tasks()
        for s in S.walk(v.body):
            if not isinstance(s, S.Launch):
                continue
            cands = [
                c
                for c in inst.calls
                if c in self.by_name
                and (cv := self.prog.variant(self.by_name[c][1].variant)) is not None
                and cv.task == s.task
            ]
            if len(cands) != 1:
                impl = [x.name for x in tasks.get(s.task, [])]
                what = (
                    "no instance" if not cands else f"{len(cands)} instances ({', '.join(cands)})"
                )
                self.err(
                    "M017",
                    f"launch of '{s.task}' in '{v.name}' resolves to {what} in calls of "
                    f"'{inst.instance}'",
                    inst.instance,
                    "calls",
                    hint=f"list exactly one instance whose variant is one of: {', '.join(impl)}",
                )
                continue
            child = self.by_name[cands[0]][1]
            if not self.machine.deeper_or_equal(child.proc, inst.proc):
                self.err(
                    "M019",
                    f"'{child.instance}' runs on {child.proc}, above its caller "
                    f"'{inst.instance}' on {inst.proc}",
                    child.instance,
                    "proc",
                    hint="a launched task runs on the same processor level or a deeper one",
                )
                continue
            if child.instance in stack + (inst.instance,):
                self.err(
                    "M020",
                    f"instance '{child.instance}' launches itself through "
                    f"{' -> '.join(stack + (inst.instance, child.instance))}",
                    inst.instance,
                    "calls",
                    hint="recursion must bottom out: map each level to its own instance",
                )
                continue
            node.children.append((s, self.node(child, stack + (inst.instance,))))
        return node


def _shown(val: object) -> str:
    """A tunable value as the YAML spelled it (``true``, not Python's ``True``)."""
    return str(val).lower() if isinstance(val, bool) else repr(val)


def unused_knobs(root: TaskNode, lm: LoadedMapping) -> list[Warning_]:
    """W002 for each BLOCK knob set on a reached instance where no compiler pass reads it.

    The passes read ``pipeline`` on the srange loops of the variant of the BLOCK
    instance it is set on (dependence analysis marks those loops, warp specialization
    stages them), so it has no effect on a variant without an srange.  Every other knob
    configures a kernel's block — an outermost BLOCK instance of the tree (a program of
    several kernels has one per kernel), which resource allocation, warp specialization and
    the CUDA lowering consult — so on any other BLOCK instance (a copy- or clear-only block
    launched from the kernel's body, say) it has no effect.
    """
    # each BLOCK node with its kernel's block (itself for a kernel's block)
    below = [
        (n, k.instance) for k in root.kernel_blocks() for n in k.walk() if n.proc == Proc.BLOCK
    ]
    out: list[Warning_] = []
    seen: set[int] = set()
    for n, kernel in below:
        inst = n.instance
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        for knob in BLOCK_KNOBS:
            if getattr(inst, knob) is None:
                continue
            loc = lm.instance_loc(inst.instance, knob)
            if knob == "pipeline":
                if not any(
                    isinstance(s, S.Loop) and s.kind == "srange" for s in S.walk(n.variant.body)
                ):
                    out.append(
                        Warning_(
                            "W002",
                            f"'pipeline' has no effect on '{inst.instance}': its variant "
                            f"'{n.variant.name}' has no srange loop to pipeline",
                            loc,
                            hint="pipeline stages the srange loops of the variant it is set on; "
                            "set it on the instance whose variant holds the main loop",
                        )
                    )
            elif inst is not kernel:
                out.append(
                    Warning_(
                        "W002",
                        f"'{knob}' has no effect on '{inst.instance}': the BLOCK knobs configure "
                        f"the kernel's block, which is '{kernel.instance}' (the outermost BLOCK instance)",
                        loc,
                        hint=f"set it on instance '{kernel.instance}', or remove it",
                    )
                )
    return out


def _once_per_place(errors: list[CypressError]) -> list[CypressError]:
    """The first error of each code at each place: the rows a tree entry expands to share
    the user's values, so one bad value would otherwise be reported once per level."""
    seen: set[tuple] = set()
    out = []
    for e in errors:
        key = (e.code, e.loc.file, e.loc.line, e.loc.col)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def instantiate(prog: S.Program, lm: LoadedMapping) -> TaskTree:
    """Validate ``lm`` against ``prog`` and build the task tree.

    ``lm`` may use mapping templates and shared tunables; the tree's ``mapping`` is the
    expanded full form (:func:`cypressc.mapping.templates.expand`).  Raises
    :class:`CypressErrors` (codes M010–M025) when the mapping does not fit the program; returns a :class:`TaskTree` whose ``warnings`` list unreachable instances
    (W001) and BLOCK knobs without effect (W002), in file order.
    """
    lm = expand(lm, prog)  # tree entries and shared tunables -> the full mapping
    ins = _Instantiator(prog, lm)
    root, machine = ins.run()
    if ins.errors or root is None or machine is None:
        raise CypressErrors(_once_per_place(ins.errors))
    warnings = [
        Warning_(
            "W001",
            f"instance '{inst.instance}' is never reached from '{lm.spec.entrypoint}'",
            lm.instance_loc(inst.instance, "instance"),
            hint="remove it, or list it in the calls of the instance that launches it",
        )
        for inst in lm.spec.instances
        if inst.instance not in ins.reached
    ]
    warnings += unused_knobs(root, lm)
    warnings.sort(key=lambda w: (w.loc.line, w.loc.col))
    return TaskTree(root, machine, prog, lm, warnings)
