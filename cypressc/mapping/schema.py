"""The mapping specification's schema (Cypress paper §3.3, Fig. 3 and Fig. 5b; DESIGN §2).

A mapping is a list of task-mapping **instances**.  Each binds one variant to a
processor level, a memory per tensor parameter, values for the variant's tunables,
and the instances its launches dispatch to.  Block-level instances also carry the
performance knobs of §4.2.4–§4.2.5 (warp specialization, pipeline depth, shared
memory bound, register split).  Unknown keys are errors (``extra="forbid"``), and
types are strict (``strict=True``): ``pipeline: "3"`` is not 3 and ``warpspecialize: 1``
is not true.  Tunable values are kept as written (an int, a bool or a string) for the
task tree to check against each tunable's declared kind, so ``NWG: true`` is never 1.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Tag,
    field_validator,
    model_validator,
)

from cypressc.lang.kinds import Mem, Proc

__all__ = [
    "Instance",
    "TreeEntry",
    "TemplateLevel",
    "MappingSpec",
    "Proc",
    "Mem",
    "parse_bytes",
    "ENTRY_TAGS",
]

# the YAML's names of levels and memories, validated into the members (strictly: a name, not
# a number); a wrong one is a literal error listing the names ('HOST', 'BLOCK', ...: a
# member's repr is its string), the error the project's message is built from (M002)
ProcName = Literal[tuple(Proc)]
MemName = Literal[tuple(Mem)]

_BYTES = re.compile(r"^\s*(\d+)\s*(B|KiB|KB|K)?\s*$")


def parse_bytes(v: int | str) -> int:
    """``200KiB`` / ``204800`` / ``196K`` -> bytes.  Raises ``ValueError`` otherwise."""
    if isinstance(v, bool):
        raise ValueError("expected a byte count such as 200KiB")
    if isinstance(v, int):
        return v
    m = _BYTES.match(str(v))
    if not m:
        raise ValueError(f"'{v}' is not a byte count; write e.g. 200KiB or 204800")
    n, unit = int(m.group(1)), m.group(2) or "B"
    return n * (1024 if unit in ("KiB", "K") else 1000 if unit == "KB" else 1)


def _tunable_value(v: object) -> int | str:
    """A tunable's value as written: an int (a bool stays a bool) or a name.

    Kinds are checked by the task tree, which knows each tunable's declaration (M016);
    anything else (null, a float, a list, a mapping) is refused here.
    """
    if isinstance(v, (int, str)):
        return v
    what = {type(None): "null", list: "a list", dict: "a mapping"}.get(type(v), repr(v))
    raise ValueError(f"a tunable value is an integer or a name, not {what}")


TunableValue = Annotated[int | str, PlainValidator(_tunable_value)]


class Instance(BaseModel):
    """One task-mapping instance (paper Fig. 3 ``TaskMapping``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    instance: str = Field(description="the instance's name, referenced by `calls` and `entrypoint`")
    variant: str = Field(
        description="the task variant (a def name in the program) it runs; "
        "defaults to the instance's name"
    )
    proc: ProcName = Field(description="the processor level it runs on")
    mems: list[MemName] = Field(description="one memory per tensor parameter, in order")
    tunables: dict[str, TunableValue] = Field(
        default_factory=dict, description="values for the variant's tunables"
    )
    calls: list[str] = Field(
        default_factory=list, description="instances that the variant's launches dispatch to"
    )
    warpspecialize: bool | None = Field(default=None, description="BLOCK: producer/consumer roles")
    pipeline: int | None = Field(
        default=None, ge=1, le=8, description="BLOCK: stage depth D of pipelined loops"
    )
    mma_in_flight: int | None = Field(
        default=None, ge=0, le=4, description="BLOCK: wgmma groups left in flight (Tawa's P)"
    )
    smem_limit: int | None = Field(
        default=None, ge=1, description="BLOCK: shared-memory bound in bytes"
    )
    producer_registers: int | None = Field(default=None, ge=24, le=256)
    consumer_registers: int | None = Field(default=None, ge=24, le=256)
    persistent: bool | None = Field(
        default=None, description="BLOCK: one block per SM looping over tiles"
    )
    raster: int | None = Field(
        default=None, ge=1, le=64, description="BLOCK: grid rasterization group height (L2 reuse)"
    )
    pingpong: bool | None = Field(
        default=None, description="BLOCK: consumer warpgroups take turns on the Tensor Core"
    )
    deterministic: bool | None = Field(
        default=None,
        description="BLOCK: each tile's reduce-adds in the order of the grid's innermost dimension",
    )
    cluster: list[Annotated[int, Field(ge=1, le=8)]] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        description="BLOCK: blocks per thread-block cluster along each grid dimension (block_id.x "
        "first); a tile the blocks of a cluster share is loaded once and multicast",
    )

    @model_validator(mode="before")
    @classmethod
    def _variant_defaults_to_instance(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "variant" not in data
            and isinstance(data.get("instance"), str)
        ):
            return {**data, "variant": data["instance"]}
        return data

    @field_validator("smem_limit", mode="before")
    @classmethod
    def _bytes(cls, v: object) -> object:
        return None if v is None else parse_bytes(v)  # type: ignore[arg-type]

    @field_validator("producer_registers", "consumer_registers")
    @classmethod
    def _regs(cls, v: int | None) -> int | None:
        if v is not None and v % 8:
            raise ValueError("setmaxnreg takes a multiple of 8")
        return v


