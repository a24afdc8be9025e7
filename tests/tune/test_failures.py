"""Why a candidate failed, as the tune report and bench/tune_gpu.py's JSON show it: the
output comparison (CPU tensors), the classification of the runtime's real errors, and the
FAILED lines of the closing note on a real search result."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc import runtime
from cypressc.build import render_build
from cypressc.cli.common import load_program as _front_end
from cypressc.tuner import report
from cypressc.tuner.search import Candidate, Options, Result
from cypressc.tuner.space import derive_space
from cypressc.tuner.verdicts import FAILURE_KINDS, compare, failure, failure_text

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "tests/mappings/full/gemm/h100_plain.yaml"
torch = pytest.importorskip("torch")


def outputs():
    g = torch.Generator().manual_seed(3)
    ref = {"C": torch.randn(64, 48, generator=g) * 8, "y": torch.randn(64, generator=g)}
    return ref, {"C": ref["C"].half(), "y": ref["y"].clone()}  # f16 rounding of C only


def test_a_rounding_error_passes():
    ref, got = outputs()
    v = compare(torch, got, ref)
    assert v["ok"] and v["nan"] == 0 and v["wrong"] == 0 and v["elements"] == 64 * 48 + 64
    assert 0 < v["rel"] < 1e-3 and "where" not in v


def test_a_wrong_tile_is_counted_and_located():
    ref, got = outputs()
    got["C"][16:20, 32:48] += 100.0
    v = compare(torch, got, ref)
    assert not v["ok"] and v["wrong"] == 4 * 16 and v["nan"] == 0
    assert v["where"] == "C[16..19, 32..47]"
    assert v["first"]["tensor"] == "C" and v["first"]["index"] == [16, 32]
    assert v["first"]["got"] == pytest.approx(v["first"]["want"] + 100.0, abs=0.1)


def test_one_wrong_element_fails_although_the_norm_passes():
    ref, got = outputs()
    rms = float(ref["C"].norm()) / (64 * 48) ** 0.5
    got["C"][7, 9] += 0.5 * rms
    v = compare(torch, got, ref)
    assert v["rel"] < 1e-2  # the norm alone would have passed it
    assert not v["ok"] and v["wrong"] == 1 and v["where"] == "C[7..7, 9..9]"


def test_unwritten_elements_are_nan_counted_apart_from_the_norm():
    ref, got = outputs()
    got["y"][-3:] = float("nan")
    v = compare(torch, got, ref)
    assert not v["ok"] and v["nan"] == 3 and v["wrong"] == 3 and v["where"] == "y[61..63]"
    assert v["rel"] == v["rel"] and v["rel"] < 1e-3  # finite: the NaN elements are left out of it


def test_outputs_the_reference_does_not_name_are_skipped():
    ref, got = outputs()
    v = compare(torch, {"C": got["C"]}, ref)
    assert v["ok"] and v["elements"] == 64 * 48


def _info(tmp_path):
    r = render_build(_front_end(str(ROOT / "programs/gemm.cyp"), str(PLAIN)))
    (tmp_path / "gemm.json").write_text(r.files["gemm.json"])
    return runtime.KernelInfo.load_json(tmp_path / "gemm.json")


def test_the_runtimes_errors_are_classified(tmp_path):
    info = _info(tmp_path)
    with pytest.raises(runtime.KernelError) as e:  # C is M x N, A is M x K: A's rows disagree
        runtime.infer_sizes(info, [(64, 32), (65, 16), (16, 32)])
    rec = failure(None, e.value, label="x")
    assert rec["kind"] == "refused" and rec["by"] == "runtime" and not rec["ok"]
    assert rec["error"].startswith("refused by the runtime: KernelError: ")

    refusal = runtime.LaunchError(
        "gemm_launch(M=1) returned 1", 1, "cudaErrorInvalidValue", "gemm", {"M": 1}
    )
    rec = failure(None, refusal, label="x")
    assert (rec["kind"], rec["by"], rec["cuda"]) == ("refused", "launcher", "cudaErrorInvalidValue")
    oor = runtime.LaunchError(
        "gemm_launch returned 701", 701, runtime.cuda_error_name(701), "gemm", {}
    )
    rec = failure(None, oor, label="x")
    assert rec["kind"] == "launch_error" and rec["code"] == 701
    assert rec["error"].startswith("launch error cudaErrorLaunchOutOfResources: ")

    crash = RuntimeError(
        "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ..."
    )
    rec = failure(None, crash, label="x", fatal=True)
    assert rec["kind"] == "crash" and rec["fatal"]
    assert (
        rec["error"]
        == "crashed: RuntimeError: CUDA error: an illegal memory access was encountered "
        "(worker restarted)"
    )
    assert failure(None, FileNotFoundError("no libgemm.so"), label="x")["kind"] == "load_error"
    assert failure(None, ValueError("odd"), label="x")["kind"] == "error"
    rec = failure(
        "timeout", TimeoutError("the kernel did not finish within 5 s"), label="x", fatal=True
    )
    assert (
        rec["error"]
        == "hangs: TimeoutError: the kernel did not finish within 5 s (worker restarted)"
    )


def test_failure_texts():
    rec = failure(
        "wrong",
        None,
        label="x",
        rel=0.25,
        nan=0,
        wrong=64,
        elements=3136,
        where="C[16..19, 32..47]",
        first={"tensor": "C", "index": [16, 32], "got": 101.5, "want": 1.5},
    )
    assert rec["error"] == (
        "wrong result: rel error 0.25, 0 NaN, 64 of 3136 elements wrong, in C[16..19, 32..47]; "
        "first at C[16, 32]: got 101.5, want 1.5 (the compiler accepted this mapping: a miscompile)"
    )
    died = {"kind": "crash", "exit": -11, "stderr": "loading\nSegmentation fault (core dumped)\n"}
    assert (
        failure_text(died)
        == "crashed: the worker process died (exit -11): Segmentation fault (core dumped)"
    )
    assert set(FAILURE_KINDS) >= {"refused", "launch_error", "crash", "timeout", "wrong"}


def test_the_closing_note_lists_each_failure_with_its_knobs():
    tree = _front_end(str(ROOT / "programs/gemm.cyp"), str(PLAIN))
    sp = derive_space(tree, PLAIN.read_text())
    base = Candidate(
        dict(sp.base),
        PLAIN.read_text(),
        "base",
        1,
        baseline=True,
        verdict={"ok": True},
        dir="/k/base",
        timing={"ok": True, "tflops": 500.0, "ms": 0.3},
    )
    vals = dict(sp.base, U=256, WGS=4, warpspecialize=True)
    hung = Candidate(
        vals,
        sp.render(vals),
        "hung",
        1,
        verdict={"ok": True},
        dir="/k/hung",
        timing={
            k: v
            for k, v in failure(
                "timeout", TimeoutError("no completion in 5 s"), label="hung"
            ).items()
            if k not in ("event", "label")
        },
    )
    bug = Candidate(
        dict(sp.base, pipeline=5),
        "t",
        "bug",
        1,
        verdict={"ok": False, "code": "internal", "message": "KeyError: 'x'"},
    )
    res = Result(
        sp,
        Options(sizes={"M": 64, "N": 64, "K": 64}),
        [base, hung, bug],
        "GPU",
        {"prune": 1.0, "compile": 2.0, "timing": 3.0, "total": 6.0},
    )
    lines = report.failure_lines(res)
    assert lines == [
        "FAILED (timeout) U=256 V=128 W=64 WGS=4 MMA=64x128 copy_block.D=GLOBAL pipeline=3 warpspecialize "
        "persistent=default raster=default mma_in_flight=default [hung]: hangs: TimeoutError: no completion in 5 s "
        "(worker restarted)",
        "FAILED (internal) U=128 V=128 W=64 WGS=2 MMA=64x128 copy_block.D=GLOBAL pipeline=5 warpspecialize=default "
        "persistent=default raster=default mma_in_flight=default [bug]: KeyError: 'x'",
    ]
    assert report.closing_note(res).endswith("\n" + "\n".join(lines))
    assert res.counts()["failed_check"] == 1
    fs = report.failures(res)
    assert [(f["label"], f["stage"], f["kind"]) for f in fs] == [
        ("hung", "check", "timeout"),
        ("bug", "prune", "internal"),
    ]
