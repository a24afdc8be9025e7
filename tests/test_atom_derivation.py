"""An atom tunable the mapping leaves unbound is derived from its tile (issue #37 item 2;
docs/language.md §5.2, cypressc/passes/atom_derivation.py): the warpgroup row of an mma tree
takes ``WGMMA_64x<cols>x16`` from its accumulator tile, the rows below inherit it, and the
generated files are byte for byte those of the mapping that writes every atom.  A first use
that cannot give the atom's N is a located E040."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cypressc.diagnostics import CypressError, CypressErrors
from cypressc.lang.atoms import is_atom_name
from tests.compiled import ROOT, rendered, snapshots, tree


def _without_atoms(src: Path, dst: Path, keep: tuple[str, ...] = (), **tunables: int) -> Path:
    """``src`` with every atom-valued tunable removed (except in the instances ``keep``) and
    the int ``tunables`` set wherever an instance binds them, written to ``dst``."""
    data = yaml.safe_load(src.read_text())
    for inst in data["instances"]:
        t = inst.get("tunables") or {}
        for k in list(t):
            if isinstance(t[k], str) and is_atom_name(t[k]) and inst["instance"] not in keep:
                del t[k]
            elif k in tunables:
                t[k] = tunables[k]
        if "tunables" in inst and not t:
            del inst["tunables"]
    dst.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


def _same_files(a, b) -> None:
    assert sorted(a.files) == sorted(b.files)
    for name, text in a.files.items():
        assert b.files[name] == text, name


def test_gemm_without_atoms_renders_byte_identical(tmp_path: Path) -> None:
    src = ROOT / "tests/mappings/full/gemm/h100.yaml"
    m = _without_atoms(src, tmp_path / "h100.yaml")
    assert "MMA" not in m.read_text()
    _same_files(rendered("gemm", src), rendered("gemm", m))
    t = tree("gemm", m)
    rows = {n.instance.instance: n.tunables for n in t.root.walk()}
    assert str(rows["mma_warpgroup"]["MMA"]) == "auto"  # explain's tree: MMA=auto


def test_a_tile_change_is_one_value_and_picks_the_atom(tmp_path: Path) -> None:
    """V: 128 (and the pipeline h100_128x128 uses) with no atom written: the same files as
    h100_128x128.yaml, which writes WGMMA_64x128x16 seven times."""
    m = _without_atoms(ROOT / "tests/mappings/full/gemm/h100.yaml", tmp_path / "v128.yaml", V=128)
    m.write_text(m.read_text().replace("pipeline: 3", "pipeline: 4"))
    out = rendered("gemm", m)
    cu = out.files["gemm.cu"]
    assert "cypress::wgmma<128, __half>(" in cu and "wgmma<256," not in cu
    _same_files(rendered("gemm", ROOT / "tests/mappings/full/gemm/h100_128x128.yaml"), out)


def test_fa3_without_atoms_renders_byte_identical(tmp_path: Path) -> None:
    """Every atom of FA3's mapping but init_wg's, whose task partitions only the row
    statistics m and l (rank 1: no columns to derive N from), so it stays bound; without it
    too, that row is the E040."""
    src = ROOT / "tests/mappings/full/flash_attention3/h100_d128.yaml"
    m = _without_atoms(src, tmp_path / "d128.yaml", keep=("init_wg",))
    assert m.read_text().count("WGMMA_") == 1
    _same_files(rendered("flash_attention3", src), rendered("flash_attention3", m))

    bare = _without_atoms(src, tmp_path / "bare.yaml")
    with pytest.raises(CypressError) as e:
        snapshots("flash_attention3", bare, until="dependence-analysis")
    err = e.value
    assert err.code == "E040" and err.loc.file == str(bare)
    assert err.message == (
        "instance 'init_wg' leaves the atom tunable MMA unbound, and it cannot be derived: its "
        "first use partitions 'm', a rank-1 tile (a per-row vector has no columns to give the "
        "atom's N)"
    )
    assert "`MMA: WGMMA_64x256x16` under tunables of instance 'init_wg'" in (err.hint or "")


def test_an_atom_first_used_by_a_leaf_call_is_a_located_e040(tmp_path: Path) -> None:
    """mma_inner's atom renamed MMAW: nothing above mma_thread binds MMA, whose first use is
    warpgroup_mma(MMA, ...).  Reported at mma_thread's row in the mapping, with a note at the
    call and the atom that fits the warpgroup's 64 x 256 tile in the hint."""
    text = (ROOT / "tests/programs/full/gemm.cyp").read_text()  # the mma tree written out
    head, body = text.split("def mma_inner(", 1)
    inner, rest = body.split("@task", 1)
    prog = tmp_path / "gemm.cyp"
    prog.write_text(head + "def mma_inner(" + inner.replace("MMA", "MMAW") + "@task" + rest)
    data = yaml.safe_load((ROOT / "tests/mappings/full/gemm/h100.yaml").read_text())
    for inst in data["instances"]:
        t = inst.get("tunables", {})
        if inst["variant"] == "mma_inner":
            t["MMAW"] = t.pop("MMA")
        elif inst["instance"] == "mma_thread":
            del inst["tunables"]
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises((CypressError, CypressErrors)) as e:
        snapshots(prog, m, until="dependence-analysis")
    err = e.value if isinstance(e.value, CypressError) else e.value.errors[0]
    lines = m.read_text().splitlines()
    row = lines.index("- instance: mma_thread") + 1
    call = prog.read_text().splitlines().index("    warpgroup_mma(MMA, C, A, B)") + 1
    assert (err.code, err.loc.file, err.loc.line) == ("E040", str(m), row)
    assert err.message == (
        "instance 'mma_thread' leaves the atom tunable MMA unbound, and it cannot be derived: "
        "its first use is the leaf call warpgroup_mma(), and no task that launches "
        "'mma_thread' binds MMA"
    )
    assert [(n.file, n.line) for _, n in err.notes] == [(str(prog), call)]
    assert err.hint == (
        "bind it in the mapping: `MMA: WGMMA_64x256x16` under tunables of instance 'mma_thread'"
    )
    rendered_text = str(err)
    assert re.search(rf"m\.yaml:{row}:\d+: error\[E040\]", rendered_text)


