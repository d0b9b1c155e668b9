"""--disable-endpoint-subset-filter and --emit-endpoint-scores at the protocol core (SessionConfig)."""

from __future__ import annotations

import orjson
import pytest
from extproc_messages import BUFFERED, FULL_DUPLEX, lb_metadata, metadata, request_body, request_headers

from epp.protocol import Schedule, Send, Session, SessionConfig
from scheduler.types import Endpoint, ProfileResult, SchedulingResult, ScoredEndpoint

CHAT = orjson.dumps({"model": "llama", "messages": [{"role": "user", "content": "hi"}]})
HINT = metadata({"envoy.lb.subset_hint": {"x-gateway-destination-endpoint-subset": ["10.0.0.1:8000"]}})


def _schedule(config: SessionConfig, mode: int = FULL_DUPLEX) -> tuple[Session, Schedule]:
    s = Session(config)
    s.receive(request_headers(md=HINT, path="/v1/chat/completions", request_mode=mode))
    (sched,) = [a for a in s.receive(request_body(CHAT)) if isinstance(a, Schedule)]
    return s, sched


@pytest.mark.parametrize(("enabled", "expected"), [(True, frozenset({"10.0.0.1:8000"})), (False, None)])
def test_subset_hint_is_ignored_when_the_filter_is_disabled(enabled: bool, expected: object) -> None:
    _, sched = _schedule(SessionConfig(endpoint_subset_filter=enabled))
    assert sched.subset == expected


def _result() -> SchedulingResult:
    a, b, c = (Endpoint(address=f"10.0.0.{i}:8000") for i in (1, 2, 3))
    candidates = (ScoredEndpoint(a, 0.75), ScoredEndpoint(b, 0.5), ScoredEndpoint(c, 0.0))
    shadow = ProfileResult("other", (ScoredEndpoint(c, 1.0),), True, (ScoredEndpoint(c, 1.0),))
    return SchedulingResult(
        "default",
        (a,),
        {"default": ProfileResult("default", candidates[:1], False, candidates), "other": shadow},
    )


@pytest.mark.parametrize("mode", [FULL_DUPLEX, BUFFERED])
@pytest.mark.parametrize("emit", [True, False])
def test_endpoint_scores_in_routing_metadata(mode: int, emit: bool) -> None:
    s, _ = _schedule(SessionConfig(emit_endpoint_scores=emit), mode)
    (reply, *_) = [a.response for a in s.scheduled(_result()) if isinstance(a, Send)]
    lb = lb_metadata(reply)["envoy.lb"]
    assert lb["x-gateway-destination-endpoint"] == "10.0.0.1:8000"
    if emit:  # the primary profile's candidates, every one with its total
        assert lb["x-gateway-destination-endpoint-scores"] == {
            "10.0.0.1:8000": 0.75,
            "10.0.0.2:8000": 0.5,
            "10.0.0.3:8000": 0.0,
        }
    else:
        assert "x-gateway-destination-endpoint-scores" not in lb