class TemplateLevel(BaseModel):
    """One level of a mapping template (issue #37): the row a ``tree:`` entry expands to at
    this processor level.  ``variant`` may say ``{tree}`` for the entry's task name;
    ``suffix`` is appended to the entry's instance name (the first level's is usually "");
    ``mems`` says which of the entry's memory lists the row takes: ``top`` (``mems``),
    ``inner`` (``inner_mems``, default ``mems``) or ``leaf`` (``leaf_mems``, default the
    inner list with NONE made REGISTER); ``tunables`` are the level's fixed values."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    suffix: str = Field(description="appended to the entry's instance name")
    variant: str = Field(description="the variant, `{tree}` standing for the task's name")
    proc: ProcName = Field(description="the processor level of this row")
    mems: Literal["top", "inner", "leaf"] = Field(description="which memory list the row takes")
    tunables: dict[str, TunableValue] = Field(default_factory=dict)


class TreeEntry(BaseModel):
    """A whole task tree mapped in one entry (issue #37 item 2): ``{tree: mma, mems: [NONE,
    SHARED, SHARED]}`` expands, through ``template`` (default ``wgmma``, in
    cypressc/lib/hopper.yaml), to one instance per level, each calling the next
    (:mod:`cypressc.mapping.templates`).  ``tunables`` go to the rows whose variants declare
    them; the mapping's shared ``tunables:`` fill in the rest."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tree: str = Field(description="the task whose tree is mapped (its variants name the levels)")
    instance: str | None = Field(
        default=None, description="the first row's instance name (default: the task's name)"
    )
    template: str = Field(default="wgmma", description="the mapping template to expand")
    proc: ProcName | None = Field(
        default=None, description="the first level (must be the template's, if given)"
    )
    mems: list[MemName] = Field(description="one memory per tensor parameter at the top level")
    inner_mems: list[MemName] | None = Field(
        default=None, description="the levels between the top and the leaf (default: mems)"
    )
    leaf_mems: list[MemName] | None = Field(
        default=None, description="the leaf level (default: inner_mems with NONE as REGISTER)"
    )
    tunables: dict[str, TunableValue] = Field(
        default_factory=dict, description="values for the tree's rows that declare them"
    )


# an entry of `instances:` is a tree entry when it has a `tree:` key; the tags appear in
# pydantic's error locations, and the loader drops them (mapping/loader.py)
ENTRY_TAGS = ("instance", "tree")


def _entry_kind(v: Any) -> str:
    if isinstance(v, dict):
        return "tree" if "tree" in v else "instance"
    return "tree" if isinstance(v, TreeEntry) else "instance"


Entry = Annotated[
    Annotated[Instance, Tag("instance")] | Annotated[TreeEntry, Tag("tree")],
    Discriminator(_entry_kind),
]


def _tune_values(v: object) -> list[bool | int | str | list[int]]:
    """A knob's candidates in the ``tune:`` section: one value (the knob is fixed) or a
    non-empty list of scalars; a list-valued knob's (``cluster``) candidates are lists of
    integers (``cluster: [[1, 1], [2, 1]]``; one list of integers is read by the tuner as one
    shape).  Whether each fits its knob is checked against the program
    (:mod:`cypressc.tuner.space`, M024)."""
    values = v if isinstance(v, list) else [v]
    if not values:
        raise ValueError("lists no values; write at least one, or drop the key")
    for x in values:
        shape = isinstance(x, list) and x and all(type(i) is int for i in x)
        if not (isinstance(x, (bool, int, str)) or shape):
            what = {type(None): "null", list: "a list", dict: "a mapping"}.get(type(x), repr(x))
            raise ValueError(
                f"a candidate is an integer, a bool, a name or a list of integers, not {what}"
            )
    return values


TuneValues = Annotated[list[bool | int | str | list[int]], PlainValidator(_tune_values)]


class MappingSpec(BaseModel):
    """A whole mapping file: the machine, the entrypoint instance and the instances."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    machine: str = Field(description="machine model name, e.g. h100")
    entrypoint: str = Field(description="the root instance (runs on HOST)")
    instances: list[Entry] = Field(min_length=1)
    tunables: dict[str, TunableValue] = Field(
        default_factory=dict,
        description="tunables shared by name: every instance whose variant declares one "
        "and does not bind it takes this value",
    )
    templates: dict[str, list[TemplateLevel]] = Field(
        default_factory=dict,
        description="mapping templates of this file, beside the library's (cypressc/lib/*.yaml)",
    )
    tune: dict[str, TuneValues] | None = Field(
        default=None,
        description="`cypressc tune`: candidate values per knob (docs/tuning.md); "
        "ignored by every other command",
    )
