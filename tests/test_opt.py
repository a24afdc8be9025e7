"""``cypressc opt FILE.ir -p PASS,PASS`` (issue #36 item 2): passes run on printed IR give
what the pipeline gives; bad input is a located E063 (exit 1) or a usage error (exit 2),
never a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from cypressc.cli import main
from cypressc.ir.printer import print_module
from cypressc.passes.manager import pass_names
from tests import compiled

ROOT = Path(__file__).resolve().parent.parent


def opt(*args: str):
    return CliRunner().invoke(main, ["opt", *args], catch_exceptions=False)


def _snaps(program: str) -> dict:
    return dict(
        compiled.snapshots(
            program, ROOT / "tests/mappings/full" / program / "h100.yaml", until="sync-insertion"
        )
    )


def test_one_pass_and_all_passes_give_the_pipelines_ir(tmp_path):
    snaps = _snaps("flash_attention3")
    ws = tmp_path / "ws.ir"
    ws.write_text(print_module(snaps["warp-specialization"]))
    want = print_module(snaps["sync-insertion"])
    r = opt(str(ws), "-p", "sync-insertion")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == want
    da = tmp_path / "da.ir"
    da.write_text(print_module(snaps["dependence-analysis"]))
    out = tmp_path / "out.ir"
    r = opt(str(da), "-p", ",".join(pass_names()), "-o", str(out))
    assert r.exit_code == 0 and r.stdout == "", r.stderr
    assert out.read_text() == want


def test_without_passes_it_reads_verifies_and_prints(tmp_path):
    text = print_module(_snaps("gemm")["copy-elimination"])
    f = tmp_path / "ce.ir"
    f.write_text(text)
    r = opt(str(f))
    assert r.exit_code == 0 and r.stdout == text


def test_an_unknown_pass_names_the_registered_ones(tmp_path):
    f = tmp_path / "m.ir"
    f.write_text("module @m() sizes() {\n}\n")
    r = opt(str(f), "-p", "vectorization,sync-insertions")
    assert r.exit_code == 2
    assert "no pass 'sync-insertions' (the passes are: " + ", ".join(pass_names()) in r.stderr


def test_a_parse_error_is_located_with_a_caret(tmp_path):
    f = tmp_path / "bad.ir"
    f.write_text("module @m(%A: [64] f32 @GLOBAL) sizes() {\n  %x = tensor [64 f32 @SHARED\n}\n")
    r = opt(str(f), "-p", "vectorization")
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == f"{f}:2:19: error[E063]: expected ',', found 'f32'"
    assert lines[1].endswith("|   %x = tensor [64 f32 @SHARED") and lines[2].endswith("^^^")


def test_an_unknown_tag_is_located_and_names_the_tags(tmp_path):
    """A memory, processor level, role, hazard or sync kind is read into its enum; a
    misspelt one is E063 at the word, listing the words it may be (no longer kept as a
    string that printed back unchanged)."""
    f = tmp_path / "tag.ir"
    f.write_text("module @m(%A: [64] f32 @GLOBAL) sizes() {\n  %x = tensor [64] f32 @SHARDE\n}\n")
    r = opt(str(f), "-p", "vectorization")
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == f"{f}:2:24: error[E063]: '@SHARDE' is not a memory"
    assert lines[1].endswith("|   %x = tensor [64] f32 @SHARDE") and lines[2].endswith("^^^^^^^")
    assert lines[3] == "hint: a memory is one of: @GLOBAL, @SHARED, @REGISTER, @NONE"


def test_a_module_that_does_not_verify_is_the_users_error(tmp_path):
    f = tmp_path / "scope.ir"
    f.write_text(
        "module @m(%A: [64] f32 @GLOBAL) sizes() {\n"
        "  %e1: () = for %k in [0, 2) {} do\n"
        "    %T = tensor [64] f32 @SHARED\n"
        "  %e2: () = copy %A -> %T {}\n"
        "}\n"
    )
    r = opt(str(f))
    assert r.exit_code == 1, r.stderr
    assert f"{f}: error[E063]: the module does not verify: " in r.stderr and "%T" in r.stderr


def test_an_external_is_resolved_through_the_include_folders(tmp_path):
    f = tmp_path / "epi.ir"
    f.write_text(print_module(_snaps("gemm_epilogue")["warp-specialization"]))  # a user C++ leaf
    r = opt(str(f), "-p", "sync-insertion")
    assert r.exit_code == 1 and 'cannot find the header "ops/epilogue.cuh"' in r.stderr
    assert "-I DIR" in r.stderr
    r = opt(str(f), "-p", "sync-insertion", "-I", str(ROOT / "programs"))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == print_module(_snaps("gemm_epilogue")["sync-insertion"])
    assert (
        "external bias_gelu(x: tensor[2, f32], bias: tensor[1, f32]) reads(x, bias) writes(x) = "
        '"cypress_ops::bias_gelu" in "ops/epilogue.cuh"\n'
    ) in r.stdout
