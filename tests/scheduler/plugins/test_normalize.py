import pytest

from scheduler.plugins.scorers.normalize import lower_is_better


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], []),
        ([7], [1.0]),
        ([3, 3, 3], [1.0, 1.0, 1.0]),
        ([0, 5, 10], [1.0, 0.5, 0.0]),
        ([10, 2, 4], [0.0, 1.0, 0.75]),
        ([0.25, 0.75], [1.0, 0.0]),
    ],
)
def test_lower_is_better(values: list[float], expected: list[float]) -> None:
    assert lower_is_better(values) == pytest.approx(expected)
