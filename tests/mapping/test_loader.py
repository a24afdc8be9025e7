"""The YAML mapping loader: validated specs, and located errors (line/column of the
offending key or value) for everything that is not a valid mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.diagnostics import CypressErrors
from cypressc.mapping.loader import load_mapping, load_mapping_source

ROOT = Path(__file__).resolve().parents[2]
MAPPINGS = sorted((ROOT / "tests/mappings/full").glob("*/*.yaml"))

SMALL = """\
machine: h100
entrypoint: host
instances:
  - instance: host
    variant: clear_host
    proc: HOST
    mems: [GLOBAL]
    calls: [leaf]
  - instance: leaf
    variant: clear_thread
    proc: THREAD
    mems: [REGISTER]
"""


def err(text: str):
    with pytest.raises(CypressErrors) as ei:
        load_mapping_source(text, "m.yaml")
    return ei.value.errors


@pytest.mark.parametrize("path", MAPPINGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_bundled_mappings_load(path):
    lm = load_mapping(path)
    assert lm.spec.machine == "h100" and lm.path == str(path)
    assert lm.spec.entrypoint in {i.instance for i in lm.spec.instances}


def test_spec_and_locations():
    lm = load_mapping_source(SMALL, "m.yaml")
    assert [i.instance for i in lm.spec.instances] == ["host", "leaf"]
    assert lm.spec.instances[1].mems == ["REGISTER"]
    loc = lm.loc("instances", 1, "proc")
    assert (loc.file, loc.line, loc.col, loc.text) == ("m.yaml", 11, 11, "    proc: THREAD")
    assert lm.loc("instances", 0, "mems", 0).col == 12
    assert lm.loc("entrypoint").line == 2
    # unknown keys fall back to the deepest known prefix
    assert lm.loc("instances", 1, "tunables", "X").line == 9
    assert lm.instance_loc("leaf", "mems").line == 12
    assert lm.instance_loc("nope").line == 1


def test_merge_keys_and_anchors():
    text = """\
machine: h100
entrypoint: host
instances:
  - instance: host
    variant: clear_host
    proc: HOST
    mems: [GLOBAL]
    calls: [leaf]
  - &leaf {instance: leaf, variant: clear_thread, proc: WARP, mems: [GLOBAL]}
  - <<: *leaf
    instance: leaf2
    proc: THREAD
    mems: [REGISTER]
