"""The package's layers (issue #36 item 4): ``lang → mapping → ir → passes → backend``, each
importing only itself and the layers before it, and no import cycle between modules.

Every import in a module counts, at the top or inside a function (a deferred import is still
a dependency); only ``if TYPE_CHECKING:`` blocks are left out of the cycle check (annotations,
never run), and they still may not reach upward."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parent.parent / "cypressc"

# package -> layer; a module may import its own layer and lower ones.  diagnostics (errors,
# locations) and abi (the built kernel's description) import nothing of cypressc's; runtime,
# torch, tuner, api, cli and the package itself sit on top and may import anything.
LAYERS = {"diagnostics": 0, "abi": 0, "lang": 1, "mapping": 2, "ir": 3, "passes": 4, "backend": 5}
TOP = 9

KNOWN_UPWARD: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(mods: dict[str, Path]) -> tuple[nx.DiGraph, nx.DiGraph]:
    """(every import edge, the edges outside ``if TYPE_CHECKING:``) between cypressc modules."""
    every, run = nx.DiGraph(), nx.DiGraph()
    for name, path in mods.items():
        every.add_node(name)
        run.add_node(name)
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        typing_only = {
            id(x)
            for n in ast.walk(tree)
            if isinstance(n, ast.If)
            and isinstance(n.test, ast.Name)
            and n.test.id == "TYPE_CHECKING"
            for b in n.body
            for x in ast.walk(b)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            else:
                continue
            for t in targets:
                if t in mods and t != name:
                    every.add_edge(name, t)
                    if id(node) not in typing_only:
                        run.add_edge(name, t)
    return every, run


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], TOP) if len(parts) > 1 else TOP


def test_no_import_cycles():
    _, run = _imports(_modules())
    cycles = [sorted(c) for c in nx.strongly_connected_components(run) if len(c) > 1]
    assert cycles == [], cycles


def test_nothing_imports_upward():
    every, _ = _imports(_modules())
    up = sorted((a, b) for a, b in every.edges if _layer(b) > _layer(a))
    assert set(up) == KNOWN_UPWARD, up


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The two checks have teeth: a copy of the package with ``ir.nodes`` importing
    ``backend.plan`` at run time fails both."""
    import shutil

    copy = tmp_path / "cypressc"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__", "runtime"))
    nodes = copy / "ir" / "nodes.py"
    nodes.write_text(nodes.read_text() + "\nfrom cypressc.backend.plan import KernelPlan  # noqa\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", copy)
    every, run = _imports(_modules())
    assert ("cypressc.ir.nodes", "cypressc.backend.plan") in every.edges
    assert any(
        "cypressc.ir.nodes" in c and len(c) > 1 for c in nx.strongly_connected_components(run)
    )
    assert _layer("cypressc.backend.plan") > _layer("cypressc.ir.nodes")
