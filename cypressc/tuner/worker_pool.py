"""The parent side of the tuner's GPU worker processes (:mod:`cypressc.tuner.worker`): one
long-lived process per GPU (``CUDA_VISIBLE_DEVICES`` set to it), started on demand and kept
for the life of this process so that a second tune round pays no new ``import torch`` and
CUDA start; requests and replies are JSON lines, answered in order.  A worker that dies or
gives no answer in time is killed and reported (:class:`_Lost`: ``crash``, ``timeout``,
``worker`` when it cannot start), and the next request starts a fresh one.
:func:`stop_workers` ends them (also at exit).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["workers", "stop_workers"]


_START_S = 240.0  # import torch + CUDA context on a fresh worker


class _Lost(Exception):
    """The worker went away (or stopped answering) during a request."""

    def __init__(self, why: dict[str, Any]) -> None:
        super().__init__(why.get("error", "worker lost"))
        self.why = why


class _Worker:
    """One worker process on one GPU, restarted on demand; requests are answered in order."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.stderr: collections.deque = collections.deque(maxlen=40)
        self.device = ""
        self.starts = 0
        self.next_id = 0
        self.lock = threading.Lock()
        self.broken: dict[str, Any] | None = None  # why it cannot start: every request fails so

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, on_event: Callable[[dict], None] | None = None) -> None:
        t0 = time.perf_counter()
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=_visible(self.gpu), PYTHONUNBUFFERED="1")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.lines, self.stderr = queue.Queue(), collections.deque(maxlen=40)
        p = subprocess.Popen(
            [sys.executable, "-m", "cypressc.tuner.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.proc, self.starts = p, self.starts + 1
        threading.Thread(target=_pump, args=(p.stdout, self.lines), daemon=True).start()
        threading.Thread(target=_pump, args=(p.stderr, self.stderr), daemon=True).start()
        ev = self._read(_START_S, None)
        if ev.get("event") != "ready":
            self.kill()
            self.broken = {"kind": "worker", "message": ev.get("error", "no reason given")}
            raise _Lost(self.broken)
        self.device = ev.get("device", "")
        if on_event:
            on_event(
                {
                    "event": "started",
                    "gpu": self.gpu,
                    "device": self.device,
                    "starts": self.starts,
                    "seconds": time.perf_counter() - t0,
                }
            )

    def ensure(self, on_event: Callable[[dict], None] | None = None) -> None:
        """A running process: started now if there is none (:class:`_Lost` if it cannot be);
        a start is reported to ``on_event`` as ``{"event": "started", "seconds", ...}``."""
        if self.broken is not None:
            raise _Lost(self.broken)
        if not self.alive():
            self.start(on_event)

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None

    def request(
        self, msg: dict, timeout: float, on_event: Callable[[dict], None] | None = None
    ) -> dict:
        """Send ``msg``; return the worker's reply.  Raises :class:`_Lost` (the worker is
        killed) when it dies or gives no reply within ``timeout`` seconds."""
        self.ensure(on_event)
        self.next_id += 1
        msg = dict(msg, id=self.next_id)
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            pass  # it died: the read below says how
        reply = self._read(timeout, on_event, msg["id"])
        if reply.get("fatal"):  # it exits by itself; make sure before the next request
            try:
                self.proc.wait(30)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                self.kill()
        return reply

    def _read(self, timeout: float, on_event, want_id: int | None = None) -> dict:
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise _Lost(
                    {
                        "kind": "timeout",
                        "message": f"no answer from the worker within {timeout:.0f} s",
                    }
                )
            if line is None:  # stdout closed: the process died
                code = self.proc.wait() if self.proc is not None else None
                self.proc = None
                time.sleep(0.05)  # let the stderr pump catch up
                raise _Lost({"kind": "crash", "exit": code, "stderr": "".join(self.stderr)[-600:]})
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if want_id is None or ev.get("id") == want_id:
                return ev
            if on_event:
                on_event(dict(ev, gpu=self.gpu))


def _pump(stream, sink) -> None:
    for line in stream:
        sink.put(line) if isinstance(sink, queue.Queue) else sink.append(line)
    if isinstance(sink, queue.Queue):
        sink.put(None)


_POOL: dict[int, _Worker] = {}
_POOL_LOCK = threading.Lock()


def _worker(gpu: int) -> _Worker:
    with _POOL_LOCK:
        if gpu not in _POOL:
            _POOL[gpu] = _Worker(gpu)
        return _POOL[gpu]


def workers() -> dict[int, dict[str, Any]]:
    """The workers of this process by GPU: ``{"device", "starts", "alive"}`` (``starts`` above
    1: restarted after a crash or a hang)."""
    with _POOL_LOCK:
        return {
            g: {"device": w.device, "starts": w.starts, "alive": w.alive()}
            for g, w in sorted(_POOL.items())
        }


def stop_workers() -> None:
    """End the workers this process started (at exit, on Ctrl-C, or to free the GPUs)."""
    with _POOL_LOCK:
        workers = list(_POOL.values())
        _POOL.clear()
    for w in workers:
        if w.alive():
            try:
                w.proc.stdin.write('{"op": "quit"}\n')  # type: ignore[union-attr]
                w.proc.stdin.flush()  # type: ignore[union-attr]
                w.proc.wait(5)  # type: ignore[union-attr]
            except (OSError, subprocess.TimeoutExpired):
                pass
        w.kill()


atexit.register(stop_workers)


def _visible(gpu: int) -> str:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        ids = [x for x in vis.split(",") if x.strip()]
        if gpu < len(ids):
            return ids[gpu]
    return str(gpu)
