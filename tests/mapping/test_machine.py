"""The h100 machine model (DESIGN §2): processor levels, visibility, capacities."""

from __future__ import annotations

import pytest

from cypressc.mapping.machine import Machine, load_machine, machine_names


@pytest.fixture(scope="module")
def h100() -> Machine:
    return load_machine("h100")


def test_names():
    assert "h100" in machine_names()
    with pytest.raises(KeyError):
        load_machine("a100")


def test_levels_outermost_first(h100):
    assert h100.name == "h100" and "Hopper" in h100.description
    assert h100.processor_names == ("HOST", "BLOCK", "WARPGROUP", "WARP", "THREAD")
    assert [p.depth for p in h100.processors] == [0, 1, 2, 3, 4]
    assert [p.threads for p in h100.processors] == [0, 0, 128, 32, 1]
    assert h100.level("WARP").threads == 32
    with pytest.raises(KeyError):
        h100.level("CTA")


@pytest.mark.parametrize(
    "proc,visible",
    [
        ("HOST", {"GLOBAL"}),
        ("BLOCK", {"GLOBAL", "SHARED"}),
        ("WARPGROUP", {"GLOBAL", "SHARED"}),
        ("WARP", {"GLOBAL", "SHARED"}),
        ("THREAD", {"GLOBAL", "SHARED", "REGISTER"}),
    ],
)
def test_visibility(h100, proc, visible):
    for mem in ("GLOBAL", "SHARED", "REGISTER"):
        assert h100.visible(proc, mem) == (mem in visible)
    assert h100.visible(proc, "NONE")


def test_nesting(h100):
    assert h100.deeper_or_equal("THREAD", "BLOCK")
    assert h100.deeper_or_equal("HOST", "HOST")
    assert not h100.deeper_or_equal("WARPGROUP", "WARP")


def test_capacities_and_limits(h100):
    assert h100.memory_names == ("GLOBAL", "SHARED", "REGISTER", "NONE")
    assert h100.memory_bytes["GLOBAL"] is None
    assert h100.memory_bytes["SHARED"] == 227 * 1024
    assert h100.memory_bytes["REGISTER"] == 255 * 4
    assert h100.limits["max_threads_per_block"] == 1024
    assert h100.limits["warp_threads"] == 32 and h100.limits["warpgroup_warps"] == 4
    assert h100.limits["sms"] == 132


def test_cached(h100):
    assert load_machine("h100") is h100
