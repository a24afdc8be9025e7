"""The search of ``cypressc tune`` (docs/tuning.md): prune, rank, compile, check and time.

A space small enough (at most ``exhaustive`` combinations) is searched whole.  A larger one
is searched in two rounds: first every combination of the "tiles" knobs (tunables, atoms,
staging, pipeline depth) with the BLOCK flags held at their first candidate, then every
combination of the BLOCK flags around the ``keep`` best of the first round.  In each round
every candidate goes through the compiler (refusals pruned), the survivors are ranked by
:func:`~cypressc.tuner.prune.static_score`, and the best ``budget`` share of them is compiled
(in parallel, content-cached) and, unless ``compile_only``, checked and timed on the GPUs.
The starting mapping is always one of the candidates (the baseline).  Ctrl-C stops the
search where it is; what was measured so far is the result (``partial``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cypressc.frontend import front_end
from cypressc.lang.kinds import Mem
from cypressc.tuner.cache import JsonStore, cache_dir, compiler_fingerprint, digest
from cypressc.tuner.space import Space

__all__ = ["Options", "Candidate", "Result", "search", "OptionError", "bind_sizes", "kernel_sizes"]


class OptionError(ValueError):
    """Sizes or floats that do not fit the kernel; ``option`` names the command-line option
    that sets them (``--size``, ``--float``)."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass
class Options:
    """How to search: ``sizes`` bind every size the kernel takes; ``floats`` the values of
    its ``float`` parameters in the checking and timing runs (1.0 for one not given; not part
    of the tuning cache's key: a scalar's value does not change which mapping is fastest);
    ``budget`` caps the candidates compiled (the baseline comes on top); ``workers``
    processes/threads for pruning and nvcc (default: every core); ``reference`` a
    ``FILE.py:FUNC`` PyTorch reference (default: the baseline kernel's outputs)."""

    sizes: dict[str, int]
    floats: dict[str, float] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    compile_only: bool = False
    budget: int = 24
    keep: int = 2
    exhaustive: int = 256
    rounds: int = 5
    reps: int = 10
    workers: int | None = None
    gpus: int | None = None
    reference: str | None = None
    kernel_root: Path | None = None


@dataclass(eq=False)
class Candidate:
    """One point of the space: its knob ``values``, mapping ``text``, the compiler's
    ``verdict``, its static ``score``, the build (``dir``, ``hit``) and the measurement."""

    values: dict[str, Any]
    text: str
    label: str
    round: int
    baseline: bool = False
    verdict: dict | None = None
    score: float | None = None
    dir: str | None = None
    name: str | None = None
    hit: bool | None = None
    compile_s: float = 0.0
    error: str | None = None
    timing: dict | None = None

    @property
    def tflops(self) -> float | None:
        return self.timing["tflops"] if self.timing and self.timing.get("ok") else None


@dataclass
class Result:
    """What a search found: every candidate considered, counts, seconds per phase, the best
    and runner-up (by measured TFLOP/s; by static score when ``compile_only``)."""

    space: Space
    options: Options
    candidates: list[Candidate]
    device: str
    seconds: dict[str, float]
    partial: bool = False
    pruning: dict[str, int] = field(
        default_factory=dict
    )  # checked by the compiler, cached, processes

    def _ranked(self) -> list[Candidate]:
        timed = [c for c in self.candidates if c.tflops]
        if self.options.compile_only or (self.partial and not timed):
            built = [
                c for c in self.candidates if c.dir
            ]  # interrupted before any timing: the model's
            return sorted(built, key=lambda c: -(c.score or 0.0))
        return sorted(timed, key=lambda c: -c.tflops)  # type: ignore[operator]

    @property
    def ranked(self) -> list[Candidate]:
        return self._ranked()

    @property
    def best(self) -> Candidate | None:
        r = self._ranked()
        return r[0] if r else None

    @property
    def runner_up(self) -> Candidate | None:
        r = self._ranked()
        return r[1] if len(r) > 1 else None

    @property
    def baseline(self) -> Candidate | None:
        return next((c for c in self.candidates if c.baseline), None)

    def counts(self) -> dict[str, Any]:
        checked = [c for c in self.candidates if c.verdict is not None]
        pruned = [c for c in checked if not c.verdict["ok"]]
        tried = [c for c in self.candidates if c.dir or c.error]
        return {
            "considered": len(self.candidates),
            "pruned": len(pruned),
            "pruned_by": dict(Counter(c.verdict["code"] for c in pruned)),
            "compiled": sum(1 for c in tried if c.dir and not c.hit),
            "cache_hits": sum(1 for c in tried if c.hit),
            "build_failed": sum(1 for c in tried if c.error and not c.dir),
            "timed": sum(1 for c in self.candidates if c.tflops),
            "failed_check": sum(1 for c in self.candidates if c.timing and not c.timing.get("ok")),
        }