"""
    lm = load_mapping_source(text, "m.yaml")
    a, b = lm.spec.instances[1:]
    assert (a.instance, a.proc, a.mems) == ("leaf", "WARP", ["GLOBAL"])
    assert (b.instance, b.variant, b.proc, b.mems) == (
        "leaf2",
        "clear_thread",
        "THREAD",
        ["REGISTER"],
    )
    # a merged key is located where it was written (the anchor), an own key where it is
    assert lm.loc("instances", 2, "variant").line == 9
    assert lm.loc("instances", 2, "proc").line == 12


@pytest.mark.parametrize(
    "text,code,line,col,frag",
    [
        ("", "M000", 1, 1, "the mapping is empty"),
        ("# only a comment\n", "M000", 1, 1, "the mapping is empty"),
        ("machine: h100\0", "M000", 1, 1, "binary"),
        ("machine: [h100\nentrypoint: x\n", "M000", 2, 11, "YAML syntax error"),
        ("machine: h100\n\tentrypoint: x\n", "M000", 2, 1, "'\\t'"),
        ("machine: !!int abc\n", "M000", 1, 10, "'abc' is not a valid !!int"),
        ("machine: !!python/name:os.system x\n", "M000", 1, 10, "unsupported YAML tag"),
        ("a: &a [*a]\n", "M000", 1, 4, "recursive YAML alias"),
        ("a: &a {<<: *a}\n", "M000", 1, 4, "recursive YAML alias"),
        ("<<: 5\n", "M000", 1, 5, "'<<' merges a mapping"),
        ("machine: h100\nmachine: h200\n", "M001", 2, 1, "duplicate key 'machine'"),
        ("- a\n- b\n", "M002", 1, 1, "must be a YAML mapping"),
        ("h100\n", "M002", 1, 1, "must be a YAML mapping"),
        (SMALL.replace("proc: HOST", "proc: CTA"), "M002", 6, 5, "'proc': expected 'HOST'"),
        (SMALL.replace("mems: [GLOBAL]", "mems: [GLOBAL, SMEM]"), "M002", 7, 20, "'mems[1]'"),
        (
            SMALL.replace("    calls: [leaf]\n", "    calls: [leaf]\n    pipelines: 4\n"),
            "M002",
            9,
            5,
            "unknown key 'pipelines'",
        ),
        (SMALL.replace("    mems: [REGISTER]\n", ""), "M002", 9, 5, "missing key 'mems'"),
        (SMALL.replace("machine: h100\n", ""), "M002", 1, 1, "missing key 'machine'"),
        (
            SMALL.replace("machine: h100", "machine: h100\ntarget: sm90"),
            "M002",
            2,
            1,
            "unknown key 'target'",
        ),
        (
            SMALL.replace("    calls: [leaf]", "    calls: [leaf]\n    smem_limit: 1GB"),
            "M002",
            9,
            5,
            "not a byte count",
        ),
        (
            SMALL.replace("    calls: [leaf]", "    calls: [leaf]\n    pipeline: 12"),
            "M002",
            9,
            5,
            "'pipeline' must be at most 8 (got 12)",
        ),
        (
            SMALL.replace("    calls: [leaf]", "    calls: leaf"),
            "M002",
            8,
            5,
            "'calls': expected a list (got 'leaf')",
        ),
        (
            "machine: h100\nentrypoint: x\ninstances: []\n",
            "M002",
            3,
            1,
            "'instances' is empty; it needs at least one instance",
        ),
    ],
)
def test_errors_are_located(text, code, line, col, frag):
    e = err(text)[0]
    assert (e.code, e.loc.file, e.loc.line, e.loc.col) == (code, "m.yaml", line, col), str(e)
    assert frag in e.message, e.message


def test_every_schema_error_is_reported():
    text = SMALL.replace("proc: HOST", "proc: CTA").replace("mems: [REGISTER]", "mems: [REG]")
    assert [(e.code, e.loc.line) for e in err(text)] == [("M002", 6), ("M002", 12)]


def test_unknown_key_hint_lists_allowed_keys():
    (e,) = err(SMALL.replace("    calls: [leaf]", "    calls: [leaf]\n    stages: 4"))
    assert e.hint.startswith("allowed keys: instance, variant, proc, mems")
    (e,) = err(SMALL.replace("machine: h100", "machine: h100\ntarget: x"))
    assert e.hint == "allowed keys: machine, entrypoint, instances, tunables, templates, tune"


def test_yaml_syntax_error_notes_where_the_construct_started():
    (e,) = err("machine: h100\ninstances: [a,\n  b: c\n")
    assert e.code == "M000" and e.notes
    note, loc = e.notes[0]
    assert "flow sequence" in note and (loc.line, loc.col) == (2, 12)


def test_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    (e,) = err("\n".join(lines) + "\n")
    assert e.code == "M000" and "too many YAML nodes" in e.message


def test_file_errors(tmp_path):
    with pytest.raises(CypressErrors) as ei:
        load_mapping(tmp_path / "missing.yaml")
    assert ei.value.errors[0].code == "M000" and "no such file" in ei.value.errors[0].message
    with pytest.raises(CypressErrors) as ei:
        load_mapping(tmp_path)
    assert ei.value.errors[0].code == "M000" and "cannot read" in ei.value.errors[0].message
    f = tmp_path / "latin1.yaml"
    f.write_bytes(b"machine: h100\n# Gr\xf6\xdfe\n")
    with pytest.raises(CypressErrors) as ei:
        load_mapping(f)
    e = ei.value.errors[0]
    assert (e.code, e.loc.line, e.loc.col) == ("M000", 2, 5) and "not UTF-8" in e.message
    f.write_bytes(b"\x7fELF\x02\x01\x01\x00")
    with pytest.raises(CypressErrors) as ei:
        load_mapping(f)
    assert "binary" in ei.value.errors[0].message
