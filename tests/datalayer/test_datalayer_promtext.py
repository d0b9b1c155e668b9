"""The exposition parser: table of valid and invalid inputs, and a property test against prometheus_client."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from datalayer.promtext import ExpositionError, LazySamples, parse_exposition


def _reference(text: str) -> list[tuple[str, dict[str, str], float]]:
    families = text_string_to_metric_families(text)
    return [(s.name, dict(s.labels), s.value) for f in families for s in f.samples]


def _ours(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = parse_exposition(text)
    return [(name, labels, value) for name, series in samples.items() for labels, value in series]


def _same(a: list[tuple[str, dict[str, str], float]], b: list[tuple[str, dict[str, str], float]]) -> bool:
    def key(x: tuple[str, dict[str, str], float]) -> tuple[str, tuple[tuple[str, str], ...], str]:
        return x[0], tuple(sorted(x[1].items())), "nan" if math.isnan(x[2]) else repr(float(x[2]))

    return sorted(map(key, a)) == sorted(map(key, b))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a 1\n", {"a": [({}, 1.0)]}),
        ("a{} 1", {"a": [({}, 1.0)]}),
        ('a{b="c"} 2.5 1700000000000\n', {"a": [({"b": "c"}, 2.5)]}),
        ('a{b="c",} 2', {"a": [({"b": "c"}, 2.0)]}),
        ('a { b = "c" , d="e" } 3', {"a": [({"b": "c", "d": "e"}, 3.0)]}),
        ('a{b="x\\"y\\\\z\\nw"} 1', {"a": [({"b": 'x"y\\z\nw'}, 1.0)]}),
        ('a{b="}{, \\"="} 1', {"a": [({"b": '}{, "='}, 1.0)]}),
        ("a\t7", {"a": [({}, 7.0)]}),
        ("a +Inf\nb -Inf\n", {"a": [({}, math.inf)], "b": [({}, -math.inf)]}),
        ("# HELP a with {braces} and \\n\n# TYPE a gauge\n\n  \na 1e3\n", {"a": [({}, 1000.0)]}),
        (
            'vllm:x_bucket{le="0.1"} 4\nvllm:x_bucket{le="+Inf"} 5\n',
            {"vllm:x_bucket": [({"le": "0.1"}, 4.0), ({"le": "+Inf"}, 5.0)]},
        ),
        ("a 1\r\n", {"a": [({}, 1.0)]}),
        ("a 1\r 17\r\n", {"a": [({}, 1.0)]}),
    ],
)
def test_valid(text: str, expected: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    assert parse_exposition(text) == expected


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("a", 1, "expected 'value"),
        ("a 1 2 3", 1, "expected 'value"),
        ("a one", 1, "invalid value"),
        ("a 1_000", 1, "invalid value"),
        ("ok 1\n9a 1", 2, "invalid metric name"),
        ('a{b="c} 1', 1, "unterminated"),
        ("a{b=c} 1", 1, "quoted value"),
        ('a{b="c" d="e"} 1', 1, "expected ','"),
        ('a{b="c",b="d"} 1', 1, "duplicate label"),
        ('a{1b="c"} 1', 1, "invalid label name"),
        ("{} 1", 1, "expected a metric name"),
        ('a{b="c\\"} 1', 1, "unterminated"),
        ("<html><body>oops</body></html>", 1, "invalid metric name"),
        ("a 8.\r0", 1, "invalid value"),
        ('a{b="c"} 8\x0b5 17', 1, "invalid value"),
    ],
)
def test_invalid(text: str, line: int, message: str) -> None:
    with pytest.raises(ExpositionError) as err:
        parse_exposition(text)
    assert err.value.line == line
    assert message in str(err.value)


def test_wanted_skips_other_lines_without_parsing_them() -> None:
    text = 'keep{a="1"} 1\nskip{this is not valid 7\nkeep_total 2\nkeep{a="2"} 3\n'
    assert parse_exposition(text, {"keep"}) == {"keep": [({"a": "1"}, 1.0), ({"a": "2"}, 3.0)]}
    with pytest.raises(ExpositionError):
        parse_exposition(text)


def test_wanted_still_rejects_bad_wanted_lines() -> None:
    with pytest.raises(ExpositionError):
        parse_exposition("other 1\nkeep{a=1} 2\n", {"keep"})


_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
_label_names = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,8}", fullmatch=True)
_label_values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-(10**12), max_value=10**12).map(float),
)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


@st.composite
def _expositions(draw: st.DrawFn) -> str:
    lines = []
    used: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for _ in range(draw(st.integers(0, 8))):
        name = draw(_names)
        if draw(st.booleans()):
            lines.append(f"# HELP {name} some help text")
        labels = draw(st.dictionaries(_label_names, _label_values, max_size=3))
        key = (name, tuple(sorted(labels.items())))
        if key in used:
            continue
        used.add(key)
        sep = draw(st.sampled_from([" ", "\t", "  "]))
        body = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        ts = draw(st.sampled_from(["", " 1700000000000"]))
        trailing = draw(st.sampled_from(["", ","]))
        label_part = "{" + body + trailing + "}" if labels or draw(st.booleans()) else ""
        if label_part == "{,}":
            label_part = "{}"
        lines.append(f"{name}{label_part}{sep}{_fmt(draw(_values))}{ts}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(_expositions())
def test_matches_prometheus_client(text: str) -> None:
    assert _same(_ours(text), _reference(text))


_ODD_SPACE = st.sampled_from(["\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2028"])


@st.composite
def _odd_whitespace_line(draw: st.DrawFn) -> str:
    """One sample whose value and timestamp carry whitespace other than spaces and tabs."""
    value = _fmt(draw(_values))
    at = draw(st.integers(0, len(value)))
    value = value[:at] + draw(_ODD_SPACE) + value[at:]
    ts = draw(st.sampled_from(["", " 1700000000000", "\t17"]))
    trailing = draw(st.sampled_from(["", "\r", "\x0c"]))
    labels = draw(st.sampled_from(["", '{a="x"}']))
    sep = draw(st.sampled_from([" ", "\t"]))
    return f"m{labels}{sep}{value}{ts}{trailing}\n"


def _outcome(parse: Callable[[str], list[tuple[str, dict[str, str], float]]], text: str) -> object:
    try:
        samples = parse(text)
    except ValueError:
        return "rejected"
    return sorted(
        (n, tuple(sorted(ls.items())), "nan" if math.isnan(v) else repr(float(v))) for n, ls, v in samples
    )


@settings(max_examples=300, deadline=None)
@given(_odd_whitespace_line())
def test_accepts_and_rejects_odd_whitespace_as_prometheus_client(text: str) -> None:
    assert _outcome(_ours, text) == _outcome(_reference, text)


def test_matches_prometheus_client_on_realistic_vllm_body() -> None:
    from bench.datalayer_bench import MODEL, vllm_metrics_text

    text = vllm_metrics_text(waiting=3, running=7, kv=0.42, seed=5)
    assert _same(_ours(text), _reference(text))
    assert parse_exposition(text, {"vllm:num_requests_waiting"}) == {
        "vllm:num_requests_waiting": [({"engine": "0", "model_name": MODEL}, 3.0)]
    }


def test_lazy_samples_read_the_group_of_a_name() -> None:
    text = 'a{x="1"} 1\na{x="2"} 2\na_total 9\n# TYPE b gauge\nb 3\nbb 4\nb{y="z"} 5\nc{bad 1\nd 7'
    lazy = LazySamples(text)
    assert lazy.get("a") == [({"x": "1"}, 1.0), ({"x": "2"}, 2.0)]
    assert lazy.get("a_total") == [({}, 9.0)]
    assert lazy.get("b") == [({}, 3.0)]  # the group ends at the first line of another name
    assert lazy.get("bb") == [({}, 4.0)]
    assert lazy.get("d") == [({}, 7.0)]  # last line without a newline
    assert lazy.get("missing") is None and lazy.get("missing", ()) == ()
    with pytest.raises(KeyError):
        lazy["missing"]
    with pytest.raises(ExpositionError) as err:
        lazy.get("c")
    assert err.value.line == 8


def test_lazy_samples_agree_with_full_parse_on_vllm_body() -> None:
    from bench.datalayer_bench import vllm_metrics_text

    text = vllm_metrics_text(waiting=2, running=9, kv=0.7, seed=3)
    full = parse_exposition(text)
    lazy = LazySamples(text)
    for name in full:
        assert lazy.get(name) == full[name], name
    assert dict(lazy.items()) == full
