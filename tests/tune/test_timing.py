"""The tuner's GPU side as far as a CPU machine can take it: reference loading, the
parent/worker protocol reporting a worker that cannot start against every candidate, the
correctness comparison and the failure records (pure functions, on CPU tensors and the
runtime's real exception types)."""

from __future__ import annotations

import types

import pytest

from cypressc.tuner.timing import interleaved, load_reference, time_candidates
from cypressc.tuner.worker_pool import stop_workers, workers


def test_load_reference_from_a_file_and_a_module(tmp_path):
    f = tmp_path / "ref.py"
    f.write_text("def gemm(t):\n    return {'C': t['A'] * 2}\n")
    assert load_reference(f"{f}:gemm")({"A": 21}) == {"C": 42}
    assert (
        load_reference("cypressc.runtime:eval_expr")(
            {"op": "*", "a": {"var": "M"}, "b": {"const": 2}}, {"M": 3}
        )
        == 6
    )
    for bad, msg in [
        (f"{f}:nope", "has no function nope"),
        (f"{tmp_path}/missing.py:f", "no file"),
        ("gemm", "write FILE.py:FUNCTION"),
    ]:
        with pytest.raises(ValueError, match=msg):
            load_reference(bad)


def test_a_worker_without_a_gpu_fails_every_candidate_once_started():
    """The real worker process, on a machine without a GPU: it cannot start, every candidate
    fails with that reason, and the pool does not try to start it again per candidate."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    events = []
    cands = [
        {"label": "a", "dir": "/nonexistent", "name": "gemm"},
        {"label": "b", "dir": "/nonexistent"},
    ]
    try:
        res = time_candidates(cands, {"M": 64}, baseline="a", gpus=1, on_event=events.append)
        assert workers() == {0: {"device": "", "starts": 1, "alive": False}}
    finally:
        stop_workers()
    assert workers() == {}
    assert set(res) == {"a", "b"}
    for r in res.values():
        assert not r["ok"] and r["kind"] == "worker", r
        assert r["error"].startswith("the GPU worker cannot start: ") and "CUDA" in r["error"], r
    assert [(e["event"], e["label"]) for e in events] == [("checked", "a"), ("checked", "b")]


def test_timing_refuses_without_gpus():
    with pytest.raises(RuntimeError, match="--compile-only"):
        time_candidates([{"label": "a", "dir": "x"}], {"M": 1}, gpus=0)


def test_interleaved_rotates_the_order_every_round():
    """Round r starts at the r-th function, so no row is always timed last in a round (where
    the others' heat costs it: bench/NOTES.md, 2026-11-26 session 14)."""
    calls = []

    class Event:
        def record(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    cuda = types.SimpleNamespace(Event=lambda enable_timing=True: Event(), synchronize=lambda: None)
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    out = interleaved(types.SimpleNamespace(cuda=cuda), fns, rounds=4, reps=2)
    assert "".join(calls) == "aabbccbbccaaccaabbaabbcc"
    assert {k: len(v) for k, v in out.items()} == {"a": 8, "b": 8, "c": 8}
