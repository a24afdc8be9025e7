"""``cypressc.runtime.load`` and the kernel info reader raise their documented errors only
(issue #35, section 2), whatever ``<name>.json`` holds.

The documented classes (``load``'s and :meth:`KernelInfo.from_dict`'s docstrings):

* ``ValueError`` naming the file and the bad field by its path in the JSON, for a malformed
  info (and for a ``name=`` that is not a C identifier or not the info's own name);
* ``FileNotFoundError`` / ``OSError`` when a file is missing or cannot be read (here always
  ``lib<name>.so``: the tests build no library, so a valid info ends there);
* :class:`KernelError` (a ``ValueError``) from an info that was read, when its expressions are
  evaluated at sizes that are missing, not ints, or divide by zero (:meth:`KernelInfo.flops_at`);
* ``TypeError`` only for ``load``'s own arguments of the wrong type (``load(None)``).

The info mutated is a real one: ``programs/gemm.cyp`` under ``mappings/gemm/h100.yaml`` as
``render_build`` writes it (no nvcc, no GPU).
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cypressc import runtime as rt
from cypressc.abi.exprs import MAX_DEPTH
from tests.budget import pick
from tests.compiled import rendered


@pytest.fixture(scope="module")
def base() -> dict:
    return json.loads(rendered("gemm", "tests/mappings/full/gemm/h100.yaml").files["gemm.json"])


def deep_tree(n: int) -> dict:
    t: dict = {"const": 1}
    for _ in range(n):
        t = {"op": "+", "a": t, "b": {"const": 1}}
    return t


def deep_list(n: int) -> list:
    t: list = []
    for _ in range(n):
        t = [t]
    return t


def mutated(base: dict, fn) -> dict:
    d = copy.deepcopy(base)
    fn(d)
    return d


def put(path, value):
    """A mutation that sets ``d[path[0]][path[1]]...`` to ``value``."""

    def fn(d):
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value

    return fn


# --------------------------------------------------------------------------------------------
# each case of the issue, and a few neighbours
# --------------------------------------------------------------------------------------------

CASES = [
    (put(["params", 0, "dtype"], ["f16"]), r"params\[0\]\.dtype \(param 'C'\) is \['f16'\]"),
    (put(["params", 1, "dtype"], {"f16": 1}), r"params\[1\]\.dtype \(param 'A'\) is \{'f16': 1\}"),
    (
        put(["requires", 0, "tree", "op"], ["=="]),
        r"requires\[0\]\.tree \('N % 8 == 0'\): unknown operator \['=='\]",
    ),
    (put(["flops", "tree", "op"], {"*": 1}), r"flops\.tree .*unknown operator \{'\*': 1\}"),
    (put(["flops", "tree", "a", "op"], None), r"flops\.tree .*unknown operator None"),
    (
        put(["params", 0, "dims", 1], 0),
        r"params\[0\]\.dims\[1\] \(param 'C'\) is 0: .*positive int64_t",
    ),
    (
        put(["params", 0, "dims", 1], 10**30),
        r"params\[0\]\.dims\[1\] \(param 'C'\) is 1000.*positive int64_t",
    ),
    (put(["params", 0, "dims", 1], -8), r"params\[0\]\.dims\[1\]"),
    (put(["params", 0, "dims", 1], 8.0), r"params\[0\]\.dims\[1\]"),
    (put(["params", 0, "dims", 1], True), r"params\[0\]\.dims\[1\]"),
    (
        put(["requires", 0, "tree", "b", "const"], math.nan),
        r"requires\[0\]\.tree .*constant nan .*not a finite number",
    ),
    (put(["flops", "tree", "a", "a", "a", "const"], math.inf), r"flops\.tree .*constant inf"),
    (put(["requires", 1, "tree", "b", "const"], 2**63), r"requires\[1\]\.tree .*outside int64_t"),
    (
        put(["requires", 0, "tree", "a", "b", "const"], 0),
        r"requires\[0\]\.tree .*'%' by the constant 0",
    ),
    (
        put(["requires", 0, "tree", "a", "b"], {"const": 8.0}),
        r"requires\[0\]\.tree .*'%' on a double",
    ),
    (
        put(["requires", 2, "tree"], deep_tree(MAX_DEPTH + 5)),
        rf"requires\[2\]\.tree .*nested deeper than {MAX_DEPTH}",
    ),
    (put(["flops", "tree"], deep_tree(5000)), r"flops\.tree .*nested deeper than"),
    (put(["name"], deep_list(50_000)), r"'name' must be a str, got \[\[\[\[\.\.\.\]\]\]\]"),
    (put(["cuda_arch"], ["90a"]), r"'cuda_arch' must be a GPU architecture"),
    (put(["cuda_arch"], "90a -o /etc/x"), r"'cuda_arch' must be a GPU architecture"),
    (put(["runtime_include"], None), r"'runtime_include' must be a directory path"),
    (put(["runtime_include"], "a\nb"), r"'runtime_include' must be a directory path"),
    (put(["bindings"], {"T": ["f16"]}), r"'bindings' must map parameter names to strings"),
    (put(["sizes", 1], ["N"]), r"sizes\[1\] \['N'\] is not a C identifier"),
    (put(["params", 2, "name"], {"B": 1}), r"params\[2\]\.name \{'B': 1\} is not a C identifier"),
    (put(["requires", 0, "why"], None), r"requires\[0\] must be an object"),
    (put(["floats"], [["alpha"]]), r"floats\[0\]: float \['alpha'\] is not a C identifier"),
    (
        put(["requires", 0, "tree", "a", "a", "var"], "Q"),
        r"requires\[0\]\.tree \('N % 8 == 0'\) uses Q, not among",
    ),
    (put(["name"], "-" * 10_000), r"name '-+\.\.\.-+' is not a C identifier"),
]


@pytest.mark.parametrize("mutate, message", CASES)
def test_each_malformed_field_is_a_value_error_naming_it(base, mutate, message):
    with pytest.raises(ValueError, match=message) as e:
        rt.KernelInfo.from_dict(mutated(base, mutate))
    assert type(e.value) is ValueError and len(str(e.value)) < 500


@pytest.mark.parametrize("top", [None, 3, 2.5, "gemm", [], [{"name": "gemm"}], True])
def test_an_info_that_is_not_an_object_is_a_value_error(top):
    with pytest.raises(ValueError, match="kernel info: expected a JSON object"):
        rt.KernelInfo.from_dict(top)


@pytest.mark.parametrize(
    "text, message",
    [
        ("null", "expected a JSON object, got NoneType"),
        ("42", "expected a JSON object, got int"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"name": ' + "9" * 5000 + "}", "not JSON"),
        ('{"name": "gemm",', "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("", "not JSON"),
    ],
    ids=["null", "number", "deep", "huge-int", "truncated", "not-utf8", "empty"],
)
def test_load_of_an_unreadable_info_file_is_a_value_error_naming_the_file(tmp_path, text, message):
    p = tmp_path / "gemm.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=message) as e:
        rt.load(tmp_path)
    assert str(e.value).startswith(f"{p}: ")


def test_load_with_nan_in_requires_is_a_value_error(tmp_path, base):
    text = json.dumps(mutated(base, put(["requires", 0, "tree", "b", "const"], math.nan)))
    assert "NaN" in text  # Python's json writes (and reads) NaN
    (tmp_path / "gemm.json").write_text(text)
    with pytest.raises(
        ValueError, match=r"gemm\.json: kernel info: requires\[0\]\.tree .*not a finite number"
    ):
        rt.load(tmp_path)


def test_load_arguments(tmp_path, base):
    with pytest.raises(TypeError, match="outdir must be a path"):
        rt.load(None)
    with pytest.raises(TypeError, match="outdir must be a path"):
        rt.load(3)
    with pytest.raises(TypeError, match="name must be a kernel name"):
        rt.load(tmp_path, ["gemm"])
    with pytest.raises(FileNotFoundError, match=r"no <name>\.json"):
        rt.load(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"gemm\.json not found"):
        rt.load(tmp_path, "gemm")
    with pytest.raises(ValueError, match="not a kernel name"):
        rt.load(tmp_path, "../gemm")
    (tmp_path / "gemm.json").write_text(json.dumps(base))
    with pytest.raises(FileNotFoundError, match=r"libgemm\.so not found; run `make -C"):
        rt.load(tmp_path)
    (tmp_path / "other.json").write_text(json.dumps(base))  # a renamed copy
    with pytest.raises(
        ValueError, match=r"other\.json: the kernel info names the kernel 'gemm', not 'other'"
    ):
        rt.load(tmp_path, "other")
    (tmp_path / "d.json").mkdir()
    with pytest.raises(OSError):
        rt.load(tmp_path, "d")


def test_flops_and_requires_check_their_sizes(base):
    info = rt.KernelInfo.from_dict(base)
    assert info.flops_at({"M": 8, "N": 8, "K": 8}) == 2.0 * 8 * 8 * 8
    for sizes, message in [
        ({"M": "8", "N": 8, "K": 8}, "size M must be an int"),
        ({"M": 8, "N": 8, "K": 8.0}, "size K must be an int"),
        ({"M": 8, "N": True, "K": 8}, "size N must be an int"),
        ({"M": 8, "N": 8, "K": 2**70}, "size K must be an int"),
        ({"M": 8, "N": 8}, "missing size K"),
        (None, "sizes must be a mapping"),
        ([8, 8, 8], "sizes must be a mapping"),
    ]:
        with pytest.raises(rt.KernelError, match=message):
            info.flops_at(sizes)
        with pytest.raises(rt.KernelError, match=message):
            info.failed_requires(sizes)
    assert info.failed_requires({"M": 8, "N": 7, "K": 8})
    np = pytest.importorskip("numpy")  # NumPy ints and names not of the kernel are fine
    assert info.flops_at({"M": np.int64(8), "N": 8, "K": 8, "X": "unused"}) == 1024.0


def test_a_division_by_a_zero_size_is_a_kernel_error(base):
    d = mutated(base, put(["requires", 0, "tree", "a", "b"], {"var": "K"}))  # N % K == 0
    info = rt.KernelInfo.from_dict(d)
    with pytest.raises(
        rt.KernelError, match=r"requires \(N % 8 == 0\) cannot be evaluated at M=8, N=8, K=0"
    ):
        info.failed_requires({"M": 8, "N": 8, "K": 0})
    d = mutated(base, put(["flops", "tree"], {"op": "/", "a": {"const": 1.0}, "b": {"var": "K"}}))
    assert (
        rt.KernelInfo.from_dict(d).flops_at({"M": 1, "N": 1, "K": 0}) == math.inf
    )  # a double: IEEE
    many = {"var": "M"}
    for _ in range(30):
        many = {"op": "*", "a": many, "b": {"var": "M"}}
    d = mutated(base, put(["flops", "tree"], {"op": "*", "a": {"const": 2.0}, "b": many}))
    with pytest.raises(rt.KernelError, match="flops .* cannot be evaluated"):
        rt.KernelInfo.from_dict(d).flops_at({"M": 2**62, "N": 1, "K": 1})
    d = mutated(base, put(["flops", "tree"], many))  # all integer: too large for a double
    with pytest.raises(rt.KernelError, match="flops .* too large for a double"):
        rt.KernelInfo.from_dict(d).flops_at({"M": 2**62, "N": 1, "K": 1})


# --------------------------------------------------------------------------------------------
# Hypothesis: random mutations of the real info
# --------------------------------------------------------------------------------------------


def paths(v, at=()):
    """Every path into ``v`` (the root included)."""
    yield at
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, (*at, i))


DEEP = "@@deep-{}-{}@@"  # a marker json.dumps writes as a string; replaced by raw deep JSON text

ODD = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            1,
            8,
            2**31,
            2**63,
            -(2**63) - 1,
            10**30,
            0.5,
            8.0,
            -0.0,
            1e308,
            math.nan,
            math.inf,
            -math.inf,
            "",
            "f16",
            "bf16",
            "f64",
            "M",
            "N",
            "K",
            "cyp_x",
            "1a",
            "a b",
            "é",
            "\x00",
            "\n",
            "x" * 300,
            [],
            {},
            [None],
            ["M"],
            {"a": 1},
            {"const": 8},
            {"var": "M"},
            {"var": "Q"},
            {"op": "+", "a": {"const": 1}},
            {"op": "%", "a": {"var": "N"}, "b": {"const": 0}},
            {"c": "x", "tree": {"const": 1}},
            {"c": "x", "tree": {"const": 1}, "why": "w"},
        ]
    ),
    st.integers(-(2**200), 2**200),
    st.floats(),
    st.text(max_size=8),
    st.builds(DEEP.format, st.sampled_from(["list", "tree"]), st.integers(2, 3000)),
)
OP = st.one_of(
    st.tuples(st.just("replace"), st.integers(0, 10**6), ODD),
    st.tuples(st.just("drop"), st.integers(0, 10**6)),
    st.tuples(
        st.just("add"),
        st.integers(0, 10**6),
        st.sampled_from(["x", "const", "var", "op", "a", "why", "floats", "dims", "name"]),
        ODD,
    ),
    st.tuples(st.just("splice"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("wrap"), st.integers(0, 10**6)),
)
# one example in eight also breaks the text (truncated, stray bytes); the rest stay JSON, for the reader's checks
RAW = st.integers(0, 7).flatmap(
    lambda i: (
        st.none()
        if i
        else st.one_of(
            st.tuples(st.just("truncate"), st.integers(0, 10**6)),
            st.tuples(st.just("bytes"), st.integers(0, 10**6), st.binary(min_size=1, max_size=3)),
        )
    )
)


def apply(d, ops):
    for op, i, *rest in ops:
        ps = list(paths(d))
        path = ps[i % len(ps)]
        parent = d
        for k in path[:-1]:
            parent = parent[k]
        value = parent[path[-1]] if path else d
        if op == "replace":
            new = copy.deepcopy(rest[0])
        elif op == "splice":
            src = ps[rest[0] % len(ps)]
            new = d
            for k in src:
                new = new[k]
            new = copy.deepcopy(new)
        elif op == "wrap":
            new = [value]
        elif op == "add":
            if isinstance(value, dict):
                value[rest[0]] = copy.deepcopy(rest[1])
            elif isinstance(value, list):
                value.append(copy.deepcopy(rest[1]))
            continue
        else:  # drop
            if path:
                del parent[path[-1]]
            continue
        if path:
            parent[path[-1]] = new
        else:
            d = new
    return d


_MARKER = re.compile(r'"@@deep-(list|tree)-(\d+)@@"')


def to_text(d) -> bytes:
    def deep(m: re.Match) -> str:
        n = int(m[2])
        return (
            "[" * n + "]" * n
            if m[1] == "list"
            else '{"op": "+", "a": ' * n + '{"var": "M"}' + ', "b": {"const": 1}}' * n
        )

    return _MARKER.sub(deep, json.dumps(d)).encode()


@pytest.fixture(scope="module")
def outdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mutated_info")


@settings(max_examples=pick(150, 2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=1, max_size=3), raw=RAW)
def test_mutated_info_raises_only_documented_errors(base, outdir, ops, raw):
    text = to_text(apply(copy.deepcopy(base), ops))
    if raw is not None:
        i = raw[1] % (len(text) + 1)
        text = text[:i] if raw[0] == "truncate" else text[:i] + raw[2] + text[i:]
    path = outdir / "gemm.json"
    path.write_bytes(text)
    try:
        rt.load(outdir)
    except FileNotFoundError as e:  # the info was read: only the library is missing
        if "libgemm.so not found" not in str(e):
            raise
    except ValueError as e:
        assert str(e).startswith(f"{path}: "), e  # names the file
        event(f"refused: {str(e)[len(str(path)) + 2 :].split(' ')[0:3]}")
        return
    else:
        pytest.fail("load found a library that is not there")
    event("accepted")
    # an info that was read round-trips and evaluates its expressions with documented errors only
    info = rt.KernelInfo.load_json(path)
    assert rt.KernelInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info
    for n in (64, 0, -7, 2**40):
        try:
            info.flops_at({s: n for s in info.sizes})
            info.failed_requires({s: n for s in info.sizes})
        except rt.KernelError:
            pass


def test_mutation_survivors_are_what_build_could_write(base, outdir):
    """The Hypothesis test's happy path is reachable: an unmutated info reaches the library."""
    (outdir / "gemm.json").write_bytes(to_text(base))
    with pytest.raises(FileNotFoundError, match="libgemm.so not found"):
        rt.load(outdir)
