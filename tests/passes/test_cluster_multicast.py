"""Thread-block clusters with TMA multicast (issue #39, pass ``cluster-multicast``): the
mapping's ``cluster`` groups neighbouring blocks; a main-loop TMA copy whose tile does not
depend on a clustered grid dimension is issued once by the first block along it and multicast
into every block; the releases of its stages reach every block (``arrive.cluster``), whose
empty barrier counts them all.  The filecheck cases (tests/filecheck/cluster-multicast/) show
the IR on a small GEMM, with two teeth; these show the CUDA it becomes, the refusals on real
programs, the masks, the tuner's knob and a ptxas build.  The GPU runs (sanitizers, timing)
are bench/cluster_gpu.sh, bench/NOTES.md session 30."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.backend.emit_stmt import multicast_mask
from cypressc.build import render_build
from cypressc.cli import main
from cypressc.diagnostics import CypressError
from cypressc.ir import concurrent as C
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import map_ops
from cypressc.ir.kinds import BarrierKind
from cypressc.ir.schedule_check import check_schedules
from cypressc.ir.subst import walk_ops
from cypressc.pipeline import compile_program
from tests.compiled import spill_lines, tree

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tests" / "mappings" / "cluster"


def _with_cluster(tmp_path: Path, mapping: str, shape: str) -> Path:
    """``mapping`` (under the repository) with ``cluster: shape`` on its kernel's BLOCK
    instance (after its ``pipeline:`` line)."""
    text = (ROOT / mapping).read_text()
    out = re.sub(r"\n(\s+)pipeline: (\d+)\n", rf"\n\1pipeline: \2\n\1cluster: {shape}\n", text, 1)
    assert out != text
    p = tmp_path / "m.yaml"
    p.write_text(out)
    return p


def test_a_2x2_cluster_multicasts_both_operands_from_the_first_block_along_each():
    """gemm in clusters of 2 x 2: A (the same along b1) from the block with cr1 == 0 to the two
    blocks of its row of the cluster (ranks row-major: mask 0b11 << crank), B (the same along
    b0) from cr0 == 0 to its column (0b101 << crank); each consumer leader releases a stage in
    all four blocks, whose empty barriers count 2 warpgroups x 4 blocks; the cluster syncs
    after the barriers' initialization and before any block exits; the grid is clusters."""
    cu = render_build(tree("gemm", CLUSTER / "gemm_c2x2.yaml")).files["gemm.cu"]
    assert "constexpr int CLUSTER = 4;" in cu
    assert "__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)" in cu
    a = cu.index("if (cr1 == 0) {")
    assert cu.index("cypress::tma_load_2d_multicast(s_A_smem", a) < cu.index("if (cr0 == 0) {")
    assert "&full_A_smem_B_smem[pipe.index], uint16_t(0x3 << crank), (kb * 64), (b0 * 128));" in cu
    b = cu.index("if (cr0 == 0) {")
    assert "uint16_t(0x5 << crank), (b1 * 256) + 64 * j" in cu[b:]
    assert cu.count("cypress::tma_load_2d(") == 0  # every main-loop load is multicast
    assert "cypress::init(&empty_A_smem_B_smem[i], 8);" in cu
    assert "cypress::init(&full_A_smem_B_smem[i], 1);" in cu  # one expect-tx arrival, as before
    assert "cypress::arrive_expect_tx(&full_A_smem_B_smem[pipe.index], 49152);" in cu
    assert cu.count("cypress::arrive_cluster<CLUSTER>(&empty_A_smem_B_smem[") == 2
    assert "cypress::arrive(&empty" not in cu
    assert cu.count("cypress::cluster_sync();") == 2 and "__syncthreads()" not in cu
    assert cu.count("__syncwarp();  // barrier.cluster is .aligned") == 2
    assert cu.index("cypress::fence_barrier_init();") < cu.index("cypress::cluster_sync();")
    tail = cu[: cu.index('extern "C"')].rstrip()
    assert tail.endswith(
        "cypress::cluster_sync();  // no block leaves while another may "
        "multicast into its shared memory or arrive on its mbarriers\n}"
    )
    for line in (
        "const int tiles0 = cdiv(cdiv(M, 128), 2);  // cluster tiles along b0",
        "const int cr1 = crank % 2;  // its rank along b1",
        "const int cr0 = crank / 2 % 2;  // its rank along b0",
        "b0 = b0 * 2 + cr0;",
        "b1 = b1 * 2 + cr1;",
        "for (int t = blockIdx.x / CLUSTER; t < num_tiles; t += gridDim.x / CLUSTER) {",
        "cypress::max_active_clusters(&clusters, gemm_kernel, CLUSTER, THREADS, SMEM_BYTES)",
        "const long long tiles = cdiv(cdiv(M, 128), 2) * cdiv(cdiv(N, 256), 2);  // cluster tiles",
        "const long long grid = CLUSTER * (tiles < clusters ? tiles : clusters);",
    ):
        assert line in cu, line


