#!/usr/bin/env python3
"""Mapping variants for a GPU correctness sweep: "a mapping change changes speed, never results".

    python3 bench/mapping_sweep.py --out DIR [--count 24] [--seed 1] [--programs gemm,flash_attention3,...]
    PYTHONUNBUFFERED=1 python3 bench/gpu_check.py --programs P --mappings DIR/P/a.yaml,DIR/P/b.yaml,...

Starts from every committed mapping of each program (programs/P.cyp and mappings/P/, or
tests/programs/P.cyp and tests/mappings/P/ for a program not yet under programs/, such as
flash_attention_bwd) and turns the knobs ``cypressc tune``
turns (:mod:`cypressc.tuner.space`): each tunable bound to one value everywhere (tiles ``U``,
``V``, ``W``, consumer warpgroups ``WGS``), tied atoms, epilogue staging and the BLOCK knobs
(``pipeline``, ``persistent``, ``pingpong``, ``raster``, …).  The candidates are the tuner's
plus 1.5× each int tunable (192-row query blocks, 3 warpgroups).  A variant sets one to three
knobs to another of their candidates, rendered by the tuner's in-place editor; the atoms whose
N is a changed tunable's value are tried both as they are and moved with it (FlashAttention's
S atoms, 64 × W, follow W; its O atoms, 64 × E, stay), and the first text the compiler builds
is kept.  Each goes through the whole compiler (``cypressc build``, in process, into a scratch
directory); those it builds are written to ``DIR/<program>/<base>__<knobs>.yaml`` (``--count``
in all, drawn with ``--seed``) and their paths printed, one per line, for
``bench/gpu_check.py --mappings``, which builds each, checks it against PyTorch on
NaN-poisoned outputs at its ragged, causal and grouped shapes, and runs the sanitizers.
Variants the compiler refuses are counted by diagnostic code on stderr, not written: a
refusal is a located error, not a wrong kernel.  Exit status 1 when none is accepted.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cypressc.cli import main  # noqa: E402
from cypressc.lang.checker import check_program  # noqa: E402
from cypressc.lang.parser import parse_file  # noqa: E402
from cypressc.mapping.loader import load_mapping_source  # noqa: E402
from cypressc.mapping.tasktree import instantiate  # noqa: E402
from cypressc.tuner.space import Space, derive_space  # noqa: E402


def space_of(program: Path, mapping: Path) -> Space:
    """The tuner's search space of ``mapping`` for ``program`` (int tunables also get 1.5×
    their value as a candidate)."""
    text = mapping.read_text()
    space = derive_space(
        instantiate(
            check_program(parse_file(str(program), {})), load_mapping_source(text, str(mapping))
        ),
        text,
    )
    knobs = [
        replace(k, candidates=tuple(sorted({*k.candidates, k.current * 3 // 2})))
        if k.kind == "tunable" and isinstance(k.current, int) and k.current % 2 == 0
        else k
        for k in space.knobs
    ]
    return Space(space.lm, space.text, knobs)


def variants(space: Space, values: dict) -> list[str]:
    """The mapping texts of ``values``: the tuner's rendering, then for each int tunable that
    ``values`` changes, the same with every atom ``WGMMA_64xNx16`` whose N is that tunable's
    base value moved to its new value (FlashAttention's S atoms are 64 x W: they follow W; its
    O atoms, 64 x E, do not).  Which atoms belong to which tunable is not written anywhere, so
    the caller keeps the first text the compiler builds."""
    text = space.render(values)
    out = [text]
    for name, old in space.base.items():
        new = values.get(name, old)
        if (
            isinstance(old, int)
            and not isinstance(old, bool)
            and new != old
            and f"WGMMA_64x{old}x16" in text
        ):
            out.append(text.replace(f"WGMMA_64x{old}x16", f"WGMMA_64x{new}x16"))
    return out


def label(space: Space, values: dict) -> str:
    """``U256_W64_pipeline3_pingpong1``: the knobs ``values`` changes from the base."""
    out = []
    for k in space.knobs:
        v = values.get(k.name, k.current)
        if v != k.current:
            v = int(v) if isinstance(v, bool) else v
            out.append(re.sub(r"[^A-Za-z0-9]", "", f"{k.name.split('.')[-1]}{v}"))
    return "_".join(out)


def draw(space: Space, rng: random.Random) -> dict:
    """One to three searched knobs (not atoms: :func:`variants` moves those) set to
    another of their candidates, the rest as in the base: most mappings far from a committed
    one exceed shared memory or registers, or break an atom's shape, and are refused."""
    vals = dict(space.base)
    knobs = [k for k in space.knobs if k.searched and k.kind != "atom"]
    for k in rng.sample(knobs, min(len(knobs), rng.randint(1, 3))):
        vals[k.name] = rng.choice([c for c in k.candidates if c != k.current])
    return vals


def main_(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--programs", default=",".join(sorted(p.stem for p in (ROOT / "programs").glob("*.cyp")))
    )
    ap.add_argument("--tries", type=int, default=8, help="random draws per committed mapping")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    cands = []
    for prog in a.programs.split(","):
        # a program under tests/ (the attention backward, until it moves to programs/): its
        # mappings are tests/mappings/<program>/
        base = ROOT if (ROOT / "programs" / f"{prog}.cyp").is_file() else ROOT / "tests"
        program = base / "programs" / f"{prog}.cyp"
        for mapping in sorted((base / "mappings" / prog).glob("*.yaml")):
            space = space_of(program, mapping)
            for _ in range(a.tries):
                vals = draw(space, rng)
                if vals != space.base:
                    cands.append((prog, program, mapping, space, vals))
    rng.shuffle(cands)
    runner, written, refused, seen = CliRunner(), [], Counter(), set()
    for prog, program, mapping, space, vals in cands:
        if len(written) >= a.count:
            break
        name = f"{mapping.stem}__{label(space, vals)}.yaml"
        if (prog, name) in seen:
            continue
        seen.add((prog, name))
        path = a.out / prog / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for text in variants(space, vals):
            path.write_text(text)
            with tempfile.TemporaryDirectory() as tmp:
                r = runner.invoke(
                    main, ["build", str(program), "-m", str(path), "-o", str(Path(tmp) / "k")]
                )
            if r.exit_code == 0:
                break
        if r.exit_code != 0:  # by the diagnostic code (E046 shared memory, E047 registers, …)
            refused.update(set(re.findall(r"error\[(\w+)\]", r.output)) or {f"exit {r.exit_code}"})
            path.unlink()
            continue
        written.append(path)
        print(path)
    print(
        f"# {len(written)} accepted, {sum(refused.values())} refused: "
        + ", ".join(f"{c} x{n}" for c, n in sorted(refused.items())),
        file=sys.stderr,
    )
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main_())
