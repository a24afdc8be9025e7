"""programs/flash_attention3.cyp (issue #12): FlashAttention-2's program with its main loop in
FlashAttention-3's software-pipelined order, and no synchronization written.  What the compiler
must infer from it: the two GEMMs of a step committed as separate wgmma groups, the softmax
waiting for the first only (``wait<1>``), the K stage released after that wait and the V stage
after the second, P kept in registers across iterations (a carried value: the snapshot alias
and register rotation of copy elimination), the peeled first step and last O += P·V lowered
outside the loop; the same interface and the same values as flash_attention2 on the same
inputs; (with nvcc) no spills or ptxas-injected waits."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cypressc.abi.info import KernelInfo
from cypressc.cli import main
from cypressc.ir.check import random_inputs, run_module
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests.budget import pick
from tests.compiled import rendered

ROOT = Path(__file__).resolve().parents[2]
FA3 = ROOT / "programs" / "flash_attention3.cyp"
MAPPINGS = sorted((ROOT / "tests/mappings/full" / "flash_attention3").glob("h100_*.yaml"))


def _build(
    tmp_path: Path, program: str, mapping: Path, *extra: str
) -> tuple[str, KernelInfo, Path]:
    out = tmp_path / f"{program}-{mapping.stem}"
    r = CliRunner().invoke(
        main,
        [
            "build",
            str(ROOT / "programs" / f"{program}.cyp"),
            "-m",
            str(mapping),
            "-o",
            str(out),
            *extra,
        ],
    )
    assert r.exit_code == 0, r.output
    info = KernelInfo.from_dict(json.loads((out / f"{program}.json").read_text()))
    return (out / f"{program}.cu").read_text(), info, out


def _consumer_loop(cu: str) -> list[str]:
    """The statements of the consumer's main loop (comments and pragmas dropped)."""
    body = cu[cu.index("consumer warpgroups") :]
    body = body[body.index("for (int kb = 0; kb < num_k; ++kb) {") :]
    lines = [ln.strip() for ln in body.splitlines()[1:]]
    out = []
    for ln in lines:
        if ln.startswith("pipe.advance();"):
            return out
        if ln and not ln.startswith(("//", "#pragma")):
            out.append(ln)
    raise AssertionError("no end of the main loop")


def test_every_mapping_lowers():
    assert {m.stem for m in MAPPINGS} >= {
        "h100_d64",
        "h100_d128",
        "h100_d128_wg3",
        "h100_d64_w64",
        "h100_d64_p3",
    }
    for m in MAPPINGS:  # everything `check` does, on the session's compile (tests/compiled.py)
        assert rendered(FA3, m).files
    m = (
        ROOT / "tests/mappings/full" / "flash_attention3" / "h100.yaml"
    )  # and through the command, as a user checks one
    r = CliRunner().invoke(main, ["check", str(FA3), "-m", str(m)])
    assert r.exit_code == 0, (m.name, r.output)


def test_the_program_writes_no_synchronization():
    src = FA3.read_text()
    code = "\n".join(ln.split("#")[0] for ln in src.split('"""', 2)[2].splitlines())
    for word in ("wait", "barrier", "fence", "commit", "stage", "producer", "consumer", "pipeline"):
        assert word not in code, word