def search(program: str, mapping: str, opts: Options, *, progress=None) -> Result:
    """Tune ``mapping`` for ``program`` (paths).  Raises the compiler's errors for the
    starting mapping itself (it must compile), :class:`OptionError` (a ``ValueError``) for
    sizes that do not bind the kernel's (a size may be given by an alias: :func:`bind_sizes`;
    the result's ``options.sizes`` are the kernel's names) or floats it does not take; ``progress`` is a
    :class:`~cypressc.tuner.report.Progress` or ``None``."""
    from cypressc.tuner.build import build_many
    from cypressc.tuner.prune import check_all, check_candidate, pool_size, static_score

    t_start = time.perf_counter()
    secs = {"prune": 0.0, "compile": 0.0, "timing": 0.0}
    pruning = {"checked": 0, "cached": 0, "processes": 0}
    text = Path(mapping).read_text()
    prog_text = Path(program).read_text()
    space = _space(program, mapping, text, opts.dtypes)
    store = JsonStore(cache_dir() / "prune")
    fp = compiler_fingerprint()
    from cypressc.mapping.machine import load_machine

    machine = load_machine(space.lm.spec.machine)
    sms = int(machine.limits.get("sms", 132))
    smem_max = int(machine.memory_bytes.get(Mem.SHARED) or 232448)
    seen: dict[str, Candidate] = {}
    device = "none (--compile-only)" if opts.compile_only else _device_name()

    base = Candidate(dict(space.base), text, _label(text), 0, baseline=True)
    t0 = time.perf_counter()
    base_key = digest("prune-v1", fp, prog_text, opts.dtypes, text)
    v = store.get(base_key)
    if v is None:
        v = check_candidate((program, opts.dtypes, text, mapping))
        pruning["checked"] += 1
        if v["ok"] or v["code"] != "internal":
            store.put(base_key, v)
    else:
        pruning["cached"] += 1
    secs["prune"] += time.perf_counter() - t0
    if not v["ok"]:  # the user's own mapping: show the located error
        _front_and_compile(program, mapping, opts.dtypes)
    base.verdict, seen[text] = v, base
    opts = replace(
        opts, sizes=bind_sizes(opts.sizes, v["plan"]["sizes"], v["plan"].get("aliases", {}))
    )
    if bad := [f for f in opts.floats if f not in v["plan"].get("floats", [])]:
        raise OptionError(
            f"the kernel has no float parameter {', '.join(bad)}"
            + (f" (it has {', '.join(v['plan']['floats'])})" if v["plan"].get("floats") else ""),
            "--float",
        )
    floats = {f: float(opts.floats.get(f, 1.0)) for f in v["plan"].get("floats", [])}
    base.score = static_score(v["plan"], opts.sizes, sms, smem_max)

    def run_round(rnd: int, points: list[dict[str, Any]], budget: int) -> list[Candidate]:
        cands = []
        for vals in points:
            t = space.render(vals)
            if t not in seen:
                seen[t] = Candidate(vals, t, _label(t), rnd)
            cands.append(seen[t])
        cands = list(dict.fromkeys(cands))
        todo = [c for c in cands if c.verdict is None]
        t0 = time.perf_counter()
        keys = {c.label: digest("prune-v1", fp, prog_text, opts.dtypes, c.text) for c in todo}
        fresh = []
        for c in todo:
            c.verdict = store.get(keys[c.label])
            if c.verdict is None:
                fresh.append(c)
        if progress:
            progress.start(
                "prune", f"round {rnd}: checking", len(todo), done=len(todo) - len(fresh)
            )
        results = check_all(
            [(program, opts.dtypes, c.text, mapping) for c in fresh],
            workers=opts.workers,
            on_done=lambda i, r: progress and progress.advance("prune"),
        )
        for c, r in zip(fresh, results):
            c.verdict = r
            if r["ok"] or r["code"] != "internal":  # a compiler bug is never cached
                store.put(keys[c.label], r)
        secs["prune"] += time.perf_counter() - t0
        pruning["checked"] += len(fresh)
        pruning["processes"] = max(pruning["processes"], pool_size(len(fresh), opts.workers))
        pruning["cached"] += len(todo) - len(fresh)
        if progress and hasattr(progress, "finish"):
            refused = Counter(c.verdict["code"] for c in todo if not c.verdict["ok"])
            by = ", ".join(f"{k} {n}" for k, n in sorted(refused.items()))
            progress.finish(
                "prune",
                f"pruned {sum(refused.values())} of {len(todo)}"
                + (f" ({by})" if by else "")
                + (
                    f", {len(todo) - len(fresh)} from the prune cache"
                    if len(fresh) < len(todo)
                    else ""
                ),
            )
        ok = [c for c in cands if c.verdict["ok"]]
        for c in ok:
            c.score = static_score(c.verdict["plan"], opts.sizes, sms, smem_max)
        ok.sort(key=lambda c: -(c.score or 0.0))
        chosen = [c for c in ok if not c.dir and not c.error][:budget]
        if rnd == 1:
            chosen = [base] + [c for c in chosen if c is not base][:budget]
        _compile(chosen, rnd)
        if not opts.compile_only:
            _time([c for c in chosen if c.dir and c.timing is None], rnd)
        return ok

    def _compile(chosen: list[Candidate], rnd: int) -> None:
        t0 = time.perf_counter()
        if progress:
            progress.start("compile", f"round {rnd}: compiling", len(chosen))
        jobs = [
            lambda c=c: front_end(program, mapping, dtypes=opts.dtypes, mapping_text=c.text)
            for c in chosen
        ]

        def done(i: int, r: Any) -> None:
            c = chosen[i]
            if isinstance(r, BaseException):
                c.error = f"{type(r).__name__}: {r}" + (
                    f"\n{r.log}" if getattr(r, "log", "") else ""
                )
            else:
                c.dir, c.name, c.hit, c.compile_s = str(r.dir), r.name, r.hit, r.seconds
            if progress:
                progress.advance("compile")

        build_many(jobs, workers=opts.workers, root=opts.kernel_root, on_done=done)
        secs["compile"] += time.perf_counter() - t0
        if progress and hasattr(progress, "finish"):
            hits = sum(1 for c in chosen if c.hit)
            failed = sum(1 for c in chosen if c.error and not c.dir)
            progress.finish(
                "compile",
                f"{len(chosen) - hits - failed} compiled, {hits} from the kernel cache, "
                f"{failed} failed to build",
            )

    def _time(chosen: list[Candidate], rnd: int) -> None:
        from cypressc.tuner.timing import time_candidates

        if not chosen:
            return
        t0 = time.perf_counter()
        need_base = opts.reference is None and base not in chosen
        cands = ([base] if need_base else []) + chosen
        if progress:
            progress.start("time", f"round {rnd}: checking and timing", len(cands) + opts.rounds)
        by_label = {c.label: c for c in cands}

        def on_event(ev: dict) -> None:  # results land as they come: Ctrl-C keeps them
            c = by_label.get(ev.get("label") or "")
            if ev.get("event") == "result" and c is not None:
                c.timing = {k: v for k, v in ev.items() if k not in ("event", "label", "gpu")} | {
                    "ok": True
                }
            elif ev.get("event") == "checked" and not ev["ok"] and c is not None:
                c.timing = {
                    k: v for k, v in ev.items() if k not in ("event", "label", "gpu", "fatal")
                }
            if progress and ev.get("event") in ("checked", "round"):
                progress.advance("time")
            if progress:
                progress.event(ev, c)

        res = time_candidates(
            [{"label": c.label, "dir": c.dir, "name": c.name} for c in cands],
            opts.sizes,
            floats=floats,
            reference=opts.reference,
            baseline=base.label,
            rounds=opts.rounds,
            reps=opts.reps,
            gpus=opts.gpus,
            on_event=on_event,
        )
        for label, r in res.items():
            if label in by_label and (by_label[label].timing is None or r.get("ok")):
                by_label[label].timing = r
        secs["timing"] += time.perf_counter() - t0
        if progress and hasattr(progress, "finish"):
            ok = sum(1 for c in cands if c.tflops)
            progress.finish(
                "time",
                f"{ok} timed, {sum(1 for c in cands if c.timing and not c.timing.get('ok'))} "
                "failed the check",
            )

    partial = False
    try:
        if space.size() <= opts.exhaustive:
            run_round(
                1, list(space.product([k.name for k in space.knobs], space.base)), opts.budget
            )
        else:
            first = {k.name: k.candidates[0] for k in space.knobs if k.group == "block"}
            tiles = [k.name for k in space.knobs if k.group == "tiles"]
            n1, n2 = round_budgets(opts.budget)
            ok = run_round(1, list(space.product(tiles, {**space.base, **first})), n1)
            measured = [c for c in ok if c.tflops]
            top = (
                sorted(measured, key=lambda c: -c.tflops)[: opts.keep]
                if measured
                else ok[: opts.keep]
            )  # type: ignore[operator]
            flags = [k.name for k in space.knobs if k.group == "block"]
            points = [p for c in top for p in space.product(flags, c.values)]
            if n2:
                run_round(2, points, n2)
    except KeyboardInterrupt:
        partial = True
        from cypressc.tuner.worker_pool import stop_workers

        stop_workers()
    secs["total"] = time.perf_counter() - t_start
    return Result(space, opts, list(seen.values()), device, secs, partial, pruning)


