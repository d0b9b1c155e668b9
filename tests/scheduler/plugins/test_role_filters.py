import pytest

from scheduler.cycle_state import CycleState
from scheduler.plugins.filters.roles import ROLE_LABEL, DecodeFilter, EncodeFilter, PrefillFilter
from scheduler.types import Endpoint, LLMRequest

REQ = LLMRequest(request_id="r", model="m", target_model="m")


@pytest.mark.parametrize(
    ("role", "prefill", "decode", "encode"),
    [
        ("prefill", True, False, False),
        ("decode", False, True, False),
        ("prefill-decode", True, True, False),
        ("both", True, True, False),
        ("encode-prefill", True, False, True),
        ("encode-prefill-decode", True, True, True),
        ("encode", False, False, True),
        ("Decode", False, False, False),
        ("", False, False, False),
        (None, False, True, False),
    ],
)
def test_roles(role: str | None, prefill: bool, decode: bool, encode: bool) -> None:
    endpoint = Endpoint("10.0.0.1:8000", labels={} if role is None else {ROLE_LABEL: role})
    assert bool(PrefillFilter("p").filter(CycleState(), REQ, [endpoint])) is prefill
    assert bool(DecodeFilter("d").filter(CycleState(), REQ, [endpoint])) is decode
    assert bool(EncodeFilter("e").filter(CycleState(), REQ, [endpoint])) is encode


def test_order_and_reason() -> None:
    eps = [
        Endpoint(f"10.0.0.{i}:8000", labels={ROLE_LABEL: r})
        for i, r in enumerate(["decode", "prefill", "both"])
    ]
    assert [e.address for e in PrefillFilter("p").filter(CycleState(), REQ, eps)] == [
        "10.0.0.1:8000",
        "10.0.0.2:8000",
    ]
    assert (
        PrefillFilter("p").reason(CycleState(), REQ, eps[0]).startswith(f"{ROLE_LABEL}=decode is not one of")
    )
    assert PrefillFilter("p").reason(CycleState(), REQ, Endpoint("x:1")) == f"no {ROLE_LABEL} label"