def test_a_vector_of_scales_multicasts_too_and_a_flat_grid_launches_whole_clusters():
    """The block-scaled GEMM's SA (KB x M, the same along b1) is a 1-D TMA vector: multicast
    with the A tile in a cluster along N; its channel's release per warp reaches both blocks.
    A kernel that is not persistent launches every cluster tile (a block per tile, rounded up
    to whole clusters)."""
    cu = render_build(tree("gemm_fp8_blockwise", CLUSTER / "gemm_fp8_blockwise_c1x2.yaml")).files[
        "gemm_fp8_blockwise.cu"
    ]
    assert "cypress::tma_load_1d_multicast(s_SA_smem" in cu
    assert "cypress::tma_load_2d(s_B_smem" in cu  # B: a column tile's, not shared along N
    assert "if (threadIdx.x % 32 == 0) cypress::arrive_cluster<CLUSTER>(&empty_SA_smem" in cu
    flat = render_build(tree("gemm", CLUSTER / "gemm_c2x1_flat.yaml")).files["gemm.cu"]
    assert "const long long grid = CLUSTER * tiles;" in flat
    assert "t += num_tiles" in flat


@pytest.mark.parametrize(
    "shape, dims, mask",
    [
        ((2, 1), (0,), 0b11),
        ((1, 2), (1,), 0b11),
        ((2, 2), (0,), 0b101),
        ((2, 2), (1,), 0b11),
        ((2, 2), (0, 1), 0b1111),
        ((2, 4), (0,), 0b1_0001),
        ((4, 2), (1,), 0b11),
    ],
)
def test_multicast_masks_set_one_bit_per_block_that_differs_only_along_the_dims(shape, dims, mask):
    assert multicast_mask(shape, dims) == mask


@pytest.mark.parametrize(
    "program, mapping, shape, message",
    [
        # FlashAttention-3's key loop ends at the causal diagonal of its query block
        (
            "flash_attention3",
            "mappings/flash_attention3/h100.yaml",
            "[1, 1, 2]",
            "the loop %k around the shared copy of K runs a different number of steps",
        ),
        (
            "batched_gemm",
            "mappings/batched_gemm/h100.yaml",
            "[2, 1, 1]",
            "a cluster along block_id.x: the tile walk groups blocks along the grid's last two",
        ),
        ("gemm", "mappings/gemm/h100.yaml", "[2, 1, 1]", "the kernel's grid has 2 dimension(s)"),
        ("gemm", "mappings/gemm/h100_nows.yaml", "[2, 1]", "no producer warpgroup"),
    ],
)
def test_refusals_are_located_at_the_knob(tmp_path, program, mapping, shape, message):
    m = _with_cluster(tmp_path, mapping, shape)
    with pytest.raises(CypressError) as e:
        compile_program(tree(program, m))
    assert e.value.code == "E065" and message in e.value.message, e.value.message
    line = next(i for i, ln in enumerate(m.read_text().splitlines(), 1) if "cluster:" in ln)
    assert e.value.loc.line == line


def test_a_one_block_cluster_changes_nothing(tmp_path):
    plain = render_build(tree("gemm", "mappings/gemm/h100.yaml")).files["gemm.cu"]
    ones = render_build(tree("gemm", _with_cluster(tmp_path, "mappings/gemm/h100.yaml", "[1, 1]")))
    assert ones.files["gemm.cu"] == plain


