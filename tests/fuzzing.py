"""Semantic mutation fuzzing of ``cypressc check`` and ``cypressc explain`` (issue #9).

Where tests/lang/test_fuzz.py mutates *syntax* (characters, tokens, bytes), this mutates
*values* a user gets wrong: tunable values (0, negative, odd, huge, fractional), processor
levels, memories, atoms, block knobs, ``prange``/``srange`` extents, partition extents,
operator and dtype swaps, deleted and duplicated lines, in the bundled programs and every
bundled mapping.  Each mutant runs through the real CLI (in-process, click's runner), and is
classified:

* ``ok``         exit 0;
* ``located``    exit 1 and every diagnostic header is ``file:line:col: error[CODE]: …``;
* ``unlocated``  exit 1 with a diagnostic that names no line (a defect);
* ``internal``   exit 70, an internal compiler error (a defect);
* ``traceback``  a Python traceback anywhere in the output, or an exception escaping (a defect).

Run ``python tests/fuzzing.py --count 3000 --seed 1`` for the full campaign (prints the counts
and the first examples of each defect class, exit 1 if any); tests/test_fuzz_cli.py runs a
small seeded sample in CI.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the full forms (every tree and row written out): mutations spread over the task trees as
# before the library, and the seeded CI sample keeps its cost (a mutant of a short program on
# the library hits its host code far more often, some of it costly to check)
FULL = ROOT / "tests" / "programs" / "full"
PROGRAMS = sorted(p.stem for p in FULL.glob("*.cyp"))
MAPPINGS = {p: sorted((ROOT / "tests/mappings/full" / p).glob("*.yaml")) for p in PROGRAMS}

_HEADER = re.compile(r"^(?P<at>\S.*?): (?P<kind>error|warning)\[(?P<code>[EMW]\d{3})\]: ")
_LOCATED = re.compile(r":\d+:\d+$")

INT_VALUES = [
    "0",
    "-1",
    "-2",
    "1",
    "2",
    "3",
    "5",
    "8",
    "16",
    "24",
    "32",
    "48",
    "64",
    "96",
    "100",
    "128",
    "192",
    "256",
    "512",
    "4096",
    "1000000000",
    "99999999999999999999",
    "1.5",
    "true",
    "'3'",
    "null",
    "[]",
]
PROCS = ["HOST", "BLOCK", "WARPGROUP", "WARP", "THREAD"]
MEMS = ["GLOBAL", "SHARED", "REGISTER", "NONE"]
ATOMS = [f"WGMMA_64x{n}x16" for n in (8, 16, 32, 64, 96, 128, 192, 256)]
KNOBS = [
    "pipeline: 4",
    "warpspecialize: false",
    "warpspecialize: true",
    "persistent: false",
    "smem_limit: 100KiB",
    "smem_limit: 300KiB",
    "mma_in_flight: 0",
    "raster: 4",
    "consumer_registers: 240",
    "producer_registers: 24",
]
PROGRAM_EXTENTS = [
    "0",
    "-2",
    "1",
    "3",
    "WGS",
    "M / 0",
    "M / 3",
    "M // 2",
    "M * 99999999999",
    "-TK",
    "1.5",
    "K - K",
    "cdiv(M, 0)",
    "2 ** 70",
]


@dataclass(frozen=True)
class Mutant:
    """One fuzz input: a program and a mapping text, and what was changed."""

    program: str
    mapping: str
    what: str


def _replace_random(
    rng: random.Random, text: str, pattern: str, choices: list[str]
) -> tuple[str, str] | None:
    hits = list(re.finditer(pattern, text, re.MULTILINE))
    if not hits:
        return None
    m = rng.choice(hits)
    grp = 1 if m.groups() else 0
    new = rng.choice(choices)
    return text[: m.start(grp)] + new + text[
        m.end(grp) :
    ], f"{m.group(grp)!r} -> {new!r} at {m.start(grp)}"


def _lines(rng: random.Random, text: str) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    i = rng.randrange(len(lines))
    op = rng.choice(["delete", "duplicate", "swap"])
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines), f"{op} line {i + 1}"


def mutate_mapping(rng: random.Random, text: str) -> tuple[str, str]:
    """One value-level mutation of a mapping's YAML text."""
    for _ in range(20):
        kind = rng.choice(
            ["int", "int", "int", "proc", "mem", "mem", "atom", "knob", "bool", "lines"]
        )
        if kind == "int":
            r = _replace_random(rng, text, r"(?<![\w.])(\d+)(?:KiB)?(?![\w.])", INT_VALUES)
        elif kind == "proc":
            r = _replace_random(rng, text, r"\b(HOST|BLOCK|WARPGROUP|WARP|THREAD)\b", PROCS)
        elif kind == "mem":
            r = _replace_random(rng, text, r"\b(GLOBAL|SHARED|REGISTER|NONE)\b", MEMS)
        elif kind == "atom":
            r = _replace_random(rng, text, r"\b(WGMMA_\w+)\b", ATOMS)
        elif kind == "bool":
            r = _replace_random(
                rng, text, r"\b(true|false)\b", ["true", "false", "1", "0", "'yes'"]
            )
        elif kind == "knob":
            r = _replace_random(
                rng,
                text,
                r"^(    calls: \[[^\]]*\])$",
                [f"    calls: [PLACEHOLDER]\n    {k}" for k in KNOBS],
            )
            if r is not None:
                calls = re.findall(r"^    calls: (\[[^\]]*\])$", text, re.MULTILINE)
                r = (r[0].replace("[PLACEHOLDER]", rng.choice(calls)), r[1])
        else:
            r = _lines(rng, text)
        if r is not None and r[0] != text:
            return r[0], f"mapping {kind}: {r[1]}"
    return text, "mapping unchanged"


