"""A seeded sample of the semantic mutation campaign (tests/fuzzing.py) through ``check``
and ``explain``: no traceback, no internal error, no diagnostic without a line.  The full
campaign (``python tests/fuzzing.py --count 3000``) is run by hand; its counts are in the
closing note of issue #9."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzzing  # noqa: E402


def test_classify_tells_defects_apart():
    assert fuzzing.classify(0, "ok: …") == "ok"
    assert fuzzing.classify(1, "p.cyp:3:5: error[E020]: x\n1 error") == "located"
    assert fuzzing.classify(1, "m.yaml: error[E044]: x\n1 error") == "unlocated"
    assert fuzzing.classify(1, "no diagnostic at all") == "unlocated"
    assert fuzzing.classify(70, "internal compiler error while processing …") == "internal"
    assert fuzzing.classify(1, "Traceback (most recent call last):\n  File …") == "traceback"


def test_mutants_are_deterministic_and_change_something():
    a, b = list(fuzzing.mutants(3, 30)), list(fuzzing.mutants(3, 30))
    assert a == b
    assert sum("unchanged" not in m.what for m in a) >= 28


# make test runs one sample of 60 mutants (23 s); make test-full the second as well
@pytest.mark.parametrize("seed", [11, pytest.param(12, marks=pytest.mark.full)])
def test_sample_has_no_defects(seed):
    counts = fuzzing.run(seed, 60)
    defects = {k: v for k, v in counts.items() if k[1] in ("unlocated", "internal", "traceback")}
    assert not defects, "\n\n".join(counts.examples)
    assert sum(v for (cmd, c), v in counts.items() if cmd == "check" and c == "located") >= 20
