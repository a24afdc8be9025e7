"""Call-external (paper §3.2): user C++ leaf functions through the whole compiler.

programs/gemm_epilogue.cyp calls cypress_ops::bias_gelu / bias_silu (programs/ops/epilogue.cuh)
on each thread's accumulator fragment after the main loop; tests/programs/chain_gemm_softcap.cyp
calls cypress_ops::softcap (programs/ops/scores.cuh, found through ``-I programs``) between the
two wgmmas of each step.  These tests build both with the CLI and read what came out: the
per-element calls, the headers copied into the build directory, the edge-derived wgmma wait
in front of the call, the pointer the kernel reads the bias through, the bindings in the ABI,
and (with nvcc) that ptxas injects no wgmma waits for an external inside the main loop.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.abi.info import KernelInfo
from cypressc.backend import plan as P
from cypressc.backend.emit import header_copy
from cypressc.cli import main
from cypressc.ir import sync as S
from cypressc.ir.printer import event_names
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
EPI = ROOT / "programs" / "gemm_epilogue.cyp"
EPI_MAP = ROOT / "tests/mappings/full" / "gemm_epilogue" / "h100.yaml"
SOFTCAP = ROOT / "tests" / "programs" / "chain_gemm_softcap.cyp"
SOFTCAP_MAP = ROOT / "tests" / "mappings" / "chain_gemm_softcap.yaml"


def _build(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", *args, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_epilogue_calls_the_users_function_per_element(tmp_path):
    out = _build(tmp_path, str(EPI), "-m", str(EPI_MAP))
    cu = (out / "gemm_epilogue.cu").read_text()
    # the header travels with the build directory, byte for byte
    assert (out / "include" / "ops" / "epilogue.cuh").read_text() == (
        ROOT / "programs/ops/epilogue.cuh"
    ).read_text()
    assert '#include "include/ops/epilogue.cuh"' in cu
    # two calls per column pair of the fragment: elements 2j and 2j + 1, each with its bias element
    assert "cypress_ops::bias_gelu(Cacc_reg[0][2 * j + 0], v1_0);" in cu
    assert "cypress_ops::bias_gelu(Cacc_reg[0][2 * j + 1], v1_1);" in cu
    assert "bias_silu" not in cu.split("// ---- prologue")[1]
    # bias is read through a pointer (not TMA), guarded by its extent N
    assert "const float* __restrict__ bias" in cu
    assert re.search(r"const float v1_0 = .*< N \? bias\[", cu)
    assert not any(m.startswith("tm_bias") for m in re.findall(r"CUtensorMap (\w+)", cu))
    # the wgmma group retires before the call reads the accumulator: the last wgmma wait before
    # the call realizes an edge into the call's event (read from the plan), and prints before it
    ev = re.search(r"// (%e\d+): bias_gelu\(\)", cu).group(1)
    m = compiled.snapshots(EPI, EPI_MAP)[-1][1]
    names, stmts = event_names(m), m.kernel.consumer.all()
    call = next(st for st in stmts if isinstance(st, P.External))
    assert call.event == ev
    last_wait = [
        st
        for st in stmts[: stmts.index(call)]
        if isinstance(st, P.Sync) and isinstance(st.op, S.WaitGroup) and st.op.unit == "wgmma"
    ][-1]
    assert last_wait.op.pending == 0
    assert any(
        names.get(e.dst) == ev and e.hazard == "raw" and e.tensor == "Cacc_reg"
        for e in last_wait.op.edges
    )
    before = cu[: cu.index(f"// {ev}: bias_gelu()")]
    assert "cypress::wait<0>();" in before[before.rindex("for (int kb") :]
    info = json.loads((out / "gemm_epilogue.json").read_text())
    assert info["bindings"] == {"T": "f16", "BIAS": "f32", "ACT": "bias_gelu"}
    assert KernelInfo.from_dict(info).bindings == info["bindings"]


def test_choice_and_dtype_parameters_pick_the_function_and_the_bias_type(tmp_path):
    out = _build(
        tmp_path, str(EPI), "-m", str(EPI_MAP), "--param", "ACT=bias_silu", "--dtype", "BIAS=bf16"
    )
    cu = (out / "gemm_epilogue.cu").read_text()
    assert "cypress_ops::bias_silu(Cacc_reg[0][2 * j + 0], v1_0);" in cu
    assert "cypress_ops::bias_gelu(" not in cu
    assert "const __nv_bfloat16* __restrict__ bias" in cu
    # read element by element: 2-byte alignment is what the launcher asks of it
    assert "if (reinterpret_cast<uintptr_t>(bias) & 1) return cudaErrorInvalidValue;" in cu
    assert json.loads((out / "gemm_epilogue.json").read_text())["bindings"]["ACT"] == "bias_silu"


def test_a_choice_binding_outside_the_list_is_located(tmp_path):
    r = CliRunner().invoke(
        main, ["check", str(EPI), "-m", str(EPI_MAP), "--param", "ACT=bias_relu"]
    )
    assert r.exit_code == 1
    assert (
        "error[E015]: --param ACT=bias_relu: 'ACT' may only be bias_gelu or bias_silu" in r.output
    )
    assert "ACT = choice(bias_gelu, bias_silu)" in r.output


def test_include_dirs_find_headers_outside_the_programs_folder(tmp_path):
    r = CliRunner().invoke(main, ["check", str(SOFTCAP), "-m", str(SOFTCAP_MAP)])
    assert (
        r.exit_code == 1
        and "error[E003]: include() names 'ops/scores.cuh', which does not exist" in r.output
    )
    assert "E014" not in r.output  # the external under a missing include is not reported again
    r = CliRunner().invoke(
        main, ["check", str(SOFTCAP), "-m", str(SOFTCAP_MAP), "-I", str(ROOT / "programs")]
    )
    assert r.exit_code == 0, r.output


def test_softcap_runs_between_the_two_wgmmas_of_a_step(tmp_path):
    out = _build(tmp_path, str(SOFTCAP), "-m", str(SOFTCAP_MAP), "-I", str(ROOT / "programs"))
    cu = (out / "chain_gemm_softcap.cu").read_text()
    loop = cu[cu.index("for (int kb") :]
    call = loop.index("cypress_ops::softcap(")
    # after S's wgmma retired (wait<0>), before the conversion that feeds P to the second wgmma
    assert loop.rindex("cypress::wait<0>();", 0, call) < call < loop.index("cypress::acc_to_a<")
    assert "float(30.0)" in loop[call : call + 80]
    assert (out / "include" / "ops" / "scores.cuh").is_file()


def test_header_copies_stay_inside_the_build_directory():
    assert header_copy("ops/epilogue.cuh") == "include/ops/epilogue.cuh"
    assert header_copy("../../lib/x.cuh") == "include/lib/x.cuh"
    assert header_copy("/abs/y.cuh") == "include/abs/y.cuh"


def test_without_a_numpy_reference_the_schedule_is_checked_and_the_values_are_not(tmp_path):
    (tmp_path / "ops").mkdir()
    shutil.copy(
        ROOT / "programs/ops/epilogue.cuh", tmp_path / "ops" / "epilogue.cuh"
    )  # no epilogue.py
    shutil.copy(EPI, tmp_path / "gemm_epilogue.cyp")
    r = CliRunner().invoke(
        main,
        [
            "explain",
            str(tmp_path / "gemm_epilogue.cyp"),
            "-m",
            str(ROOT / "tests/mappings/gemm_epilogue_small.yaml"),
            "--check-schedule",
            "--schedules",
            "3",
        ],
    )
    assert r.exit_code == 0, r.output
    assert ": clean (3 schedule(s)" in r.output
    assert "note: external bias_gelu() has no NumPy reference" in r.output
    assert "bias_silu" not in r.output  # declared, but not called under this binding


def test_kernel_info_bindings_round_trip_and_are_validated(tmp_path):
    d = json.loads(
        (_build(tmp_path, str(EPI), "-m", str(EPI_MAP)) / "gemm_epilogue.json").read_text()
    )
    assert KernelInfo.from_dict(d).to_dict()["bindings"] == d["bindings"]
    assert KernelInfo.from_dict({k: v for k, v in d.items() if k != "bindings"}).bindings == {}
    with pytest.raises(ValueError, match="'bindings' must map parameter names to strings"):
        KernelInfo.from_dict({**d, "bindings": {"T": 3}})


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_an_external_in_the_main_loop_leaves_ptxas_no_wgmma_wait_to_inject(tmp_path, clean_ptxas):
    out = _build(tmp_path, str(SOFTCAP), "-m", str(SOFTCAP_MAP), "-I", str(ROOT / "programs"))
    clean_ptxas(out, "libchain_gemm_softcap.so")
