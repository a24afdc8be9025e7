"""Accumulator rows in several 64-row atoms per warpgroup (the backend's per-atom row leaves).

A mapping whose warpgroup tile is taller than one wgmma atom (``U / WGS > 64``: here
flash_attention2 / 3 with U = 256 on two consumer warpgroups, two atoms each) runs each row
leaf once per atom ``a``; cypress.cuh's helpers see one atom's 64 rows, so whatever locates a
row must move 64·a rows down the tile.  The masks are where that is easy to get wrong and a
wrong sign is silent in every committed mapping (one atom each, ``a`` = 0): the causal
diagonal offset (first query row minus first key) of atom ``a`` is the tile's plus 64·a.

The test compiles, for the host, the kernel's own mask statements (both loops' and the peeled
step's) with cypress.cuh's own ``mask_columns`` / ``mask_causal`` bodies, runs them for every
thread of each consumer warpgroup, maps each fragment element to its (query row, key) through
the wgmma accumulator layout, and compares what is masked with attention's definition: a key
at or past N, or (causal, top-left aligned) a key after the query row.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "cypressc" / "backend" / "runtime" / "cypress.cuh"
CXX = shutil.which("g++") or shutil.which("c++")

pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")


# U = 256 query rows (two 64-row atoms per consumer warpgroup), W = 64 keys, S's atoms 64 x W
TALL = (
    ("{U: 128, E: 64}", "{U: 256, E: 64}"),
    ("{W: 128}", "{W: 64}"),
    ("WGMMA_64x128x16", "WGMMA_64x64x16"),
)


def _build(tmp_path: Path, program: str, mapping: Path) -> str:
    out = tmp_path / f"{program}_{mapping.stem}"
    r = CliRunner().invoke(
        main,
        ["build", str(ROOT / "programs" / f"{program}.cyp"), "-m", str(mapping), "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    return (out / f"{program}.cu").read_text()


def _helper(name: str) -> str:
    """cypress.cuh's own definition of the row helper ``name``."""
    m = re.search(
        rf"template <int R> __device__ __forceinline__ void {name}\(.*?\n}}\n",
        RUNTIME.read_text(),
        re.S,
    )
    assert m, name
    return m.group(0)


def _masks(cu: str) -> list[tuple[str, int, str, str, str]]:
    """Each S tile's mask statements in the kernel: (fragment, atoms, the mask_columns n, the
    mask_causal d, the key of the tile's first column as a C expression of the kernel's own
    variables, read off the program's n = N - key0)."""
    out = []
    # one atom: no loop, the atom index folded to 0
    cols = re.findall(
        r"(?:for \(int a = 0; a < (\d+); \+\+a\) )?cypress::mask_columns\((\w+)\[[a0]\], (.*?)\);\n",
        cu,
    )
    for atoms, frag, n in cols:
        loop = rf"for \(int a = 0; a < {atoms}; \+\+a\) " if atoms else ""
        d = re.search(rf"{loop}cypress::mask_causal\({frag}\[[a0]\], (.*?)\);\n", cu)
        assert d, frag
        key0 = "0" if n == "N" else re.fullmatch(r"\(N - (.*)\)", n).group(1)
        out.append((frag, int(atoms or 1), n, d.group(1), key0))
    return out


