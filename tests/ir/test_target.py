"""Passes read only the module (issue #36 step 1): the machine and the mapping's BLOCK knobs
travel in ``Module.target``, so a pass object runs alone on a module, with a target changed by
hand or none at all."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir.target import BlockKnobs, Target
from cypressc.passes.manager import PASSES, get_pass
from cypressc.pipeline import step_names
from tests import compiled

GEMM = ("gemm", "tests/mappings/full/gemm/h100.yaml")


def test_the_lowering_records_the_mappings_block_knobs_and_where_they_are():
    m = compiled.modules(*GEMM)["dependence-analysis"]
    t = m.target
    assert t.machine.name == "h100" and t.smem_max == 232448
    assert t.block == BlockKnobs(
        "gemm_block", warpspecialize=True, pipeline=3, smem_limit=232448, raster=16, persistent=True
    )
    loc = t.knob_loc("smem_limit")
    assert loc.file.endswith("tests/mappings/full/gemm/h100.yaml") and "smem_limit" in loc.text
    assert t.knob_loc("pingpong") == t.loc  # not set: the BLOCK instance
    assert t.declared == {"C": (False, True), "A": (True, False), "B": (True, False)}


def test_a_pass_object_runs_alone_on_a_module_and_reads_its_target():
    """Resource allocation on gemm's copy-eliminated module: as compiled it fits; with a
    target whose limit is smaller it refuses at the location the target names, whatever the
    mapping file says."""
    before = compiled.modules(*GEMM)["copy-elimination"]
    ra = get_pass("resource-allocation").for_module(before)
    assert (
        ra.apply(before).resources.smem_bytes
        == compiled.modules(*GEMM)["resource-allocation"].resources.smem_bytes
    )
    here = Loc("knobs.yaml", 7, 3, 4, "smem_limit: 65536")
    tight = replace(
        before.target,
        block=replace(before.target.block, smem_limit=65536),
        knob_locs={"smem_limit": here},
    )
    with pytest.raises(CypressError) as e:
        ra.apply(replace(before, target=tight))
    assert e.value.code == "E046" and e.value.loc == here and "the limit is 65536" in str(e.value)


def test_a_module_without_a_target_compiles_for_the_default_machine():
    before = compiled.modules(*GEMM)["warp-specialization"]
    bare = replace(before, target=None)
    out = get_pass("sync-insertion").for_module(bare).apply(bare)
    assert out.synchronized
    # no knobs: no warp specialization, one wgmma group in flight
    allocated = replace(compiled.modules(*GEMM)["resource-allocation"], target=None)
    ws = get_pass("warp-specialization").for_module(allocated).apply(allocated)
    assert ws.schedule.warpspecialize is False
    assert Target.default().machine.name == "h100"


def test_the_registry_and_the_pipeline_agree():
    names = [n for n, _ in compiled.snapshots(*GEMM)]
    assert (
        names == step_names() == ["dependence-analysis", *(p.name for p in PASSES), "cuda-lowering"]
    )
    for p in PASSES:
        cls = p.load()
        assert cls.name == p.name and cls.section == p.section
