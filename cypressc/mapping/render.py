"""Rendering of the instantiated task tree for ``cypressc explain`` (DESIGN §3)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from cypressc.mapping.tasktree import TaskNode, TaskTree

__all__ = ["print_task_tree", "task_tree_text"]


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
