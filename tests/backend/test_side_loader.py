"""bench/old_new.py reads each side's kernels with that side's own Python loader: the copy of
``cypressc/runtime.py`` and of the ``cypressc/abi`` package it imports relatively that
bench/old_kernels.sh lays out as ``<side>/runtime/loader.py`` and ``<side>/runtime/abi/``.
The copy must load on its own — its classes, not the installed cypressc's — and read the
info the working tree's compiler writes."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from cypressc import runtime
from cypressc.build import render_build
from cypressc.cli.common import load_program as _front_end

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def old_new():
    bench = str(ROOT / "bench")
    sys.path.insert(0, bench)
    try:
        yield importlib.import_module("old_new")
    finally:
        sys.path.remove(bench)


def _side(root: Path, side: str) -> Path:
    """``root/side/runtime`` as old_kernels.sh fills it from the working tree (the header
    directory copied first, then runtime.py as loader.py, then abi/ without bytecode)."""
    d = root / side / "runtime"
    shutil.copytree(ROOT / "cypressc/backend/runtime", d)
    shutil.copy(ROOT / "cypressc/runtime.py", d / "loader.py")
    shutil.copytree(ROOT / "cypressc/abi", d / "abi", ignore=shutil.ignore_patterns("__pycache__"))
    return d


def test_the_copied_runtime_is_its_own_and_reads_the_compilers_info(tmp_path, old_new):
    _side(tmp_path, "new")
    mod = old_new.side_loader(tmp_path, "new")
    assert mod.__name__ == "cypressc_runtime_new.loader"
    assert mod.KernelInfo is not runtime.KernelInfo
    assert mod.KernelInfo.__module__ == "cypressc_runtime_new.abi.info"
    r = render_build(
        _front_end(
            str(ROOT / "programs/gemm.cyp"), str(ROOT / "tests/mappings/full/gemm/h100.yaml")
        )
    )
    (tmp_path / "gemm.json").write_text(r.files["gemm.json"])
    info = mod.KernelInfo.load_json(tmp_path / "gemm.json")
    assert info.to_dict() == json.loads(r.files["gemm.json"])
    sizes = mod.infer_sizes(info, [(256, 128), (256, 64), (64, 128)])
    assert sizes == {"M": 256, "N": 128, "K": 64}
    assert info.flops_at(sizes) == 2 * 256 * 128 * 64
    with pytest.raises(
        mod.KernelError, match=r"dimension 0 \(M\) is 255"
    ):  # the copy's error class
        mod.infer_sizes(info, [(256, 128), (255, 64), (64, 128)])
    with pytest.raises(FileNotFoundError, match="make -C"):  # no lib<name>.so built
        mod.load(tmp_path, "gemm")


def test_an_old_single_file_loader_and_a_missing_one(tmp_path, old_new):
    # a tree from before the split: loader.py is the whole runtime, nothing beside it
    d = tmp_path / "old" / "runtime"
    d.mkdir(parents=True)
    (d / "loader.py").write_text(
        "from dataclasses import dataclass\n\n\n@dataclass\nclass Info:\n"
        "    name: str\n\n\ndef load(outdir, name):\n    return Info(name)\n"
    )
    assert old_new.side_loader(tmp_path, "old").load(tmp_path, "gemm").name == "gemm"
    assert old_new.side_loader(tmp_path / "nowhere", "new") is runtime
