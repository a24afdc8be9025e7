"""The ``cypressc`` command line: check / explain on the bundled programs, help texts,
exit codes (0 ok, 1 user error, 2 usage, 70 internal error)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = {
    "gemm": (11, 4, 14, 4),
    "batched_gemm": (12, 5, 15, 5),
    "dual_gemm": (14, 5, 26, 5),
    "gemm_reduction": (34, 11, 23, 7),
}


def cli(*args: str, chdir: bool = True):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", PROGRAMS)
def test_check_ok(name):
    prog, mapping = f"programs/{name}.cyp", f"tests/mappings/full/{name}/h100.yaml"
    r = cli("check", prog, "-m", mapping)
    assert r.exit_code == 0, r.stderr
    variants, tasks, nodes, used = PROGRAMS[name]
    assert r.stdout == (
        f"ok: {prog} with {mapping}: {variants} variants of {tasks} tasks, {nodes} instantiated "
        f"task(s) over {used} task(s) on h100; 9 passes and the CUDA backend accept it "
        f"(6 files of build/{name}, none written)\n"
    )
    assert r.stderr == ""


@pytest.mark.parametrize("name", PROGRAMS)
def test_explain_prints_the_task_tree(name):
    r = cli("explain", f"programs/{name}.cyp", "-m", f"tests/mappings/full/{name}/h100.yaml")
    # the tree comes first; the IR of every pass follows (or a located error where a pass
    # or the backend refuses the program)
    assert r.exit_code in (0, 1) and "internal compiler error" not in r.stderr, r.stderr
    nodes = PROGRAMS[name][2]
    lines = r.stdout.splitlines()
    assert lines[0] == f"task tree (h100, entrypoint {name}_host):"
    assert lines[1].startswith(f"{name}_host: variant {name}_host on HOST (")
    tree = lines[1 : 1 + nodes]
    assert all(re.match(r"^[ │├└─]*\w+: variant \w+ on [A-Z]+ \(", line) for line in tree), tree
    assert len(lines) == 1 + nodes or not lines[1 + nodes].startswith(("│", "├", "└", " "))
    block = next(line for line in tree if " on BLOCK " in line)
    assert re.search(r"\[warpspecialize=True, pipeline=\d, smem_limit=232448", block)
    assert r.exit_code == 0, r.stderr
    assert "// ---- after warp-specialization" in r.stdout
    if "warning[E050]" in r.stderr:  # the backend refuses it; every IR pass still explains it
        assert "// ---- after cuda-lowering" not in r.stdout
    else:
        assert "// ---- after cuda-lowering" in r.stdout


def test_explain_dual_gemm_tree_exact():
    r = cli("explain", "programs/dual_gemm.cyp", "-m", "tests/mappings/full/dual_gemm/h100.yaml")
    assert r.stdout.splitlines()[1:9] == [
        "dual_gemm_host: variant dual_gemm_host on HOST (D@GLOBAL, A@GLOBAL, B1@GLOBAL, B2@GLOBAL) {U=128, V=128}",
        (
            "└── dual_gemm_block: variant dual_gemm_block on BLOCK (D@GLOBAL, A@GLOBAL, B1@GLOBAL, B2@GLOBAL) "
            "{W=64} [warpspecialize=True, pipeline=4, smem_limit=232448]"
        ),
        "    ├── clear_block: variant clear_tile on BLOCK (C@NONE) {WGS=2}",
        (
            "    │   └── clear_warpgroup: variant clear_inner on WARPGROUP (C@NONE) "
            "{PIECES=4, PROC=WARP, MMA=WGMMA_64x128x16}"
        ),
        "    │       └── clear_warp: variant clear_inner on WARP (C@NONE) {PIECES=32, PROC=THREAD, MMA=WGMMA_64x128x16}",
        "    │           └── clear_thread: variant clear_thread on THREAD (C@REGISTER)",
        "    ├── clear_block: variant clear_tile on BLOCK (C@NONE) {WGS=2}",
        (
            "    │   └── clear_warpgroup: variant clear_inner on WARPGROUP (C@NONE) "
            "{PIECES=4, PROC=WARP, MMA=WGMMA_64x128x16}"
        ),
    ]


def test_explain_no_tree():
    r = cli("explain", "programs/gemm.cyp", "-m", "tests/mappings/full/gemm/h100.yaml", "--no-tree")
    assert r.exit_code == 0 and "task tree" not in r.stdout


def test_explain_reports_errors_like_check():
    r = cli(
        "explain",
        "tests/corpus/programs/unknown_task.cyp",
        "-m",
        "tests/mappings/full/gemm/h100.yaml",
    )
    assert r.exit_code == 1
    assert r.stderr.startswith("tests/corpus/programs/unknown_task.cyp:4:5: error[E021]: ")


def test_program_and_mapping_errors_are_reported_together():
    r = cli(
        "check",
        "tests/corpus/programs/unknown_atom.cyp",
        "-m",
        "tests/corpus/mappings/unknown_key.yaml",
    )
    assert r.exit_code == 1
    assert (
        "error[E036]" in r.stderr and "error[M002]" in r.stderr and r.stderr.endswith("2 errors\n")
    )


def test_warnings_do_not_fail():
    r = cli("check", "programs/gemm.cyp", "-m", "tests/corpus/mappings/unreachable_instance.yaml")
    assert r.exit_code == 0 and "warning[W001]" in r.stderr and r.stdout.startswith("ok: ")


def test_help_texts():
    r = cli("--help")
    assert r.exit_code == 0
    assert "compile Cypress task programs to Hopper CUDA" in r.stdout
    assert "cypressc check   programs/gemm.cyp -m mappings/gemm/h100.yaml" in r.stdout
    for cmd in ("check", "explain"):
        assert cmd in r.stdout
    r = cli("check", "--help")
    assert (
        r.exit_code == 0
        and "Check PROGRAM and MAPPING as `build` would" in r.stdout
        and "-m, --mapping" in r.stdout
    )
    r = cli("explain", "-h")
    assert r.exit_code == 0 and "the task tree" in r.stdout and "--no-tree" in r.stdout


def test_version():
    r = cli("--version")
    assert r.exit_code == 0 and "0.1.0" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["check", "programs/gemm.cyp"],
        ["check"],
        ["frobnicate"],
        ["check", "programs", "-m", "tests/mappings/full/gemm/h100.yaml"],
    ],
)
def test_usage_errors_exit_2(args):
    r = cli(*args)
    assert r.exit_code == 2 and "Usage:" in r.stderr


def _boom(*_a, **_k):
    raise RuntimeError("boom")


def test_internal_error_exits_70(monkeypatch):
    monkeypatch.setattr("cypressc.mapping.tasktree.instantiate", _boom)
    r = cli("check", "programs/gemm.cyp", "-m", "tests/mappings/full/gemm/h100.yaml")
    assert r.exit_code == 70
    assert r.stderr.startswith(
        "internal compiler error while processing programs/gemm.cyp "
        "tests/mappings/full/gemm/h100.yaml: RuntimeError: boom"
    )
    assert "re-run with --debug" in r.stderr and "Traceback" not in r.stderr


def test_internal_error_debug_shows_traceback(monkeypatch):
    monkeypatch.setattr("cypressc.mapping.tasktree.instantiate", _boom)
    r = cli("--debug", "explain", "programs/gemm.cyp", "-m", "tests/mappings/full/gemm/h100.yaml")
    assert (
        r.exit_code == 70
        and "Traceback (most recent call last)" in r.stderr
        and "RuntimeError: boom" in r.stderr
    )


@pytest.mark.parametrize(
    "prog,mapping,rc,prefix",
    [
        ("programs/gemm.cyp", "tests/mappings/full/gemm/h100.yaml", 0, ""),
        (
            "tests/corpus/programs/prange_not_disjoint.cyp",
            "tests/mappings/full/gemm/h100.yaml",
            1,
            "tests/corpus/programs/prange_not_disjoint.cyp:8:26: error[E030]: writes to 'yp' are not provably disjoint",
        ),
        (
            "programs/gemm.cyp",
            "tests/corpus/mappings/register_at_block.yaml",
            1,
            "tests/corpus/mappings/register_at_block.yaml:27:12: error[M015]: REGISTER is not visible from BLOCK",
        ),
    ],
)
def test_real_subprocess(prog, mapping, rc, prefix):
    r = subprocess.run(
        [sys.executable, "-m", "cypressc.cli", "check", prog, "-m", mapping],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert r.returncode == rc, r.stderr
    assert r.stderr.startswith(prefix) and "Traceback" not in r.stderr


def test_dtype_binding_reaches_the_build(tmp_path):
    """--dtype T=bf16 changes the element type of every T tensor and nothing else."""
    import json

    for dt in ("f16", "bf16"):
        r = cli(
            "build",
            "programs/gemm.cyp",
            "-m",
            "tests/mappings/full/gemm/h100.yaml",
            "--dtype",
            f"T={dt}",
            "-o",
            str(tmp_path / dt),
        )
        assert r.exit_code == 0, r.stderr
        params = json.loads((tmp_path / dt / "gemm.json").read_text())["params"]
        assert [p["dtype"] for p in params] == [dt, dt, dt]
    f16, bf16 = ((tmp_path / d / "gemm.cu").read_text() for d in ("f16", "bf16"))
    assert "__nv_bfloat16" not in f16 and "cypress::wgmma<256, __nv_bfloat16>" in bf16


@pytest.mark.parametrize(
    "value, rc, frag",
    [
        ("T=f32", 1, "error[E013]: --dtype T=f32: 'T' may only be f16 or bf16"),
        ("U=bf16", 1, "error[E013]: --dtype binds 'U'"),
        ("T", 2, "'T': write NAME=VALUE"),
        ("=bf16", 2, "write NAME=VALUE"),
    ],
)
def test_dtype_binding_errors(value, rc, frag):
    r = cli(
        "check", "programs/gemm.cyp", "-m", "tests/mappings/full/gemm/h100.yaml", "--dtype", value
    )
    assert r.exit_code == rc and frag in r.stderr, r.stderr


def test_dtype_bound_twice_is_a_usage_error():
    r = cli(
        "check",
        "programs/gemm.cyp",
        "-m",
        "tests/mappings/full/gemm/h100.yaml",
        "--dtype",
        "T=f16",
        "--dtype",
        "T=bf16",
    )
    assert r.exit_code == 2 and "bound twice" in r.stderr


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("gemm", "4096 4096 4096"),
        ("batched_gemm", "8 4096 4096 4096"),
        ("gemm_reduction", "4096 4096 4096"),
    ],
)
def test_build_suggests_a_run_that_fits(name, sizes, tmp_path):
    """The suggested harness run uses 4096 for tile dimensions and 8 for a batch size (4096
    batches of 4096² would need hundreds of GB)."""
    r = cli(
        "build",
        f"programs/{name}.cyp",
        "-m",
        f"tests/mappings/full/{name}/h100.yaml",
        "-o",
        str(tmp_path / "b"),
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout.rstrip().endswith(f"/{name} {sizes}")


def test_explain_shows_every_pass_before_the_one_that_refuses(tmp_path):
    """A 24-column B tile (no swizzle mode divides its 48-byte rows): sync-insertion and
    cluster-multicast still run (and are printed), cuda-lowering refuses (a warning in explain, an error when it is asked
    for with --after)."""
    m = tmp_path / "v24.yaml"
    m.write_text(
        (ROOT / "tests/mappings/full/gemm/h100.yaml")
        .read_text()
        .replace("{U: 128, V: 256}", "{U: 128, V: 24}")
        .replace("WGMMA_64x256x16", "WGMMA_64x24x16")
    )
    r = cli("explain", "programs/gemm.cyp", "-m", str(m), "--no-tree")
    assert r.exit_code == 0, r.stderr
    shown = re.findall(r"^// ---- after (\S+)", r.stdout, re.MULTILINE)
    assert shown[-2:] == ["sync-insertion", "cluster-multicast"] and "cuda-lowering" not in shown
    assert "warning[E050]" in r.stderr and "24 columns" in r.stderr
    r = cli("explain", "programs/gemm.cyp", "-m", str(m), "--no-tree", "--after", "cuda-lowering")
    assert r.exit_code == 1 and "error[E050]" in r.stderr


def test_a_reader_that_leaves_early_is_no_internal_error(tmp_path):
    """`cypressc explain … | head -2`, as a user pipes it: the command stops quietly with 141
    (128 + SIGPIPE, what a shell reports for a filter whose reader left; it was an internal
    compiler error, exit 70)."""
    import subprocess
    import sys

    err = tmp_path / "err"
    r = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m cypressc.cli explain programs/flash_attention3.cyp "
            f"-m mappings/flash_attention3/h100.yaml 2>{err} | head -2 >/dev/null; "
            "echo ${PIPESTATUS[0]}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = err.read_text()
    assert r.stdout.strip() == "141", (r.stdout, text)
    assert "internal compiler error" not in text and "Traceback" not in text, text