def test_the_tuner_takes_no_knob_for_a_derived_atom(tmp_path: Path) -> None:
    from cypressc.tuner.prune import check_candidate
    from cypressc.tuner.space import derive_space

    m = _without_atoms(ROOT / "tests/mappings/full/gemm/h100.yaml", tmp_path / "h100.yaml")
    sp = derive_space(tree("gemm", m), m.read_text())
    assert "MMA" not in sp.by_name and "V" in sp.by_name
    # a point of the space with another tile width: the atom is left to follow the tile, and
    # the candidate compiles through every pass
    text = sp.render({**sp.base, "V": 128})
    assert "MMA" not in text and "V: 128" in text
    res = check_candidate((str(ROOT / "programs/gemm.cyp"), {}, text, str(m)))
    assert res["ok"], res


def test_one_atom_over_two_widths_notes_where_it_was_derived(tmp_path: Path) -> None:
    """FA2's softmax_inner partitions O (128 columns) and then S (176 under W: 176) with one
    MMA: derived from O, it does not fit S; the E040 notes where MMA was derived and hints an
    atom whose N divides both (the 64x16 the mapping writes)."""
    src = ROOT / "tests/mappings/full/flash_attention2/h100_d128_w176.yaml"
    m = _without_atoms(src, tmp_path / "w176.yaml", keep=("init_wg",))
    with pytest.raises(CypressError) as e:
        snapshots("flash_attention2", m, until="dependence-analysis")
    err = e.value
    assert err.code == "E040"
    assert (
        err.message
        == "the accumulator tile has 176 columns; WGMMA_64x128x16 needs a multiple of 128"
    )
    assert err.notes[-1][0] == (
        "MMA = WGMMA_64x128x16 was derived from the 128 columns of 'O' here (instance "
        "'softmax_wg' leaves MMA unbound)"
    )
    assert (err.hint or "").startswith(
        "bind MMA in instance 'softmax_wg' to an atom whose N divides every tile it partitions, "
        "e.g. `MMA: WGMMA_64x16x16`"
    )
