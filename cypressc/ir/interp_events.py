"""The event IR interpreter's events (DESIGN §5, "The interpreter"; Cypress paper §4.1's
event semantics): the instances an op's preconditions wait for (one instance, or every
instance matching a pattern with ``:`` where a reference spans a dimension), which of them
have completed, and waking the tasks that waited for them.

:class:`EventTracking` is a part of :class:`cypressc.ir.interp._Interp` (it calls its
``expr`` and ``_ready`` and keeps its ``done``, ``done_by``, ``patterns``, ``counts``,
``agg``, ``waiting``, ``procs`` and ``ev_dims``).
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir.analysis import dim_procs
from cypressc.ir.interp_views import InterpreterError, _Scope

__all__ = ["EventTracking"]


def _by_identity(table: dict, obj, make):
    """``make(obj)``, kept in ``table`` by the object's identity (the table keeps ``obj``
    alive, so no other object takes its id while the entry lasts)."""
    hit = table.get(id(obj))
    if hit is None or hit[0] is not obj:
        hit = table[id(obj)] = (obj, make(obj))
    return hit[1]


def _matches(t: tuple, pattern: tuple) -> bool:
    return all(p is None or p == x for x, p in zip(t, pattern))


class EventTracking:
    """Event instances waited for and completed (a part of
    :class:`cypressc.ir.interp._Interp`)."""

    # -- events ----------------------------------------------------------------------
    def required(self, refs, scope: _Scope, env: dict) -> set[tuple]:
        """The event keys a list of references waits for: ``(scope, event, index)`` of one
        instance, or ``(scope, event, pattern, count)`` for every instance matching
        ``pattern`` (``None`` where a reference spans a whole dimension: ``count`` instances)
        -- one key however many threads the event has."""
        out: set[tuple] = set()
        for r in refs:
            s = scope.find(r.name)
            op = s.defs[r.name]
            dims = self._ev_dims_of(op)
            idx = r.idx or (None,) * len(dims)
            if len(idx) != len(dims):
                raise InterpreterError(
                    f"%{r.name} has {len(dims)} dimension(s), used with {len(idx)}"
                )
            pattern, count = [], 1
            for d, i in zip(dims, idx):
                if i is None:
                    pattern.append(None)
                    count *= max(int(self.expr(d.extent, s, env)), 0)
                else:
                    pattern.append(int(self.expr(i, scope, env)))
            if None in pattern:
                out.add((s.uid, r.name, tuple(pattern), count))
            else:
                out.add((s.uid, r.name, tuple(pattern)))
        return out

    def _procs(self, dims: tuple[N.Dim, ...]) -> tuple[N.IProc, ...]:
        return _by_identity(self.procs, dims, dim_procs)

    def _ev_dims_of(self, op) -> tuple[N.Dim, ...]:
        """The dims of ``op``'s event (a ``pfor``'s has one more: its iterations)."""
        return _by_identity(
            self.ev_dims,
            op,
            lambda o: (
                o.dims + (N.Dim(N.ibin("-", o.hi, o.lo), o.proc),)
                if isinstance(o, N.PFor)
                else o.dims
            ),
        )

    def _met(self, key: tuple) -> bool:
        if len(key) == 3:
            return key in self.done
        pk = key[:3]
        if pk not in self.counts:  # a pattern's first waiter: count what has completed so far
            self.counts[pk] = sum(_matches(t, pk[2]) for t in self.done_by.get(pk[:2], ()))
            self.patterns.setdefault(pk[:2], []).append(pk[2])
        return self.counts[pk] >= key[3]

    def complete(self, op, scope: _Scope, env: dict, extra: tuple = ()) -> None:
        t = tuple([env[p] for p in self._procs(op.dims)]) + extra
        key = (scope.uid, op.ev, t)
        if key in self.done:
            return
        self.done.add(key)
        self.done_by.setdefault(key[:2], []).append(t)
        self._wake(key)
        for pat in self.patterns.get(key[:2], ()):
            if _matches(t, pat):
                pk = key[:2] + (pat,)
                n = self.counts[pk] = self.counts[pk] + 1
                if n in self.agg.get(pk, ()):
                    self._wake(pk + (n,))

    def _wake(self, key: tuple) -> None:
        for t in self.waiting.pop(key, ()):
            t.missing -= 1
            if t.missing == 0:
                self._ready(t)
