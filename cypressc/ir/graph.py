"""A networkx view of the event graph, and DOT/SVG rendering for ``explain --graph``.

Nodes are asynchronous ops (copies, calls, loops); an edge ``a -> b`` means ``b`` waits
for ``a`` (label ``[:]`` when it is a broadcast).  After warp specialization nodes are
coloured by role, as in the paper's Fig. 12 (producer: DMA warp; consumer: compute).
"""

from __future__ import annotations

import shutil
import subprocess

import networkx as nx

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.kinds import Role
from cypressc.ir.printer import fmt_view
from cypressc.ir.subst import walk_ops

__all__ = ["event_graph", "to_dot", "render_svg"]

ROLE_COLORS = {Role.PRODUCER: "#f4a261", Role.CONSUMER: "#2a9d8f"}
KIND_COLORS = {"copy": "#e9c46a", "call": "#8ecae6", "for": "#dddddd", "pfor": "#dddddd"}


def event_graph(m: N.Module) -> nx.DiGraph:
    """The dependence graph: one node per async op, one edge per precondition."""
    g = nx.DiGraph()
    roles = m.role_map()
    for o in walk_ops(m.body):
        if not isinstance(o, N.AsyncOp):
            continue
        if isinstance(o, N.Copy):
            label, kind = f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)}", "copy"
        elif isinstance(o, N.Call):
            label, kind = f"call {o.fn}", "call"
        else:
            label, kind = (
                f"{'for' if isinstance(o, N.For) else 'pfor'} %{o.var}",
                "for" if isinstance(o, N.For) else "pfor",
            )
        g.add_node(
            o.ev,
            label=label,
            kind=kind,
            role=roles.get(o.ev, ""),
            procs=",".join(d.proc for d in o.dims),
        )
        for r in o.pre:
            g.add_edge(r.name, o.ev, broadcast=any(i is None for i in r.idx))
    return g


def to_dot(m: N.Module, title: str = "") -> str:
    """The event graph as Graphviz DOT text."""
    g = event_graph(m)
    names = {n: f"e{i + 1}" for i, n in enumerate(g.nodes)}
    lines = [
        "digraph events {",
        f'  label="{title}";',
        "  node [shape=box, style=filled, fontname=monospace];",
    ]
    for n, d in g.nodes(data=True):
        color = ROLE_COLORS.get(d["role"]) or KIND_COLORS.get(d["kind"], "#ffffff")
        label = f"%{names[n]}: {d['label']}".replace('"', "'")
        lines.append(f'  {names[n]} [label="{label}", fillcolor="{color}"];')
    for a, b, d in g.edges(data=True):
        if a in names and b in names:
            attr = ' [label="[:]"]' if d["broadcast"] else ""
            lines.append(f"  {names[a]} -> {names[b]}{attr};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(dot: str, program: str) -> str:
    """Render DOT with graphviz ``dot`` for ``explain --graph --graph-format svg``.

    Raises E060, located at the ``program`` file whose graph it is (the problem is the
    tool, not a line of the program), when ``dot`` is not on PATH, cannot be run, or fails.
    """
    where = Loc(program)
    fallback = "or use `--graph-format dot` (the default) and render the DOT text elsewhere"
    exe = shutil.which("dot")
    if exe is None:
        raise CypressError(
            "E060",
            "--graph-format svg needs graphviz's `dot` program, which is not on PATH",
            where,
            hint=f"install graphviz (e.g. `apt-get install graphviz`), {fallback}",
        )
    try:
        r = subprocess.run([exe, "-Tsvg"], input=dot, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        why = (
            "took over 120 s" if isinstance(e, subprocess.TimeoutExpired) else e.strerror or str(e)
        )
        raise CypressError(
            "E060",
            f"graphviz's `dot` ({exe}) could not render the event graph: {why}",
            where,
            hint=fallback.removeprefix("or "),
        ) from None
    if r.returncode != 0:
        detail = next((ln.strip() for ln in r.stderr.splitlines() if ln.strip()), "no message")
        raise CypressError(
            "E060",
            f"graphviz's `dot` ({exe}) failed with exit status {r.returncode}: {detail}",
            where,
            hint=fallback.removeprefix("or "),
        )
    return r.stdout
