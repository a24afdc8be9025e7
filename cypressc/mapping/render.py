"""Rendering of the instantiated task tree and of the expanded mapping for ``cypressc explain``
(DESIGN §3; issue #37)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from pathlib import Path

from cypressc.mapping.loader import LoadedMapping
from cypressc.mapping.tasktree import TaskNode, TaskTree

__all__ = ["expanded_mapping_text", "print_task_tree", "task_tree_text", "yaml_scalar"]


def _label(n: TaskNode, color: bool) -> str:
    args = ", ".join(f"{p}@{m}" for p, m in n.mems.items())
    tun = ", ".join(f"{k}={v}" for k, v in n.tunables.items())
    inst, var, proc = n.instance.instance, n.variant.name, n.proc
    knobs = [
        f"{k}={getattr(n.instance, k)}"
        for k in (
            "warpspecialize",
            "pipeline",
            "mma_in_flight",
            "smem_limit",
            "persistent",
            "raster",
            "pingpong",
            "deterministic",
            "cluster",
        )
        if getattr(n.instance, k) is not None
    ]
    # Labels are rich markup in both modes (Tree renders them), so user text and the
    # knob list "[...]" are escaped: unescaped, "[pipeline=4, ...]" would vanish as a tag.
    if color:
        s = f"[bold]{escape(inst)}[/] [dim]variant[/] {escape(var)} [cyan]{proc}[/] ({escape(args)})"
    else:
        s = escape(f"{inst}: variant {var} on {proc} ({args})")
    if tun:
        s += escape(f" {{{tun}}}")
    if knobs:
        s += escape(" [" + ", ".join(knobs) + "]")
    return s


def _build(n: TaskNode, t: Tree, color: bool) -> None:
    for _, c in n.children:
        _build(c, t.add(_label(c, color)), color)


def task_tree_text(tree: TaskTree, color: bool = False) -> Tree:
    root = Tree(_label(tree.root, color))
    _build(tree.root, root, color)
    return root


def print_task_tree(tree: TaskTree, console: Console | None = None) -> None:
    """Print the task tree (rich colours on a terminal, plain text when piped)."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # piped: no wrapping, so the text diffs line by line
            console = Console(width=1000, no_color=True)
    color = console.is_terminal
    console.print(
        f"task tree ({tree.machine.name}, entrypoint {tree.root.instance.instance}):",
        highlight=False,
    )
    console.print(task_tree_text(tree, color), highlight=False)


def yaml_scalar(v: object) -> str:
    """A mapping value as YAML writes it: ``true``/``false`` for a bool, else ``str(v)``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _flow(v: object) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return yaml_scalar(v)


def expanded_mapping_text(lm: LoadedMapping) -> str:
    """The full mapping ``lm`` stands for (after :func:`cypressc.mapping.templates.expand`),
    as YAML that loads to the same instances: one flow-style row per instance, each after a
    comment saying where it came from (the entry's ``file:line``, and for a ``tree:`` entry
    its template and level) and which values the shared ``tunables:`` supplied.  The
    ``tune:`` section is kept; the ``tunables:`` and ``templates:`` sections are spent."""
    spec = lm.spec
    out = [
        f"# {lm.path}, expanded: mapping templates and shared tunables written out",
        f"machine: {spec.machine}",
        f"entrypoint: {spec.entrypoint}",
        "instances:",
    ]
    for r, inst in enumerate(spec.instances):
        o = lm.origins.get(inst.instance)
        if o is not None:
            at = lm.loc("instances", r)
            where = f"{Path(at.file).name}:{at.line}"
            if o.template is not None:
                n = len([x for x in lm.origins.values() if x.entry == o.entry])
                where += f", template {o.template} level {o.level + 1} of {n}"
            if o.shared:
                where += f"; shared tunables {', '.join(o.shared)}"
            out.append(f"  # {where}")
        row = inst.model_dump(mode="json", exclude_none=True)
        row = {k: v for k, v in row.items() if v not in ({}, [])}
        out.append("  - " + _flow(row))
    if spec.tune:
        out.append("tune: " + _flow(spec.tune))
    return "\n".join(out) + "\n"