def test_the_one_block_interpreter_refuses_a_cluster_module():
    m = compile_program(tree("gemm", CLUSTER / "gemm_c2x1.yaml"))[0][-1][1]
    assert any(isinstance(o, N.Copy) and o.multicast for o in walk_ops(m.body))
    with pytest.raises(ValueError, match="run it with run_cluster"):
        C.run_block(m, {"M": 256, "N": 256, "K": 128}, {}, {}, seed=0)


def _small(tmp_path: Path, shape: str) -> dict:
    """tests/mappings/gemm_small.yaml (64 x 32 tiles, 2 stages) in clusters of ``shape``: the
    warp-specialized and the cluster-multicast modules."""
    text = (ROOT / "tests/mappings/gemm_small.yaml").read_text()
    out = text.replace("pipeline: 2}", f"pipeline: 2, cluster: {shape}}}", 1)
    assert out != text
    p = tmp_path / "m.yaml"
    p.write_text(out)
    return dict(compile_program(tree("gemm", p), until="cluster-multicast")[0])


@pytest.mark.parametrize("shape", ["[2, 1]", "[1, 2]", "[2, 2]"])
def test_the_concurrent_interpreter_runs_whole_clusters(tmp_path, shape):
    """Each cluster of the grid runs as a whole (run_cluster): a multicast copy issued by the
    group's first block lands in each block's storage and on each one's barrier, arrive.cluster
    reaches every block; random schedules find no race or deadlock and C matches the sequential
    interpreter.  A 128 x 64 C is one 2 x 2 cluster, or two of 2 blocks; persistent: the
    cluster tiles run back to back on one cluster's barriers."""
    snaps = _small(tmp_path, shape)
    m, ref = snaps["cluster-multicast"], snaps["warp-specialization"]
    sizes = {"M": 128, "N": 64, "K": 64}
    v = check_schedules(m, ref, sizes=sizes, schedules=4, value_every=2)
    assert v.finding is None and v.schedules == 4, v.line("gemm")
    if shape == "[2, 1]":
        v = check_schedules(m, ref, sizes=sizes, schedules=2, value_every=1, persistent=True)
        assert v.finding is None, v.line("gemm")


def test_teeth_a_multicast_that_waits_for_its_own_block_only_races(tmp_path):
    """The same IR with the releases local again (arrive, the empty barrier's count of one
    block): the first block refills a stage of the second one that its consumers may still
    read, which the cluster interpreter reports."""
    m = _small(tmp_path, "[2, 1]")["cluster-multicast"]

    def local(o):
        if isinstance(o, S.Arrive) and o.cluster:
            return replace(o, cluster=False)
        if isinstance(o, S.MBarrier) and o.kind == BarrierKind.EMPTY:
            return replace(o, count=o.count // 2)
        return o

    v = check_schedules(map_ops(m, local), m, sizes={"M": 128, "N": 32, "K": 64}, value_every=0)
    assert v.finding is not None and v.finding.kind == "race", v.line("gemm")
    assert "overwrites %B_smem" in v.finding.message and "before the release" in v.finding.message


@pytest.mark.nvcc
def test_a_cluster_kernel_compiles_without_spills(tmp_path):
    """The multicast loads, remote arrivals and cluster barriers through ptxas (sm_90a)."""
    r = render_build(tree("gemm", CLUSTER / "gemm_c2x2.yaml"))
    spills = spill_lines(r.files, tmp_path, "gemm.cu")
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills


def test_explain_check_schedule_runs_one_whole_cluster(monkeypatch):
    """``explain --check-schedule`` checks the IR after the last pass: a mapping of 2-block
    clusters runs one cluster at a time, at sizes grown to a whole cluster (M = 256: two 128-row
    tiles), not the single blocks of the IR before cluster-multicast."""
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(
        main,
        [
            "explain",
            "programs/gemm.cyp",
            "-m",
            str(CLUSTER / "gemm_c2x1.yaml"),
            "--check-schedule",
            "--schedules",
            "1",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "of the IR after cluster-multicast" in r.stderr and "one cluster at a time" in r.stderr
    assert r.stdout.strip() == "programs/gemm.cyp: clean (1 schedule(s), sizes M=256 N=256 K=384)"