def bind_sizes(
    given: Mapping[str, int], sizes: list[str], aliases: Mapping[str, str]
) -> dict[str, int]:
    """``given`` as the kernel's ``sizes`` (in their order), each given by its name or one
    of its ``aliases`` (``C_d0`` for ``M``: :mod:`cypressc.passes.entry_sizes`).  Raises
    :class:`OptionError` for a size left out, a name the kernel does not have, or two names
    of one size with different values."""
    from cypressc.abi import resolve_aliases

    def names(s: str) -> str:
        other = [a for a, t in aliases.items() if t == s]
        return s + (f" (or {', '.join(other)})" if other else "")

    try:
        bound = resolve_aliases(given, aliases)
    except ValueError as e:
        raise OptionError(str(e), "--size") from None
    missing = [s for s in sizes if s not in bound]
    extra = [s for s in bound if s not in sizes]
    if missing or extra:
        raise OptionError(
            f"the kernel's sizes are {', '.join(names(s) for s in sizes)}: "
            + (
                f"bind {', '.join(missing)} with --size NAME=N"
                if missing
                else f"it has no size {', '.join(extra)}"
            ),
            "--size",
        )
    return {s: bound[s] for s in sizes}


def kernel_sizes(tree) -> tuple[list[str], dict[str, str]]:
    """The sizes of the kernel that task tree ``tree`` builds and their aliases, read off its
    entrypoint (:func:`cypressc.passes.entry_sizes.entry_sizes`, as dependence analysis
    names them) without compiling."""
    from cypressc.passes.entry_sizes import entry_sizes

    es = entry_sizes(tree.root.variant)
    return list(es.sizes), dict(es.aliases)