def mutate_program(rng: random.Random, text: str) -> tuple[str, str]:
    """One value-level mutation of a program's ``.cyp`` text."""
    for _ in range(20):
        kind = rng.choice(
            ["extent", "extent", "partition", "operator", "dtype", "operand", "int", "lines"]
        )
        if kind == "extent":
            r = _replace_random(
                rng, text, r"[ps]range\(([^()]*(?:\([^()]*\))?[^()]*)\)", PROGRAM_EXTENTS
            )
        elif kind == "partition":
            r = _replace_random(
                rng, text, r"partition_by_blocks\(\w+, \(([^,()]+)", PROGRAM_EXTENTS
            )
        elif kind == "operator":
            r = _replace_random(rng, text, r"\w (/|\*|\+|-|//) \w", ["/", "//", "*", "+", "-", "%"])
        elif kind == "dtype":
            r = _replace_random(
                rng, text, r"\b(f16|bf16|f32|T)\b(?=[\]\),])", ["f16", "bf16", "f32", "i32", "T"]
            )
        elif kind == "operand":
            r = _replace_random(rng, text, r'"(A|B|C)"', ["A", "B", "C"])
        elif kind == "int":
            r = _replace_random(
                rng, text, r"(?<![\w.])(\d+)(?![\w.])", ["0", "-1", "3", "1.5", "65536"]
            )
        else:
            r = _lines(rng, text)
        if r is not None and r[0] != text:
            return r[0], f"program {kind}: {r[1]}"
    return text, "program unchanged"


def mutants(seed: int, count: int):
    """``count`` mutants, deterministic for ``seed``: a mapping mutation (55%), a program
    mutation (35%), or both (10%), of a random bundled program and one of its mappings;
    ~1 in 4 carries a second mutation of the same file."""
    rng = random.Random(seed)
    for _ in range(count):
        prog = rng.choice(PROGRAMS)
        mp = rng.choice(MAPPINGS[prog])
        ptext, mtext = (FULL / f"{prog}.cyp").read_text(), mp.read_text()
        what = []
        u = rng.random()
        for _ in range(2 if rng.random() < 0.25 else 1):
            if u < 0.65:
                mtext, w = mutate_mapping(rng, mtext)
                what.append(w)
            if u >= 0.55:
                ptext, w = mutate_program(rng, ptext)
                what.append(w)
        yield Mutant(ptext, mtext, f"{prog} + {mp.name}: " + "; ".join(what))


def classify(exit_code: int, output: str) -> str:
    """The outcome class of one CLI run (see the module docstring)."""
    if "Traceback (most recent call last)" in output:
        return "traceback"
    if exit_code == 70 or "internal compiler error" in output:
        return "internal"
    if exit_code == 0:
        return "ok"
    headers = [m for m in map(_HEADER.match, output.splitlines()) if m]
    if exit_code != 1 or not headers:
        return "unlocated"
    return "located" if all(_LOCATED.search(h.group("at")) for h in headers) else "unlocated"


def run(seed: int, count: int, commands=("check", "explain"), show: int = 3) -> Counter:
    """Run ``count`` mutants through each command; return the counts per (command, class),
    plus a ``defect examples`` list in ``counts.examples``."""
    from click.testing import CliRunner

    from cypressc.cli import main

    counts: Counter = Counter()
    examples: list[str] = []
    seen: Counter = Counter()
    with tempfile.TemporaryDirectory() as d:
        prog, mp = Path(d) / "program.cyp", Path(d) / "mapping.yaml"
        for mu in mutants(seed, count):
            prog.write_text(mu.program)
            mp.write_text(mu.mapping)
            for cmd in commands:
                try:
                    r = CliRunner().invoke(
                        main, [cmd, str(prog), "-m", str(mp)], catch_exceptions=True
                    )
                    out, code = r.output, r.exit_code
                    if r.exception is not None and not isinstance(r.exception, SystemExit):
                        out += "\nTraceback (most recent call last): " + repr(r.exception)
                except Exception as e:  # noqa: BLE001 - the fuzzer records every escape
                    out, code = f"Traceback (most recent call last): {e!r}", -1
                c = classify(code, out)
                counts[(cmd, c)] += 1
                if c in ("traceback", "internal", "unlocated"):
                    diag = [
                        ln
                        for ln in out.splitlines()
                        if _HEADER.match(ln) or "rror" in ln or "Trace" in ln
                    ]
                    key = (
                        c,
                        _HEADER.match(diag[0]).group("code")
                        if diag and _HEADER.match(diag[0])
                        else "",
                    )
                    seen[key] += 1
                    if seen[key] <= show:  # a few examples of each kind of defect
                        examples.append(f"[{cmd} {c}] {mu.what}\n" + "\n".join(diag[:4]))
    counts.examples = examples  # type: ignore[attr-defined]
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commands", default="check,explain")
    a = ap.parse_args(argv)
    counts = run(a.seed, a.count, tuple(a.commands.split(",")))
    for ex in counts.examples:  # type: ignore[attr-defined]
        print(ex, end="\n\n")
    print(f"mutants {a.count} (seed {a.seed})")
    for cmd in a.commands.split(","):
        row = {c: counts[(cmd, c)] for c in ("ok", "located", "unlocated", "internal", "traceback")}
        print(f"{cmd:8} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    bad = sum(v for (_, c), v in counts.items() if c in ("unlocated", "internal", "traceback"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
