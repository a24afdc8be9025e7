"""Ping-pong without warp specialization is refused (E050).

Without a producer warpgroup the backend moves the TMA loads of the main loop onto an issuer
thread of consumer warpgroup 0, STAGES - 1 steps ahead of the wgmmas.  With ping-pong, that
warpgroup holds the turn from its O += P·V to its next S = Q·Kᵀ, and in between its issuer
waits for the other warpgroup to release a V stage, which the other one does only after it has
taken the turn: a deadlock (``h100_d128_pp_staged_persistent`` with ``warpspecialize: false``
hung on an H100 in bench/mapping_sweep.py's sweep).  The IR's turns and the concurrent
interpreter do not see that placement, so the backend refuses the combination."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "program, mapping",
    [("flash_attention2", "h100_d128_pp_staged_persistent"), ("flash_attention3", "h100_d64_pp")],
)
def test_pingpong_without_a_producer_warpgroup_is_refused(
    tmp_path, mapping_variant, program, mapping
):
    base = ROOT / "tests/mappings/full" / program / f"{mapping}.yaml"
    path = mapping_variant(base, "warpspecialize: true", "warpspecialize: false")
    cyp = ROOT / "programs" / f"{program}.cyp"
    r = CliRunner().invoke(main, ["build", str(cyp), "-m", str(path), "-o", str(tmp_path / "k")])
    assert r.exit_code == 1, r.output
    assert re.search(
        rf"^{re.escape(str(path))}:\d+:\d+: error\[E050\]: .*`pingpong` without warp "
        r"specialization: .*deadlock.*`warpspecialize: true`",
        r.output,
        re.M,
    ), r.output
    assert not (tmp_path / "k").exists()
    # without ping-pong the same mapping builds: the refusal is about the two together
    path = mapping_variant(
        base, "warpspecialize: true", "warpspecialize: false", ("pingpong: true", "pingpong: false")
    )
    r = CliRunner().invoke(main, ["build", str(cyp), "-m", str(path), "-o", str(tmp_path / "k2")])
    assert r.exit_code == 0, r.output
    cu = (tmp_path / "k2" / f"{program}.cu").read_text()
    assert "Tensor Core turn" not in cu and "named_arrive(" not in cu  # no turn barrier