def test_the_steps_overlap_as_flash_attention3_places_them_by_hand(tmp_path):
    cu, _, _ = _build(
        tmp_path,
        "flash_attention3",
        ROOT / "tests/mappings/full" / "flash_attention3" / "h100_d128.yaml",
    )
    loop = _consumer_loop(cu)

    def at(pred, what):
        hits = [i for i, ln in enumerate(loop) if pred(ln)]
        assert len(hits) == 1, (what, hits, loop)
        return hits[0]

    qk = at(lambda ln: "cypress::wgmma<" in ln, "S = Q K^T")
    pv = at(lambda ln: "cypress::wgmma_rs<" in ln, "O += P V")
    commits = [i for i, ln in enumerate(loop) if ln.startswith("cypress::commit();")]
    w1 = at(lambda ln: ln.startswith("cypress::wait<1>();"), "wait_group 1")
    w0 = at(lambda ln: ln.startswith("cypress::wait<0>();"), "wait_group 0")
    k_release = at(lambda ln: "arrive(&empty_K_smem" in ln, "K release")
    v_release = at(lambda ln: "arrive(&empty_V_smem" in ln, "V release")
    mask = at(lambda ln: "mask_columns" in ln, "mask")
    row_max = at(lambda ln: "warpgroup_row_max" in ln, "row max")
    rescale = at(lambda ln: "scale_rows(Oacc_reg" in ln, "O *= alpha")
    convert = at(lambda ln: "acc_to_a" in ln, "P = T(S)")
    # one group per GEMM, both issued before any wait: O += P V of step k runs on the Tensor
    # Core while the softmax of step k + 1 runs
    assert len(commits) == 2 and qk < commits[0] < pv < commits[1] < w1
    assert w1 < k_release < mask < row_max < w0 < v_release < rescale < convert


def test_the_interface_and_requirements_are_flash_attention2s(tmp_path):
    cu2, info2, _ = _build(
        tmp_path,
        "flash_attention2",
        ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d64.yaml",
    )
    cu3, info3, _ = _build(
        tmp_path,
        "flash_attention3",
        ROOT / "tests/mappings/full" / "flash_attention3" / "h100_d64.yaml",
    )
    assert [(p.name, p.dtype) for p in info3.params] == [(p.name, p.dtype) for p in info2.params]
    assert info3.sizes == info2.sizes and info3.floats == info2.floats
    assert [r.why for r in info3.requires] == [r.why for r in info2.requires]
    # the prologue's S = Q K[0]^T and the epilogue's O += P V[last] are the loop's products:
    # the useful flops are counted once
    assert info3.flops == info2.flops
    # the loop runs all steps but the peeled first: one trip fewer per tile
    trip = re.search(r"const int num_k = (.*);", cu3).group(1)
    assert trip == "(" + re.search(r"const int num_k = (.*);", cu2).group(1) + " - 1)"


def _final(program: str, mapping: str):
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{program}.cyp")),
        load_mapping(ROOT / mapping),
    )
    return compile_module(tree, until="warp-specialization")[-1][1]


@pytest.mark.parametrize("causal", [0, 1])
def test_flash_attention2_and_3_agree_on_the_same_inputs(causal):
    """The pipelined order changes no value: both programs, compiled through warp
    specialization, run in the interpreter on the same inputs (sequentially and in a random
    order the events allow) give the same O and LSE."""
    sizes = dict(B=1, H=2, HK=1, M=40, N=72, D=12, causal=causal, scale=0.3)
    m2 = _final("flash_attention2", "tests/mappings/flash_attention2_small.yaml")
    m3 = _final("flash_attention3", "tests/mappings/flash_attention3_small.yaml")
    inputs = random_inputs(m2, sizes, seed=5)
    for seed in pick((None,), (None, 1)):  # a random order too under make test-full
        o2 = run_module(m2, sizes, inputs, ["O", "LSE"], seed)
        o3 = run_module(m3, sizes, inputs, ["O", "LSE"], seed)
        for k in ("O", "LSE"):
            assert not np.isnan(o3[k]).any()
            assert np.allclose(
                o2[k].astype(np.float64), o3[k].astype(np.float64), rtol=1e-3, atol=1e-3
            ), k


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("mapping", ["h100_d128", "h100_d64_wg3"])
def test_the_kernel_compiles_without_spills(tmp_path, mapping, clean_ptxas):
    _, _, out = _build(
        tmp_path,
        "flash_attention3",
        ROOT / "tests/mappings/full" / "flash_attention3" / f"{mapping}.yaml",
        "--dtype",
        "T=bf16",
    )
    clean_ptxas(out, "libflash_attention3.so")
