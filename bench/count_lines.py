#!/usr/bin/env python3
"""Issue #37's line counts: what a user writes for each bundled program.

    python3 bench/count_lines.py [--mapping h100.yaml]

Per program: the lines of its full form (tests/programs/full/<name>.cyp, every tree written
out, and tests/mappings/full/<name>/<mapping>, every row written out) and of what a user
writes now (programs/<name>.cyp importing the task library, mappings/<name>/<mapping> with
templates and shared tunables), counting neither blank lines nor comments nor docstrings (a
``.cyp`` file's module docstring and each ``def``'s).  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cyp_lines(text: str) -> int:
    """Lines of ``.cyp`` source ``text`` that are code: not blank, not a ``#`` comment, not in
    the module docstring or a ``def``'s docstring (the file must parse as Python)."""
    tree = ast.parse(text)
    docs: set[int] = set()
    for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for i, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and i not in docs
    )


def yaml_lines(text: str) -> int:
    """Lines of YAML ``text`` that are neither blank nor a ``#`` comment."""
    return sum(1 for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mapping", default="h100.yaml", help="the mapping file of each program")
    args = ap.parse_args()
    print(
        "| program | full program | full mapping | full total "
        "| program (library) | mapping (templates) | total |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for full in sorted((ROOT / "tests/programs/full").glob("*.cyp")):
        name = full.stem
        if not (ROOT / "mappings" / name / args.mapping).exists():
            continue
        f = cyp_lines(full.read_text())
        fm = yaml_lines((ROOT / "tests/mappings/full" / name / args.mapping).read_text())
        lib = cyp_lines((ROOT / "programs" / f"{name}.cyp").read_text())
        m = yaml_lines((ROOT / "mappings" / name / args.mapping).read_text())
        print(f"| {name} | {f} | {fm} | {f + fm} | {lib} | {m} | {lib + m} |")


if __name__ == "__main__":
    main()
