"""What ``cypressc tune`` shows and keeps: progress bars, the table of the top candidates,
the best mapping as YAML with a header comment, and the tuning cache entry."""

from __future__ import annotations

from typing import Any

from cypressc.tuner.cache import JsonStore, cache_dir, compiler_fingerprint, digest
from cypressc.tuner.search import Candidate, Result

__all__ = [
    "Progress",
    "table",
    "best_yaml",
    "closing_note",
    "failures",
    "failure_lines",
    "tuning_key",
    "store_result",
    "cached_result",
]


class Progress:
    """Progress of a search on stderr, one of three ways (``mode``): ``"bars"``, rich progress
    bars (for a terminal); ``"lines"``, plain lines for a log file or a pipe — each phase's
    start, a line at every tenth of it (at most one per :attr:`GAP` seconds, and one at least
    every :attr:`QUIET` seconds while it advances), its end with its counts and seconds, and
    each GPU worker start; ``"off"``, nothing.  ``True``/``False`` mean bars/off."""

    GAP, QUIET = 2.0, 30.0

    def __init__(self, mode: bool | str = True, stream: Any = None) -> None:
        import sys

        self.mode = {True: "bars", False: "off"}.get(mode, mode)  # type: ignore[call-overload]
        if self.mode not in ("bars", "lines", "off"):
            raise ValueError(f"progress mode {mode!r}: bars, lines or off")
        self._stream = stream if stream is not None else sys.stderr
        self._tasks: dict[str, Any] = {}
        self._phases: dict[str, dict[str, Any]] = {}
        self._p = None
        if self.mode == "bars":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._p = RichProgress(
                TextColumn("{task.description:<34}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )

    def __enter__(self) -> Progress:
        if self._p is not None:
            self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()

    def _line(self, text: str) -> None:
        self._stream.write(f"tune: {text}\n")
        self._stream.flush()

    def start(self, phase: str, description: str, total: int, done: int = 0) -> None:
        import time

        now = time.perf_counter()
        self._phases[phase] = {
            "what": description,
            "total": total,
            "done": done,
            "t0": now,
            "said": now,
            "step": done * 10 // max(1, total),
        }
        if self.mode == "lines":
            self._line(
                f"{description}: {total} candidate{'s' if total != 1 else ''}"
                + (f" ({done} already done)" if done else "")
            )
        elif self._p is not None:
            if phase in self._tasks:
                self._p.update(
                    self._tasks[phase], description=description, total=total, completed=done
                )
            else:
                self._tasks[phase] = self._p.add_task(description, total=total, completed=done)

    def advance(self, phase: str) -> None:
        import time

        if self._p is not None and phase in self._tasks:
            self._p.advance(self._tasks[phase])
        st = self._phases.get(phase)
        if st is None:
            return
        st["done"] += 1
        if self.mode != "lines" or st["done"] >= st["total"]:  # the end is finish()'s line
            return
        now = time.perf_counter()
        step = st["done"] * 10 // max(1, st["total"])
        if (step > st["step"] and now - st["said"] >= self.GAP) or now - st["said"] >= self.QUIET:
            st["step"], st["said"] = step, now
            self._line(
                f"{st['what']}: {st['done']}/{st['total']} ({100 * st['done'] // max(1, st['total'])}%) "
                f"in {now - st['t0']:.1f} s"
            )

    def finish(self, phase: str, summary: str) -> None:
        """The end of ``phase``: ``summary`` says what came of it (counts); the seconds are added."""
        import time

        st = self._phases.pop(phase, None)
        if st is None:
            return
        text = f"{st['what']}: {summary} in {time.perf_counter() - st['t0']:.1f} s"
        if self.mode == "lines":
            self._line(text)
        elif self._p is not None:
            self._p.console.print(text, highlight=False)

    def event(self, ev: dict, cand: Candidate | None) -> None:
        """A worker event (``started``, ``checked``, ``round``, ``result``; see
        :mod:`cypressc.tuner.timing`) about ``cand``: the bars show counts only, the lines a
        GPU worker's start; the failures are listed at the end."""
        if self.mode == "lines" and ev.get("event") == "started":
            self._line(
                f"GPU worker {ev.get('gpu')} ({ev.get('device')}) started in {ev.get('seconds', 0):.1f} s"
            )


def _speed(c: Candidate) -> str:
    if c.timing and c.timing.get("ok"):
        return f"{c.timing['tflops']:.1f} TFLOP/s ({c.timing['ms']:.3f} ms)"
    if c.timing:
        return "FAILED: " + c.timing.get("error", "")[:60]
    if c.error:
        return "BUILD FAILED"
    return "-"


def table(res: Result, top: int = 10) -> str:
    """A markdown table of the ``top`` candidates (and the baseline)."""
    rows = res.ranked[:top]
    base = res.baseline
    if base is not None and base not in rows:
        rows.append(base)
    measure = "TFLOP/s (ms)" if not res.options.compile_only else "built"
    lines = [f"| # | knobs | static score | {measure} | vs start |", "|---:|---|---:|---|---:|"]
    for i, c in enumerate(rows, 1):
        rel = ""
        if c.tflops and base is not None and base.tflops:
            rel = f"{c.tflops / base.tflops:.2f}x"
        tag = " (start)" if c.baseline else ""
        built = _speed(c) if not res.options.compile_only else ("cache" if c.hit else "compiled")
        lines.append(
            f"| {i} | {res.space.describe(c.values)}{tag} | {c.score or 0:.3f} | {built} | {rel} |"
        )
    return "\n".join(lines)


def closing_note(res: Result) -> str:
    """Counts and seconds, one paragraph."""
    n = res.counts()
    by = ", ".join(f"{k} {v}" for k, v in sorted(n["pruned_by"].items())) or "none"
    s = res.seconds
    out = [
        f"{n['considered']} candidates: {n['pruned']} pruned by the compiler ({by}), "
        f"{n['compiled']} compiled, {n['cache_hits']} from the kernel cache, "
        f"{n['build_failed']} failed to build"
        + (
            ""
            if res.options.compile_only
            else f", {n['timed']} timed, {n['failed_check']} failed the check"
        ),
        f"wall {s.get('total', 0):.1f} s: prune {s['prune']:.1f} s, compile {s['compile']:.1f} s, "
        f"timing {s['timing']:.1f} s",
    ]
    if res.pruning:  # what pruning costs: the compiler's passes on every candidate (docs/tuning.md)
        p, procs = res.pruning, max(1, res.pruning["processes"])
        checked = (
            f"{p['checked']} checked by the compiler on {procs} process{'es' if procs != 1 else ''} "
            f"(about {s['prune'] * procs / p['checked']:.2f} s of a core each)"
            if p["checked"]
            else "none checked by the compiler"
        )
        out.append(
            f"pruned {n['pruned']} of {n['considered']} in {s['prune']:.1f} s: {checked}, "
            f"{p['cached']} from the prune cache"
        )
    if res.partial:
        out.append("interrupted: the result covers the candidates measured so far")
    out += failure_lines(res)
    return "\n".join(out)


def failures(res: Result) -> list[dict[str, Any]]:
    """Every candidate that the compiler crashed on (``internal``), that nvcc failed to
    build, or that failed on the GPU, as ``{"label", "knobs", "stage", "kind", "error", ...}``
    (``stage``: prune, build, check; the GPU details of :func:`cypressc.tuner.verdicts.failure`
    kept: ``rel``, ``nan``, ``wrong``, ``elements``, ``where``, ``cuda``, ...).  A refusal
    by the compiler is pruning, not a failure."""
    out = []
    for c in res.candidates:
        base = {"label": c.label, "knobs": res.space.describe(c.values), "start": c.baseline}
        if c.verdict is not None and not c.verdict["ok"] and c.verdict["code"] == "internal":
            out.append(
                {**base, "stage": "prune", "kind": "internal", "error": c.verdict["message"]}
            )
        elif c.error and not c.dir:
            out.append(
                {**base, "stage": "build", "kind": "build", "error": c.error.splitlines()[0]}
            )
        elif c.timing and not c.timing.get("ok"):
            out.append(
                {**base, "stage": "check", **{k: v for k, v in c.timing.items() if k != "ok"}}
            )
    return out


def failure_lines(res: Result) -> list[str]:
    """One ``FAILED`` line per :func:`failures` entry: the knobs, the kind, why."""
    return [
        f"FAILED ({f.get('kind')}) {f['knobs']}{' (start)' if f['start'] else ''} [{f['label']}]: "
        f"{f.get('error', '')}"
        for f in failures(res)
    ]


def best_yaml(res: Result, program: str, mapping: str) -> str | None:
    """The best mapping's text under a header comment (device, sizes, speed, runner-up)."""
    best = res.best
    if best is None:
        return None
    sizes = " ".join(f"{k}={v}" for k, v in res.options.sizes.items())
    dts = " ".join(f"{k}={v}" for k, v in res.options.dtypes.items()) or "defaults"
    head = [
        f"# cypressc tune: the best of {len(res.candidates)} candidates for {program}, from {mapping}",
        f"# device: {res.device}; sizes {sizes}; dtypes {dts}",
    ]
    if best.tflops:
        head.append(
            f"# measured: {best.tflops:.1f} TFLOP/s ({best.timing['ms']:.4f} ms, median of "  # type: ignore[index]
            f"{res.options.rounds}x{res.options.reps} calls)"
        )
    else:
        why = "--compile-only" if res.options.compile_only else "interrupted before any timing"
        head.append(f"# not timed ({why}): ranked by the static model, score {best.score or 0:.3f}")
    ru = res.runner_up
    if ru is not None:
        what = f"{ru.tflops:.1f} TFLOP/s" if ru.tflops else f"score {ru.score or 0:.3f}"
        head.append(f"# runner-up: {res.space.describe(ru.values)} ({what})")
    head.append(f"# knobs: {res.space.describe(best.values)}")
    if res.partial:
        head.append("# (interrupted: best of the candidates measured before Ctrl-C)")
    return "\n".join(head) + "\n" + best.text


def tuning_key(program_text: str, mapping_text: str, device: str, dtypes: dict, sizes: dict) -> str:
    """The tuning cache key: program and mapping content, the compiler, device, dtypes, sizes."""
    return digest(
        "tune-v1",
        compiler_fingerprint(),
        program_text,
        mapping_text,
        device,
        dict(sorted(dtypes.items())),
        dict(sorted(sizes.items())),
    )


def _store() -> JsonStore:
    return JsonStore(cache_dir() / "tune")


def store_result(res: Result, program_text: str, mapping_text: str, yaml_text: str) -> str:
    """Keep a complete timed result in the tuning cache; returns the key."""
    best = res.best
    key = tuning_key(program_text, mapping_text, res.device, res.options.dtypes, res.options.sizes)
    if best is None or res.partial or res.options.compile_only:
        return key
    _store().put(
        key,
        {
            "device": res.device,
            "sizes": res.options.sizes,
            "dtypes": res.options.dtypes,
            "best": {
                "knobs": res.space.describe(best.values),
                "tflops": best.tflops,
                "ms": best.timing["ms"],
                "mapping": best.text,
            },  # type: ignore[index]
            "yaml": yaml_text,
            "table": table(res),
            "note": closing_note(res),
        },
    )
    return key


def cached_result(
    program_text: str, mapping_text: str, device: str, dtypes: dict, sizes: dict
) -> dict | None:
    """A stored result for exactly these inputs, or ``None``."""
    return _store().get(tuning_key(program_text, mapping_text, device, dtypes, sizes))