def round_budgets(budget: int) -> tuple[int, int]:
    """How a large space's two rounds (tiles, then block knobs on the best tiles) share
    ``budget`` compiled candidates: about two thirds to the first; together never more than
    ``budget`` (the starting mapping comes on top)."""
    n1 = max(1, min(budget, (2 * budget + 2) // 3))
    return n1, budget - n1


def _label(text: str) -> str:
    return digest("candidate", text)[:10]


def _device_name() -> str:
    try:
        import torch
    except ImportError:
        raise RuntimeError(
            "timing candidates needs PyTorch with CUDA (pip install torch); or pass --compile-only"
        ) from None
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is visible; pass --compile-only to prune and compile only")
    return torch.cuda.get_device_name(0)


_SPACES: dict[str, Space] = {}


def _space(program: str, mapping: str, text: str, dtypes: Mapping[str, str]) -> Space:
    """The mapping's space, kept for this process: the tunes of one mapping at several sizes
    share it and its rendered candidates (:meth:`Space.render` is memoized)."""
    from cypressc.tuner.space import derive_space

    key = digest(
        "space", Path(program).read_text(), program, mapping, text, dict(sorted(dtypes.items()))
    )
    if key not in _SPACES:
        _SPACES[key] = derive_space(
            front_end(program, mapping, dtypes=dtypes, mapping_text=text), text
        )
    return _SPACES[key]


def _front_and_compile(program: str, mapping: str, dtypes: Mapping[str, str]) -> None:
    """Re-run the starting mapping through the compiler so its refusal propagates located."""
    from cypressc.pipeline import compile_module

    compile_module(front_end(program, mapping, dtypes=dtypes))
    raise RuntimeError("the starting mapping was refused by a pruning check but compiles")
