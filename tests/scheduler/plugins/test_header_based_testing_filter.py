import pytest

from scheduler.cycle_state import CycleState
from scheduler.plugins.filters.header_testing import TEST_SELECTION_HEADER, HeaderBasedTestingFilter
from scheduler.types import Endpoint, LLMRequest

A, B, C = Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.1:8001"), Endpoint("10.0.0.2:8000")


def req(value: str | None) -> LLMRequest:
    headers = {} if value is None else {TEST_SELECTION_HEADER: value}
    return LLMRequest(request_id="r", model="m", target_model="m", headers=headers)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, []),
        ("", []),
        ("10.0.0.2:8000", [C]),
        ("10.0.0.2:8000, 10.0.0.1:8001", [B, C]),  # endpoint order, not header order
        ("10.0.0.1", [A, B]),  # bare IP: every port
        ("10.0.0.9:8000", []),
        (" , 10.0.0.1:8000 ,", [A]),
    ],
)
def test_filter(header: str | None, expected: list[Endpoint]) -> None:
    assert list(HeaderBasedTestingFilter("h").filter(CycleState(), req(header), [A, B, C])) == expected


def test_reason() -> None:
    f = HeaderBasedTestingFilter("h")
    assert f.reason(CycleState(), req(None), A) == f"header {TEST_SELECTION_HEADER} missing"
    assert f.reason(CycleState(), req("x"), A) == f"not listed in header {TEST_SELECTION_HEADER}"


def _ep(address: str) -> Endpoint:
    return Endpoint(address)


# GIE's TestFilter table (request_header_based_filter): expected as sets (we keep endpoint order)
@pytest.mark.parametrize(
    ("header", "endpoints", "expected"),
    [
        (None, ["10.0.0.1:3000"], set()),  # header unset in request
        ("10.0.0.99", ["10.0.0.1:3000"], set()),  # header set but no IP match
        ("10.0.0.1", ["10.0.0.1:3002"], {"10.0.0.1:3002"}),  # IP-only header matches pod (port-agnostic)
        ("10.0.0.1:3002", ["10.0.0.1:3000", "10.0.0.1:3002", "10.0.0.2:3002"], {"10.0.0.1:3002"}),
        ("10.0.0.1:9999", ["10.0.0.1:3002"], set()),  # non-matching port
        (
            "10.0.0.3:3004, 10.0.0.2, 10.0.0.3",
            ["10.0.0.1:3000", "10.0.0.2:3002", "10.0.0.3:3004"],
            {"10.0.0.3:3004", "10.0.0.2:3002"},
        ),
        ("[fd00::1]:3002", ["[fd00::1]:3002", "[fd00::2]:3002"], {"[fd00::1]:3002"}),  # IPv6 with port
        ("fd00::2", ["[fd00::1]:3002", "[fd00::2]:3004"], {"[fd00::2]:3004"}),  # IPv6 bare address
        ("[fd00::2]", ["[fd00::1]:3002", "[fd00::2]:3004"], {"[fd00::2]:3004"}),
    ],
)
def test_gie_table(header: str | None, endpoints: list[str], expected: set[str]) -> None:
    kept = HeaderBasedTestingFilter("h").filter(CycleState(), req(header), [_ep(a) for a in endpoints])
    assert {e.address for e in kept} == expected
