#!/usr/bin/env python3
"""Mapping variants for a GPU correctness sweep: "a mapping change changes speed, never results".

    python3 bench/mapping_sweep.py --out DIR [--count 24] [--seed 1] [--programs flash_attention2,flash_attention3]
    PYTHONUNBUFFERED=1 python3 bench/gpu_check.py --mappings DIR/a.yaml,DIR/b.yaml,... --programs ...

Takes the committed attention mappings and changes the knobs a kernel author turns: the query
block U (128-384) and the consumer warpgroups WGS (2, 3) sharing it (U / WGS rows each: one or
two 64-row wgmma atoms per warpgroup), the key block W (64,
128, 192, with every S-shaped atom ``WGMMA_64xWx16``), the pipeline depth (2-4), ping-pong,
persistent blocks.  Each variant goes through the whole compiler; those the
compiler builds (``cypressc build``, in process, into a scratch directory) are written to ``DIR/<program>/<base>__<knobs>.yaml`` (``--count`` of them,
drawn with ``--seed`` from every combination, the base mappings' own values left out) and their
paths printed, one per line, for ``bench/gpu_check.py --mappings`` (which builds each, checks it
against PyTorch on NaN-poisoned outputs at ragged, causal and grouped shapes, and runs the
sanitizers).  Variants the compiler refuses are counted, not written: a refusal is a clear
error, not a wrong kernel (their diagnostic codes are counted on stderr).  Exit status 1 when none is accepted.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cypressc.cli import main  # noqa: E402

BASES = {
    "flash_attention3": ["h100_d64_pp_staged_persistent.yaml", "h100_d128_pp_staged_persistent.yaml",
                         "h100_d64.yaml", "h100_d128.yaml", "h100_d64_wg3_staged_persistent.yaml",
                         "h100_d128_wg3_pp.yaml"],
    "flash_attention2": ["h100_d64.yaml", "h100_d128.yaml", "h100_d64_wg3.yaml", "h100_d128_w176_pp.yaml"],
}
KNOBS = {"U": (128, 192, 256, 384), "WGS": (2, 3), "W": (64, 128, 192), "pipeline": (2, 3, 4),
         "pingpong": (False, True), "persistent": (False, True)}


def _flag(src: str, key: str, on: bool) -> str:
    """Set the block instance's boolean key ``key`` (added after ``pipeline`` when absent)."""
    if re.search(rf"\b{key}: (true|false)", src):
        return re.sub(rf"\b{key}: (true|false)", f"{key}: {'true' if on else 'false'}", src)
    return re.sub(r"(pipeline: \d+)", rf"\1, {key}: {'true' if on else 'false'}", src, count=1) if on else src


def variant(src: str, knobs: dict) -> str:
    """The mapping text ``src`` with ``knobs`` applied (U, W, pipeline, pingpong, persistent).
    The base's S atoms are ``WGMMA_64x<W>x16`` for its own W; they follow the new W."""
    w0 = int(re.search(r"\{W: (\d+)\}", src).group(1))
    src = re.sub(r"\{U: \d+, E: (\d+)\}", rf"{{U: {knobs['U']}, E: \1}}", src)
    src = re.sub(r"\bWGS: \d+", f"WGS: {knobs['WGS']}", src)
    src = src.replace(f"{{W: {w0}}}", f"{{W: {knobs['W']}}}")
    e = int(re.search(r"E: (\d+)\}", src).group(1))
    if w0 != e:  # S atoms are 64 x W; O's are 64 x E (when W = E they cannot be told apart: keep)
        src = src.replace(f"WGMMA_64x{w0}x16", f"WGMMA_64x{knobs['W']}x16")
    elif knobs["W"] != w0:
        return ""  # which atoms are S's is not recoverable from the text
    src = re.sub(r"pipeline: \d+", f"pipeline: {knobs['pipeline']}", src)
    src = _flag(src, "pingpong", knobs["pingpong"])
    return _flag(src, "persistent", knobs["persistent"])


def _base_knobs(src: str) -> dict:
    return {"U": int(re.search(r"\{U: (\d+)", src).group(1)), "WGS": int(re.search(r"\bWGS: (\d+)", src).group(1)),
            "W": int(re.search(r"\{W: (\d+)\}", src).group(1)),
            "pipeline": int(re.search(r"pipeline: (\d+)", src).group(1)),
            "pingpong": "pingpong: true" in src, "persistent": "persistent: true" in src}


def main_(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--programs", default=",".join(BASES))
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    cands = []
    for prog in a.programs.split(","):
        for base in BASES[prog]:
            src = (ROOT / "mappings" / prog / base).read_text()
            own = _base_knobs(src)
            for combo in itertools.product(*KNOBS.values()):
                knobs = dict(zip(KNOBS, combo))
                if knobs != own:
                    cands.append((prog, base, knobs))
    rng.shuffle(cands)
    runner, written, refused = CliRunner(), [], Counter()
    for prog, base, knobs in cands:
        if len(written) >= a.count:
            break
        text = variant((ROOT / "mappings" / prog / base).read_text(), knobs)
        if not text:
            continue
        name = Path(base).stem + "__" + "_".join(f"{k}{int(v)}" for k, v in knobs.items()) + ".yaml"
        path = a.out / prog / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        with tempfile.TemporaryDirectory() as tmp:
            r = runner.invoke(main, ["build", str(ROOT / "programs" / f"{prog}.cyp"), "-m", str(path),
                                     "-o", str(Path(tmp) / "k")])
        if r.exit_code != 0:  # by the diagnostic code (E046 shared memory, E047 registers, …)
            refused.update(set(re.findall(r"error\[(\w+)\]", r.output)) or {f"exit {r.exit_code}"})
            path.unlink()
            continue
        written.append(path)
        print(path)
    print(f"# {len(written)} accepted, {sum(refused.values())} refused: "
          + ", ".join(f"{c} x{n}" for c, n in sorted(refused.items())), file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main_())
