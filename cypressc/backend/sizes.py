"""Sizes to suggest and to check at: ``cypressc build``'s example run and the sizes of
``explain --check-schedule`` (issue #35).

Both must be sizes the kernel accepts: every ``requires`` condition of its ABI holds
(evaluated with :func:`cypressc.abi.exprs.eval_expr`, the evaluator the runtime and the tuner
use), and the example's tensors fit a GPU.  Everything here is read off the kernel (its
size arguments, the tensors' dimensions, the ``requires`` trees, the IR's partitions), never
off the program's name:

* a size that a ``partition_by_slices`` peels (a batch or head count) starts at 8, any other
  tensor dimension at 4096, an ``int`` argument that fixes no tensor's shape (a flag such as
  FlashAttention's ``causal``) at 0 -- 1 where the kernel divides by it;
* :func:`satisfy` then repairs each failing condition by moving one size it reads (``D <=
  128`` takes D from 4096 down to 128), and the largest dimensions are halved until the
  tensors take at most :data:`EXAMPLE_BYTES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cypressc.abi.dtypes import DTYPES
from cypressc.abi.exprs import eval_expr, expr_names
from cypressc.ir import nodes as N
from cypressc.ir.analysis import binary_exprs, free_vars, shapeless_scalars
from cypressc.lang.kinds import PartKind

__all__ = [
    "EXAMPLE_BYTES",
    "check_sizes",
    "example_sizes",
    "failed",
    "flag_sizes",
    "satisfy",
    "shown",
    "sliced_sizes",
    "tensor_bytes",
]

EXAMPLE_BYTES = 2 << 30  # the example run's tensors, all together: 2 GiB fits any Hopper GPU
_TOP = 4096  # a tile dimension of the example run
_BATCH = 8  # a sliced (batch, head) dimension of the example run


def failed(
    requires: Sequence[Mapping[str, Any]], sizes: Mapping[str, int]
) -> list[Mapping[str, Any]]:
    """The conditions (``{"tree": …, "why": …}`` of the ABI's ``requires``) that do not hold
    at ``sizes``; one that cannot be evaluated there (a division by zero) fails too."""
    out = []
    for r in requires:
        try:
            ok = eval_expr(r["tree"], sizes)
        except (ZeroDivisionError, ValueError):
            ok = False
        if not ok:
            out.append(r)
    return out


def _consts(tree: Mapping[str, Any]) -> set[int]:
    if "const" in tree:
        return {tree["const"]} if isinstance(tree["const"], int) else set()
    if "var" in tree:
        return set()
    return _consts(tree["a"]) | _consts(tree["b"])


def _candidates(v: int, consts: Iterable[int], grow: bool) -> list[int]:
    """Values to try for a size now at ``v``: growing, every integer above it up to a bound;
    shrinking, its halvings and the constants the conditions name below it, largest first
    (never 0: an empty dimension launches nothing worth running)."""
    if grow:
        return list(range(v + 1, max(2 * v, _TOP) + 1))
    down = {v >> k for k in range(1, v.bit_length())} | {c for c in consts if 0 < c < v}
    return sorted(down, reverse=True)


def satisfy(
    requires: Sequence[Mapping[str, Any]],
    sizes: Mapping[str, int],
    *,
    grow: bool,
    keep: Iterable[str] = (),
) -> dict[str, int]:
    """``sizes`` with each failing condition repaired in turn by moving one size it reads
    (not one of ``keep``) to the first candidate (:func:`_candidates`) at which it holds and
    no condition that held fails.  A condition no single move repairs is left failing:
    :func:`failed` tells the caller."""
    out = dict(sizes)
    keep = set(keep)
    consts = set().union(*(_consts(r["tree"]) for r in requires)) if requires else set()
    for _ in range(4 * len(requires) + 1):
        bad = failed(requires, out)
        if not bad:
            break
        before = len(bad)
        moved = False
        for r in bad:
            for name in dict.fromkeys(expr_names(r["tree"])):
                if name not in out or name in keep:
                    continue
                for c in _candidates(out[name], consts, grow):
                    trial = {**out, name: c}
                    now = failed(requires, trial)
                    if r not in now and len(now) < before:
                        out, moved = trial, True
                        break
                if moved:
                    break
            if moved:
                break
        if not moved:
            break
    return out


def sliced_sizes(m: N.Module) -> set[str]:
    """The size arguments a ``partition_by_slices`` peels off (batch and head counts)."""
    from cypressc.ir.analysis import Symbols
    from cypressc.ir.subst import walk_ops

    sym = Symbols(m)
    out: set[str] = set()
    for op in walk_ops(m.body):
        if isinstance(op, N.Partition) and op.kind == PartKind.SLICES:
            d = sym.shape(op.base)[op.params[0].value]
            if isinstance(d, N.IVar) and d.name in m.scalars:
                out.add(d.name)
    return out


def flag_sizes(m: N.Module) -> dict[str, int]:
    """The ``int`` arguments that fix no tensor's shape, each with the value it starts at: 0
    (a flag off), or 1 where the kernel divides by it."""
    divisors = {
        v for e in binary_exprs(m.body) if e.op in ("/", "//", "%", "cdiv") for v in free_vars(e.b)
    }
    return {s: 1 if s in divisors else 0 for s in shapeless_scalars(m)}


def tensor_bytes(info, sizes: Mapping[str, int]) -> int:
    """The bytes of all of the kernel's tensors at ``sizes`` (``info``: its KernelInfo)."""
    total = 0
    for p in info.params:
        n = DTYPES[p.dtype].itemsize
        for d in info.shape(p, sizes):
            n *= d
        total += n
    return total


def _requires(info) -> list[dict]:
    return [{"tree": r.tree, "why": r.why} for r in info.requires]


def example_sizes(info, m: N.Module) -> dict[str, int]:
    """Sizes for the suggested harness run of the kernel whose ABI is ``info`` (a
    :class:`~cypressc.abi.info.KernelInfo`) and IR ``m``: every ``requires`` condition holds
    where one can be met, and the tensors take at most :data:`EXAMPLE_BYTES`."""
    shaped = {d for p in info.params for d in p.dims}  # a kernel of several may not take them all
    flags = {s: v for s, v in flag_sizes(m).items() if s not in shaped}
    sliced = sliced_sizes(m)
    sizes = {s: flags.get(s, _BATCH if s in sliced else _TOP) for s in info.sizes}
    reqs = _requires(info)
    sizes = satisfy(reqs, sizes, grow=False, keep=flags)
    while tensor_bytes(info, sizes) > EXAMPLE_BYTES:
        dims = sorted(
            (s for s in sizes if s not in flags and sizes[s] > 1), key=lambda s: -sizes[s]
        )
        if not dims:
            break
        sizes = satisfy(reqs, {**sizes, dims[0]: sizes[dims[0]] // 2}, grow=False, keep=flags)
    return sizes


def check_sizes(
    m: N.Module, requires: Sequence[Mapping[str, Any]], small: Mapping[str, int]
) -> dict[str, int]:
    """``small`` (the schedule check's smallest sizes, :func:`cypressc.ir.schedule_check.small_sizes`)
    grown where a ``requires`` condition of the kernel fails there (``D % 8 == 0`` takes
    FlashAttention's D from 1 to 8): the check runs at sizes the launcher accepts."""
    return satisfy(requires, small, grow=True, keep=flag_sizes(m))


def shown(sizes: Mapping[str, object]) -> str:
    """``B=1 H=1 M=128``: sizes as the command line writes them."""
    return " ".join(f"{k}={v}" for k, v in sizes.items())
