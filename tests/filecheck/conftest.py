"""filecheck tests (LLVM FileCheck's and xDSL's shape; issue #36 item 2): each ``*.ir`` file
under this folder is one test.  Its ``# RUN:`` line is a ``cypressc`` command (``%s`` is the
file), run in this process; ``not cypressc …`` expects it to fail and checks its error text.
Its ``# CHECK…:`` lines are matched against the output, in order:

* ``# CHECK: pat``       -- on a line at or after the previous match
* ``# CHECK-NEXT: pat``  -- on the line right after the previous match
* ``# CHECK-SAME: pat``  -- further along the previous match's line
* ``# CHECK-NOT: pat``   -- nowhere between the previous match and the next one (or the end)

A pattern is literal text (runs of blanks match any run of blanks) with ``{{regex}}``
pieces, ``[[NAME:regex]]`` to capture and ``[[NAME]]`` to match a capture again (FileCheck's
syntax).  Written here, not taken from the ``filecheck`` package: the RUN line runs in
process (a subprocess per test would cost a Python start-up and cypressc's imports each,
seconds for the whole folder) and the subset above is all the tests use.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
_DIRECTIVE = re.compile(r"#\s*(RUN|CHECK|CHECK-NEXT|CHECK-SAME|CHECK-NOT):(.*)$")


def pytest_collect_file(parent, file_path: Path):
    if file_path.suffix == ".ir":
        return IrFile.from_parent(parent, path=file_path)
    return None


class IrFile(pytest.File):
    def collect(self):
        yield IrCheck.from_parent(self, name=self.path.stem)


class CheckFailure(Exception):
    """A CHECK that did not hold: the directive's line and what was seen."""


def _regex(pat: str, names: dict[str, str]) -> re.Pattern:
    """FileCheck's pattern syntax as a Python regular expression."""
    out, i, here = [], 0, set()
    for m in re.finditer(r"\{\{(.*?)\}\}|\[\[(\w+):(.*?)\]\]|\[\[(\w+)\]\]", pat):
        out.append(re.sub(r"\\\s+|\s+", r"\\s+", re.escape(pat[i : m.start()])))
        if m.group(1) is not None:
            out.append(f"(?:{m.group(1)})")
        elif m.group(2) is not None:
            out.append(f"(?P<{m.group(2)}>{m.group(3)})")
            here.add(m.group(2))
        elif m.group(4) in here:  # defined earlier in this pattern
            out.append(f"(?P={m.group(4)})")
        else:
            if m.group(4) not in names:
                raise CheckFailure(f"[[{m.group(4)}]] is used before it is defined")
            out.append(re.escape(names[m.group(4)]))
        i = m.end()
    out.append(re.sub(r"\\\s+|\s+", r"\\s+", re.escape(pat[i:])))
    return re.compile("".join(out))


def filecheck(output: str, checks: list[tuple[int, str, str]]) -> None:
    """Match ``checks`` ((line in the test, kind, pattern)) against ``output``; raise
    :class:`CheckFailure` at the first that fails."""
    lines = output.splitlines()
    names: dict[str, str] = {}
    li, col = 0, 0  # where the previous match ended
    nots: list[tuple[int, str]] = []

    def search(rx, start_li, start_col, stop_li):
        for j in range(start_li, min(stop_li, len(lines))):
            m = rx.search(lines[j], start_col if j == start_li else 0)
            if m:
                return j, m
        return None

    def check_nots(end_li: int, end_col: int) -> None:
        for no, pat in nots:
            rx = _regex(pat, names)
            for j in range(li, min(end_li + 1, len(lines))):
                lo = col if j == li else 0
                hi = end_col if j == end_li else len(lines[j])
                if rx.search(lines[j][lo:hi]):
                    raise CheckFailure(
                        f"line {no}: CHECK-NOT: {pat.strip()} matched output line {j + 1}:\n  {lines[j]}"
                    )
        nots.clear()

    first = True
    for no, kind, pat in checks:
        if kind == "CHECK-NOT":
            nots.append((no, pat))
            continue
        rx = _regex(pat.strip(), names)
        if kind == "CHECK":
            found = search(rx, li, col, len(lines))
        elif kind == "CHECK-NEXT":
            found = None if first else search(rx, li + 1, 0, li + 2)
        else:  # CHECK-SAME
            found = search(rx, li, col, li + 1)
        if found is None:
            near = "\n".join(f"  {k + 1}: {lines[k]}" for k in range(li, min(li + 3, len(lines))))
            raise CheckFailure(
                f"line {no}: {kind}: {pat.strip()} not found; the output from line {li + 1}:\n{near}"
            )
        j, m = found
        check_nots(j, m.start())
        names.update({k: v for k, v in m.groupdict().items() if v is not None})
        li, col, first = j, m.end(), False
    check_nots(len(lines) - 1, len(lines[-1]) if lines else 0)


class IrCheck(pytest.Item):
    def runtest(self) -> None:
        from cypressc.cli import main

        text = self.path.read_text()
        directives = [
            (i, m.group(1), m.group(2))
            for i, line in enumerate(text.splitlines(), 1)
            if (m := _DIRECTIVE.search(line))
        ]
        runs = [d for d in directives if d[1] == "RUN"]
        checks = [d for d in directives if d[1] != "RUN"]
        if len(runs) != 1 or not checks:
            raise CheckFailure("a filecheck test has one `# RUN:` line and at least one CHECK")
        argv = shlex.split(runs[0][2].replace("%s", str(self.path)))
        fail = argv[:1] == ["not"]
        argv = argv[1:] if fail else argv
        if argv[:1] != ["cypressc"]:
            raise CheckFailure(f"line {runs[0][0]}: RUN runs `cypressc ...`, not {argv[:1]}")
        r = CliRunner().invoke(main, argv[1:], catch_exceptions=False)
        if fail != (r.exit_code != 0):
            raise CheckFailure(
                f"`{runs[0][2].strip()}` exited {r.exit_code}\n{r.stderr}"
                if not fail
                else f"`{runs[0][2].strip()}` succeeded; `not` expects an error"
            )
        filecheck(r.stderr if fail else r.stdout, checks)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, CheckFailure):
            return f"{self.path.relative_to(ROOT)}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"filecheck {self.path.relative_to(ROOT)}"
