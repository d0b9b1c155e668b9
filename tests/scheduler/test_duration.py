"""One duration grammar: Go's time.ParseDuration, its own test table ported, through every entry point.

The tables are Go's ``parseDurationTests`` / ``parseDurationErrorTests`` (src/time/time_test.go),
exact to the nanosecond, plus the cases our parsers used to disagree on (spaces, overflow, ``1d``).
Every string entry point must give the same answer: flags (``epp.config.flags``), configuration files
(``scheduler.duration.parse_duration``), the data layer (``datalayer.params.go_duration``) and the
simulator's flags (which also take a bare number of milliseconds).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from datalayer.params import go_duration as datalayer_duration
from epp.config.flags import parse_duration as flag_duration
from scheduler.duration import DurationError, go_duration, go_duration_ns, parse_duration
from simulator.cli import parse_duration as sim_duration

NS, US, MS, S, M, H = 1, 10**3, 10**6, 10**9, 60 * 10**9, 3600 * 10**9
MAX, MIN = (1 << 63) - 1, -(1 << 63)

GO_VALID = [
    # simple
    ("0", 0),
    ("5s", 5 * S),
    ("30s", 30 * S),
    ("1478s", 1478 * S),
    # sign
    ("-5s", -5 * S),
    ("+5s", 5 * S),
    ("-0", 0),
    ("+0", 0),
    # decimal
    ("5.0s", 5 * S),
    ("5.6s", 5 * S + 600 * MS),
    ("5.s", 5 * S),
    (".5s", 500 * MS),
    ("1.0s", 1 * S),
    ("1.00s", 1 * S),
    ("1.004s", 1 * S + 4 * MS),
    ("1.0040s", 1 * S + 4 * MS),
    ("100.00100s", 100 * S + 1 * MS),
    # different units
    ("10ns", 10 * NS),
    ("11us", 11 * US),
    ("12µs", 12 * US),  # U+00B5
    ("12μs", 12 * US),  # U+03BC
    ("13ms", 13 * MS),
    ("14s", 14 * S),
    ("15m", 15 * M),
    ("16h", 16 * H),
    # composite durations
    ("3h30m", 3 * H + 30 * M),
    ("10.5s4m", 4 * M + 10 * S + 500 * MS),
    ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
    ("1h2m3s4ms5us6ns", 1 * H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS),
    ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
    # large value
    ("52763797000ns", 52763797000 * NS),
    # more than 9 digits after decimal point (golang.org/issue/6617)
    ("0.3333333333333333333h", 20 * M),
    # 1<<53+1 cannot be stored precisely in a float64
    ("9007199254740993ns", (1 << 53) + 1),
    # largest duration that can be represented by int64 in nanoseconds
    ("9223372036854775807ns", MAX),
    ("9223372036854775.807us", MAX),
    ("9223372036s854ms775us807ns", MAX),
    ("-9223372036854775808ns", MIN),
    ("-9223372036854775.808us", MIN),
    ("-9223372036s854ms775us808ns", MIN),
    # largest negative round trip value (golang.org/issue/48629)
    ("-2562047h47m16.854775808s", MIN),
    # huge string (golang.org/issue/15011)
    ("0.100000000000000000000h", 6 * M),
    # the first overflow check in leadingFraction
    ("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS),
    # the durations our parsers disagreed on
    ("1m30s", 90 * S),
    ("1h", H),
    ("500us", 500 * US),
]

GO_INVALID = [
    # invalid
    "",
    "3",
    "-",
    "s",
    ".",
    "-.",
    ".s",
    "+.s",
    "1d",
    "\x85\x85",
    "\xffff",
    "hello \xffff world",
    "\ufffd",
    "\ufffd hello \ufffd world",
    # overflow
    "9223372036854775810ns",
    "9223372036854775808ns",
    "-9223372036854775809ns",
    "9223372036854776us",
    "3000000h",
    "9223372036854775.808us",
    "9223372036854ms775us808ns",
    # ours: no spaces, no exponent, no other spellings
    " 1s",
    "1s ",
    "1 s",
    "1m 30s",
    "1e3ms",
    "2S",
    "2sec",
    "--1s",
    "+-1s",
]


@pytest.mark.parametrize(("text", "ns"), GO_VALID)
def test_go_table_exact_to_the_nanosecond(text: str, ns: int) -> None:
    assert go_duration_ns(text) == ns
    assert go_duration(text) == ns / 1e9


@pytest.mark.parametrize("text", GO_INVALID)
def test_go_table_rejects(text: str) -> None:
    with pytest.raises(DurationError, match="duration"):
        go_duration_ns(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3", 'time: missing unit in duration "3"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
    ],
)
def test_go_error_messages(text: str, message: str) -> None:
    with pytest.raises(DurationError) as err:
        go_duration_ns(text)
    assert str(err.value) == message


NonNegative = Callable[[str], float]
ENTRY_POINTS: list[tuple[str, NonNegative, type[Exception], bool]] = [
    ("config", parse_duration, ValueError, True),
    ("data layer", datalayer_duration, ValueError, True),
    ("flags", flag_duration, argparse.ArgumentTypeError, False),
    ("simulator", sim_duration, argparse.ArgumentTypeError, False),
]


def _outcome(parse: NonNegative, error: type[Exception], text: str) -> object:
    try:
        return parse(text)
    except error as exc:
        return "negative" if "negative" in str(exc) else "rejected"


@pytest.mark.parametrize(
    ("where", "parse", "error", "negative_ok"), ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS]
)
def test_every_entry_point_speaks_the_same_grammar(
    where: str, parse: NonNegative, error: type[Exception], negative_ok: bool
) -> None:
    wrong = []
    for text, ns in GO_VALID:
        want = "negative" if ns < 0 and not negative_ok else ns / 1e9
        if (got := _outcome(parse, error, text)) != want:
            wrong.append((text, got, want))
    for text in GO_INVALID:
        if where == "simulator" and text == "3":
            continue  # the simulator's flags take a bare number of milliseconds (below)
        if (got := _outcome(parse, error, text)) != "rejected":
            wrong.append((text, got, "rejected"))
    assert wrong == []


def test_config_files_also_take_a_number_of_seconds() -> None:
    assert parse_duration(2) == 2.0 and parse_duration(0.25) == 0.25
    for raw in (True, None, [1], {"s": 1}):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(raw)


def test_data_layer_takes_strings_only() -> None:
    with pytest.raises(ValueError):
        datalayer_duration(5)  # type: ignore[arg-type]


def test_simulator_bare_numbers_are_milliseconds() -> None:
    assert sim_duration("12") == 0.012 and sim_duration("1.5") == 0.0015 and sim_duration("0") == 0.0
