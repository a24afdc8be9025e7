"""``cypressc.compile`` raises its documented errors for a bad dtype, a misspelt keyword and a
mapping file that cannot be read (issue #35, section 2) -- before any build, so no nvcc."""

from __future__ import annotations

from pathlib import Path

import pytest

import cypressc
from cypressc.api import bind_dtypes
from cypressc.diagnostics import CypressErrors

ROOT = Path(__file__).resolve().parents[2]
GEMM, MAP = ROOT / "programs" / "gemm.cyp", ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"


@pytest.mark.parametrize("dtype", ["f64", "banana", {"X": "bf16"}, {"T": "f32"}, 16])
def test_a_dtype_the_program_does_not_allow_is_a_value_error(dtype):
    with pytest.raises(ValueError, match=r"T: f16, bf16|allows f16, bf16|dtype must be"):
        cypressc.compile(GEMM, MAP, dtype=dtype)


def test_allowed_dtypes_bind():
    assert bind_dtypes(GEMM, "bf16") == {"T": "bf16"}
    assert bind_dtypes(GEMM, {"T": "f16"}) == {"T": "f16"}
    assert bind_dtypes(GEMM, None) == {}


def test_a_misspelt_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="dtpye"):
        cypressc.compile(GEMM, MAP, dtpye="bf16")
    with pytest.raises(TypeError, match="budgett"):
        cypressc.compile(GEMM, MAP, tuned=True, sizes={"M": 64, "N": 64, "K": 64}, budgett=2)


@pytest.mark.parametrize("kind", ["missing", "directory", "binary", "latin1"])
def test_an_unreadable_mapping_is_a_located_m000(kind, tmp_path):
    path = {"missing": tmp_path / "nope.yaml", "directory": tmp_path}.get(kind, tmp_path / "m.yaml")
    if kind == "binary":
        path.write_bytes(b"machine: h100\x00\x01")
    elif kind == "latin1":
        path.write_bytes("machine: h100 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(CypressErrors) as e:
        cypressc.compile(GEMM, path)
    err = e.value.errors[0]
    assert err.code == "M000" and err.loc.file == str(path)
