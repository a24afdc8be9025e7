"""docs/language.md stays in step with the front end: every diagnostic code and every
mapping key is documented, and the complete example in §10 checks clean."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from cypressc.cli import main
from cypressc.lang.intrinsics import LEAF_FUNCTIONS
from cypressc.mapping.schema import Instance, MappingSpec

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "language.md").read_text()


def test_every_front_end_code_is_documented():
    codes: set[str] = set()
    for f in [*(ROOT / "cypressc" / "lang").glob("*.py"), *(ROOT / "cypressc" / "mapping").glob("*.py")]:
        codes |= set(re.findall(r'"([EMW]\d{3})"', f.read_text()))
    missing = sorted(c for c in codes if f"| {c} |" not in DOC)
    assert not missing, f"codes missing from the tables of docs/language.md: {missing}"


def test_every_mapping_key_is_documented():
    for key in [*MappingSpec.model_fields, *Instance.model_fields]:
        assert f"| `{key}` |" in DOC, key


def test_every_leaf_function_is_documented():
    for name in LEAF_FUNCTIONS:
        assert f"`{name}(" in DOC, name


def test_complete_example_checks(tmp_path):
    sec = DOC[DOC.index("A complete small example"):]
    (tmp_path / "ex.cyp").write_text(re.search(r"```python\n(.*?)```", sec, re.DOTALL).group(1))
    (tmp_path / "ex.yaml").write_text(re.search(r"```yaml\n(.*?)```", sec, re.DOTALL).group(1))
    r = CliRunner().invoke(main, ["check", str(tmp_path / "ex.cyp"), "-m", str(tmp_path / "ex.yaml")],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
