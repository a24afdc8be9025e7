"""Several kernels from one program: the entry task's body cut into one event-IR module per
kernel (issue #38; DESIGN §7 "Reductions and several kernels").

A HOST-level entry task that launches BLOCK-level task trees one after another (the
attention backward's preprocess → main → postprocess) is several kernels, launched in
stream order.  Dependence analysis (:mod:`cypressc.passes.dependence_analysis`) lowers the
whole entry task as one module and records, for each statement of the entry's body that
reaches a BLOCK instance, the range of top-level ops it emitted (a :class:`KernelSegment`).
:func:`split_kernels` cuts one :class:`~cypressc.ir.nodes.Module` per segment, so every
later pass keeps its one-kernel ``Module -> Module`` contract:

* its body is the HOST-level ``let``\\ s and partitions the segment uses, then the
  segment's ops;
* an event of another kernel is dropped from its preconditions: the stream orders the
  kernels, so a kernel starts after every earlier one finished (a true or anti dependence
  between kernels needs no sync op);
* its parameters are the entry tensors it touches; it keeps every size and float of the
  program (a kernel's launcher takes the program's sizes, whether it reads them or not).

A program with one kernel is one segment or none: :func:`split_kernels` is not called and
its module is exactly what it was.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace

from cypressc.diagnostics import Loc
from cypressc.ir import nodes as N
from cypressc.ir.subst import rename_events, walk_ops

__all__ = ["KernelSegment", "split_kernels", "kernel_name"]


@dataclass(frozen=True)
class KernelSegment:
    """One kernel of a program: top-level ops ``[start, end)`` of the whole-program module,
    ``block`` the BLOCK :class:`~cypressc.mapping.tasktree.TaskNode` that is its block
    program (its knobs are the kernel's), ``loc`` the entry task's statement that launches
    it."""

    start: int
    end: int
    block: object
    loc: Loc


def kernel_name(program: str, instances: list[str], i: int) -> str:
    """The name of kernel ``i`` of ``program`` whose BLOCK instances are ``instances`` (one
    per kernel, in order): ``<program>_<instance>``, with ``_<n>`` appended when the same
    instance runs again as the n-th kernel of that name (``two_gemms_gemm_block_2``)."""
    inst = instances[i]
    n = instances[: i + 1].count(inst)
    return f"{program}_{inst}" + (f"_{n}" if n > 1 else "")


def _names(x: object, out: set[str]) -> set[str]:
    """Every tensor, partition and scalar name ``x`` (an op, a view, an expression, or a
    tuple of them; loop bodies included) refers to."""
    if isinstance(x, N.TRef):
        out.add(x.name)
    elif isinstance(x, N.Piece):
        out.add(x.partition)
        _names(x.idx, out)
    elif isinstance(x, N.IVar):
        out.add(x.name)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _names(y, out)
    elif is_dataclass(x) and not isinstance(x, type):
        for f in fields(x):
            _names(getattr(x, f.name), out)
    return out


def split_kernels(
    m: N.Module, segments: list[KernelSegment], names: list[str], targets: list
) -> list[N.Module]:
    """One module per kernel of ``m``, the whole program's module from dependence analysis.

    ``segments`` (in order, disjoint) are the kernels' top-level op ranges; ``names`` and
    ``targets`` their module names and :class:`~cypressc.ir.target.Target`\\ s.  Every
    top-level op outside the segments must be a ``Let`` or a ``Partition`` (dependence
    analysis refuses anything else, E051).  Each module is the parameters of ``m`` the kernel
    touches, every size and float, the ``let``\\ s and partitions it uses and its ops; a
    precondition on another kernel's event is dropped (stream order realizes it)."""
    top = m.body.ops
    inside = {i for s in segments for i in range(s.start, s.end)}
    prelude = [(i, top[i]) for i in range(len(top)) if i not in inside]
    out = []
    for seg, name, target in zip(segments, names, targets):
        ops = list(top[seg.start : seg.end])
        used = _names(tuple(ops), set())
        keep: list[N.Op] = []
        for i, op in reversed(prelude):  # a definition precedes its uses: walk back once
            if i < seg.start and op.name in used:
                keep.append(op)
                _names(op, used)
        ops = keep[::-1] + ops
        own = {o.ev for o in walk_ops(N.Block(tuple(ops))) if isinstance(o, N.AsyncOp)}

        def refs(rs, own=own):
            return tuple(r for r in rs if r.name in own)

        body = N.Block(tuple(rename_events(o, refs) for o in ops))
        params = tuple(p for p in m.params if p.name in used)
        out.append(replace(m, name=name, params=params, body=body, target=target))
    return out
