"""The mapping schema (pydantic, extra="forbid")."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cypressc.mapping.schema import Instance, MappingSpec, parse_bytes

BASE = {"instance": "i", "variant": "v", "proc": "BLOCK", "mems": ["GLOBAL"]}


@pytest.mark.parametrize(
    "text,n",
    [
        (204800, 204800),
        ("200KiB", 204800),
        ("196K", 196 * 1024),
        ("100KB", 100000),
        ("512B", 512),
        (" 64 ", 64),
    ],
)
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("bad", [True, "200MiB", "lots", "-5", "1.5KiB", ""])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ValueError):
        parse_bytes(bad)


def test_instance_defaults():
    i = Instance(**BASE)
    assert i.tunables == {} and i.calls == []
    for knob in (
        "warpspecialize",
        "pipeline",
        "mma_in_flight",
        "smem_limit",
        "producer_registers",
        "consumer_registers",
        "raster",
    ):
        assert getattr(i, knob) is None
    assert Instance(**BASE, smem_limit="227KiB").smem_limit == 232448


@pytest.mark.parametrize(
    "extra",
    [
        {"pipelines": 4},
        {"proc": "CTA"},
        {"mems": ["SMEM"]},
        {"pipeline": 0},
        {"pipeline": 9},
        {"mma_in_flight": 5},
        {"producer_registers": 20},
        {"consumer_registers": 233},
        {"raster": 0},
        {"smem_limit": "big"},
        {"tunables": {"U": 1.5}},
    ],
)
def test_instance_rejects(extra):
    with pytest.raises(ValidationError):
        Instance(**{**BASE, **extra})


def test_spec_needs_instances():
    with pytest.raises(ValidationError):
        MappingSpec(machine="h100", entrypoint="i", instances=[])
    spec = MappingSpec(machine="h100", entrypoint="i", instances=[Instance(**BASE)])
    assert spec.instances[0].instance == "i"
    with pytest.raises(ValidationError):
        MappingSpec(machine="h100", entrypoint="i", instances=[BASE], extra=1)
