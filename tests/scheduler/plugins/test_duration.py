import pytest

from scheduler.plugins.saturation.duration import parse_duration


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("200ms", 0.2),
        ("2s", 2.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("1h2m3s4ms", 3723.004),
        ("500us", 0.0005),
        ("500µs", 0.0005),
        ("10ns", 1e-8),
        ("0", 0.0),
        ("-2s", -2.0),
        ("+3s", 3.0),
        (".5s", 0.5),
        (2, 2.0),
        (0.25, 0.25),
    ],
)
def test_parses(raw: object, seconds: float) -> None:
    assert parse_duration(raw) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["", "2", "s", "2 s", "2sec", "1m 30s", "2S", True, None, [1], "ms", "--1s"])
def test_rejects(raw: object) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(raw)
