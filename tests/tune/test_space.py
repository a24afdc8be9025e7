"""The search space of ``cypressc tune``: knobs read off real mappings, the ``tune:`` section
(schema, M024), and candidates written back as mapping text."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.cli.common import load_program as _front_end
from cypressc.diagnostics import CypressErrors
from cypressc.mapping.loader import load_mapping, load_mapping_source
from cypressc.tuner.prune import check_candidate, static_score
from cypressc.tuner.space import derive_space

ROOT = Path(__file__).resolve().parents[2]


def space_of(program: str, mapping: str, text: str | None = None, tmp: Path | None = None):
    path = ROOT / mapping
    if text is not None:
        path = tmp / "m.yaml"
        path.write_text(text)
    tree = _front_end(str(ROOT / program), str(path))
    return derive_space(tree, path.read_text())


def test_gemm_knobs_and_default_candidates():
    sp = space_of("programs/gemm.cyp", "tests/mappings/full/gemm/h100_plain.yaml")
    k = sp.by_name
    assert [x.name for x in sp.knobs] == [
        "U",
        "V",
        "W",
        "WGS",
        "MMA",
        "copy_block.D",
        "pipeline",
        "warpspecialize",
        "persistent",
        "raster",
        "mma_in_flight",
        "producer_registers",
        "consumer_registers",
        "pingpong",
        "cluster",
    ]
    assert k["U"].candidates == (64, 128, 256) and k["W"].candidates == (32, 64, 128)
    assert k["WGS"].candidates == (1, 2, 4) and len(k["WGS"].sites) == 3  # mma, clear, copy blocks
    assert k["MMA"].candidates == ("WGMMA_64x64x16", "WGMMA_64x128x16", "WGMMA_64x256x16")
    assert len(k["MMA"].sites) == 7  # mma: warpgroup, warp, thread; clear and copy: 2 each
    assert k["copy_block.D"].current == "GLOBAL" and k["copy_block.D"].candidates == (
        "GLOBAL",
        "SHARED",
    )
    assert len(k["copy_block.D"].sites) == 3  # warpgroup, warp, thread
    assert k["pipeline"].candidates == (2, 3, 4, 5)
    assert k["warpspecialize"].current is None and k["warpspecialize"].candidates == (True, False)
    assert not k["consumer_registers"].searched
    assert (
        k["pingpong"].current is None and not k["pingpong"].searched
    )  # unset: GEMM loops refuse it
    assert "PIECES" not in k and "PROC" not in k  # bound to different values / a processor
    assert k["cluster"].current is None and k["cluster"].candidates == (None, [2, 1], [1, 2])


def test_reduction_has_two_staging_knobs_and_shared_stays_fixed():
    sp = space_of("programs/gemm_reduction.cyp", "tests/mappings/full/gemm_reduction/h100.yaml")
    mems = [k.name for k in sp.knobs if k.kind == "mem"]
    assert mems == ["copy_block.D", "copy_vec_block.z"]  # mma/rowsum operands are SHARED at BLOCK


def test_render_edits_in_place_and_round_trips():
    sp = space_of("programs/gemm.cyp", "tests/mappings/full/gemm/h100_plain.yaml")
    vals = dict(
        sp.base,
        U=256,
        MMA="WGMMA_64x256x16",
        pipeline=4,
        warpspecialize=True,
        **{"copy_block.D": "SHARED"},
    )
    text = sp.render(vals)
    assert text.startswith("# A plain mapping of programs/gemm.cyp")  # comments kept
    assert "tunables: {U: 256, V: 128}" in text and text.count("WGMMA_64x256x16") == 7
    assert "    proc: BLOCK\n    warpspecialize: true\n" in text  # inserted after proc:
    assert load_mapping_source(text).spec == sp.spec(vals)
    assert sp.render(sp.base) == sp.text


def test_render_flow_style_mapping_falls_back_to_a_dump():
    sp = space_of("programs/gemm.cyp", "tests/mappings/gemm_small.yaml")
    vals = dict(sp.base, persistent=True, pipeline=3)
    assert load_mapping_source(sp.render(vals)).spec == sp.spec(vals)


def test_unset_block_knobs_at_their_default_stay_unset():
    sp = space_of("programs/gemm.cyp", "tests/mappings/full/gemm/h100_plain.yaml")
    pts = list(sp.product(["mma_in_flight", "raster"], sp.base))
    assert len(pts) == 4 and sum(sp.render(p) == sp.text for p in pts) == 1


def test_tune_section_restricts_and_fixes(tmp_path):
    text = (ROOT / "tests/mappings/full/gemm/h100_plain.yaml").read_text() + (
        "tune:\n  U: [128, 256]\n  W: 64\n  warpspecialize: [false, true]\n  PIECES: [4]\n"
    )
    sp = space_of("programs/gemm.cyp", "", text, tmp_path)
    assert sp.by_name["U"].candidates == (128, 256) and sp.by_name["W"].candidates == (64,)
    assert sp.by_name["warpspecialize"].candidates == (False, True)
    assert (
        len(sp.by_name["PIECES"].sites) == 6
    )  # named in tune: every instance binding it (3 trees x 2)


@pytest.mark.parametrize(
    "entry, message",
    [
        ("  UU: [1]\n", "tune: 'UU' is not a knob of this mapping"),
        ("  U: [0, 128]\n", "tune: U cannot be 0: an int tunable takes positive integers"),
        (
            "  MMA: [WGMMA_64x100x16]\n",
            "tune: MMA cannot be WGMMA_64x100x16: atoms are WGMMA_64xNx16",
        ),
        (
            "  pipeline: [3, 9]\n",
            "tune: pipeline cannot be 9: Input should be less than or equal to 8",
        ),
        ("  copy_block.D: [REGISTER]\n", "tune: copy_block.D cannot be REGISTER"),
    ],
)
def test_tune_section_errors_are_located(tmp_path, entry, message):
    base = (ROOT / "tests/mappings/full/gemm/h100_plain.yaml").read_text()
    m = tmp_path / "m.yaml"
    m.write_text(base + "tune:\n" + entry)
    r = CliRunner().invoke(
        main,
        [
            "tune",
            str(ROOT / "programs/gemm.cyp"),
            "-m",
            str(m),
            "--size",
            "M=64",
            "--size",
            "N=64",
            "--size",
            "K=64",
            "--compile-only",
        ],
    )
    assert r.exit_code == 1, r.output
    line = base.count("\n") + 2
    assert f"{m}:{line}:" in r.stderr and "error[M024]" in r.stderr and message in r.stderr


def test_tune_section_schema(tmp_path):
    base = (ROOT / "tests/mappings/full/gemm/h100_plain.yaml").read_text()
    with pytest.raises(CypressErrors, match="lists no values"):
        load_mapping_source(base + "tune:\n  U: []\n")
    with pytest.raises(CypressErrors, match="not 1.5"):
        load_mapping_source(base + "tune:\n  U: [1.5]\n")
    assert load_mapping_source(base + "tune:\n  persistent: true\n").spec.tune == {
        "persistent": [True]
    }
    # every other command ignores the section
    (tmp_path / "m.yaml").write_text(base + "tune:\n  U: [64, 128]\n")
    assert (
        load_mapping(tmp_path / "m.yaml").spec.instances
        == load_mapping(ROOT / "tests/mappings/full/gemm/h100_plain.yaml").spec.instances
    )


def test_pruning_refuses_with_the_compiler_codes():
    sp = space_of("programs/gemm.cyp", "tests/mappings/full/gemm/h100_plain.yaml")
    job = lambda vals: (str(ROOT / "programs/gemm.cyp"), {}, sp.render(vals), "m.yaml")  # noqa: E731
    assert check_candidate(job(sp.base))["ok"]
    big = check_candidate(job(dict(sp.base, U=256, V=256, MMA="WGMMA_64x256x16", pipeline=5)))
    assert not big["ok"] and big["code"] == "E046"  # shared memory
    mismatch = check_candidate(
        job(dict(sp.base, MMA="WGMMA_64x256x16"))
    )  # atom wider than the tile
    assert not mismatch["ok"] and mismatch["code"].startswith(("E", "M"))


def test_static_score_prefers_the_hand_tuned_shape_at_scale():
    def score(mapping: str, n: int) -> float:
        r = check_candidate(
            (str(ROOT / "programs/gemm.cyp"), {}, (ROOT / mapping).read_text(), mapping)
        )
        return static_score(r["plan"], dict(M=n, N=n, K=n), 132, 232448)

    assert score("tests/mappings/full/gemm/h100.yaml", 8192) > score(
        "tests/mappings/full/gemm/h100_plain.yaml", 8192
    )
    assert score("tests/mappings/full/gemm/h100.yaml", 4096) > score(
        "tests/mappings/full/gemm/h100_nows.yaml", 4096
    )


def test_cluster_shapes_render_as_lists_and_a_one_block_cluster_is_none(tmp_path):
    """``cluster`` candidates are lists: rendered as a flow list after ``proc:``, loaded back
    to the same spec; ``tune: {cluster: [2, 1]}`` is one shape, ``[[1, 1], [2, 1]]`` two, and
    ``[1, 1]`` (one block per cluster) is the mapping without the knob."""
    sp = space_of("programs/gemm.cyp", "tests/mappings/full/gemm/h100_plain.yaml")
    vals = dict(sp.base, cluster=[2, 1])
    text = sp.render(vals)
    assert "    proc: BLOCK\n    cluster: [2, 1]\n" in text
    assert load_mapping_source(text).spec == sp.spec(vals)
    base = (ROOT / "tests/mappings/full/gemm/h100_plain.yaml").read_text()
    one = space_of("programs/gemm.cyp", "", base + "tune:\n  cluster: [2, 1]\n", tmp_path)
    assert one.by_name["cluster"].candidates == ([2, 1],)
    two = space_of("programs/gemm.cyp", "", base + "tune:\n  cluster: [[1, 1], [2, 1]]\n", tmp_path)
    assert two.by_name["cluster"].candidates == ([1, 1], [2, 1])
    pts = list(two.product(["cluster"], two.base))
    assert [p["cluster"] for p in pts] == [None, [2, 1]]
    assert two.render(pts[0]) == two.text