def _run_masks(tmp_path: Path, cu: str, rows: int, wgs: int, keys: int, cases) -> dict:
    """Compile the kernel's mask statements for the host and run them for every thread of each
    consumer warpgroup: per (statement, case), the set of masked (query row, key)."""
    masks = _masks(cu)
    r = keys // 2  # a thread's fragment of a 64 x keys accumulator atom
    body = []
    for j, (frag, atoms, n, d, key0) in enumerate(masks):
        body.append(f"""
    for (int cw = 0; cw < {wgs}; ++cw)
      for (int tid = 0; tid < 128; ++tid) {{
        threadIdx.x = 128 * (cw + 1) + tid;  // the consumer warpgroups follow the producer's
        float {frag}[{atoms}][{r}] = {{}};
        for (int a = 0; a < {atoms}; ++a) cypress::mask_columns({frag}[a], {n});
        for (int a = 0; a < {atoms}; ++a) cypress::mask_causal({frag}[a], {d});
        const int key0 = {key0};
        for (int a = 0; a < {atoms}; ++a)
          for (int i = 0; i < {r}; ++i)
            if (std::isinf({frag}[a][i])) {{
              const int lane = tid % 32, warp = tid / 32;  // the wgmma m64nNk16 accumulator layout
              const int row = b2 * {rows} + cw * {rows // wgs} + 64 * a + 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
              const int col = key0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
              printf("{j} %d %d\\n", row, col);
            }}
      }}""")
    src = tmp_path / "masks.cpp"
    src.write_text(
        "#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n"
        "#define __device__\n#define __forceinline__ inline\n"
        "struct { unsigned x; } threadIdx;\nnamespace cypress {\n"
        f"{_helper('mask_columns')}{_helper('mask_causal')}}}\n"
        "int main(int argc, char** argv) {\n"
        "  const int N = atoi(argv[1]), causal = atoi(argv[2]), b2 = atoi(argv[3]), kb = atoi(argv[4]);\n"
        "  (void)kb;\n" + "".join(body) + "\n}\n"
    )
    exe = tmp_path / "masks"
    subprocess.run([CXX, "-std=c++17", "-O1", str(src), "-o", str(exe)], check=True)
    got = {}
    for case in cases:
        run = subprocess.run(
            [str(exe), *map(str, case)], check=True, capture_output=True, text=True
        )
        for j in range(len(masks)):
            got[j, case] = set()
        for line in run.stdout.splitlines():
            j, row, col = map(int, line.split())
            got[j, case].add((row, col))
    return {"masks": masks, "got": got}


def _expected(cu_key0: str, case, rows: int, keys: int) -> set:
    """Attention's masks on one S tile: keys at or past N, and (causal) keys after the row."""
    n, causal, b2, kb = case
    key0 = eval(cu_key0, {}, {"kb": kb, "N": n})  # the kernel's own expression, e.g. (kb + 1) * 64
    return {
        (q, k)
        for q in range(b2 * rows, (b2 + 1) * rows)
        for k in range(key0, key0 + keys)
        if k >= n or (causal and k > q)
    }


CASES = [
    (1000, 1, 0, 0),
    (1000, 1, 1, 2),
    (1000, 1, 3, 12),
    (333, 1, 1, 3),
    (1000, 0, 2, 14),
    (130, 1, 0, 1),
    (4096, 1, 5, 19),
    (4096, 1, 5, 20),
]


@pytest.mark.parametrize(
    "program, base",
    [
        ("flash_attention3", "h100_d64_pp_staged_persistent.yaml"),
        ("flash_attention2", "h100_d64.yaml"),
    ],
)
@pytest.mark.parametrize("tall", [False, True], ids=["one-atom", "two-atoms"])
def test_each_atom_masks_its_own_rows(tmp_path, mapping_variant, program, base, tall):
    """Every masked element is a key past N or after its query row, and every such key is
    masked, for each consumer warpgroup and atom, on the diagonal tile and off it."""
    mapping = ROOT / "tests/mappings/full" / program / base
    mapping = mapping_variant(mapping, *TALL[0], *TALL[1:]) if tall else mapping
    rows, keys = (256, 64) if tall else (128, 128)
    cu = _build(tmp_path, program, mapping)
    res = _run_masks(tmp_path, cu, rows, 2, keys, CASES)
    assert res["masks"] and all(atoms == (2 if tall else 1) for _, atoms, _, _, _ in res["masks"])
    for (j, case), got in res["got"].items():
        want = _expected(res["masks"][j][4], case, rows, keys)
        assert got == want, (program, j, case, sorted(got ^ want)[:8])


def test_the_old_offset_masks_whole_rows_of_the_second_atom(tmp_path, mapping_variant):
    """Teeth: the diagonal shifted the wrong way for atom 1 (``d - 64·a``, the backend before
    this test) masks every key of rows 64-127 of the first query tile -- softmax rows of
    -inf, NaN outputs on the GPU -- and the comparison above catches it."""
    base = ROOT / "tests/mappings/full" / "flash_attention3" / "h100_d64_pp_staged_persistent.yaml"
    cu = _build(tmp_path, "flash_attention3", mapping_variant(base, *TALL[0], *TALL[1:]))
    bad = cu.replace(") + 64 * a);", ") - 64 * a);")
    assert bad != cu
    res = _run_masks(tmp_path, bad, 256, 2, 64, [(1000, 1, 0, 0)])
    first = next(j for j, m in enumerate(res["masks"]) if m[4] == "0")
    got = res["got"][first, (1000, 1, 0, 0)]
    assert got != _expected("0", (1000, 1, 0, 0), 256, 64)
    assert {(q, k) for q in range(64, 128) for k in range(64)} <= got  # whole rows: -inf, NaN
