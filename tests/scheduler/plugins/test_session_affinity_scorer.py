import base64

import pytest

from scheduler.cycle_state import CycleState
from scheduler.plugins.scorers.session_affinity import (
    SESSION_TOKEN_HEADER,
    ResponseHeadersProvider,
    SessionAffinityScorer,
    decode_token,
    encode_token,
)
from scheduler.types import Endpoint, LLMRequest, ProfileResult, SchedulingResult, ScoredEndpoint

EPS = [Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.2:8000"), Endpoint("10.0.0.3:8000")]


def req(headers: dict[str, str]) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", headers=headers)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, [0.0, 0.0, 0.0]),
        ({SESSION_TOKEN_HEADER: encode_token("10.0.0.2:8000")}, [0.0, 1.0, 0.0]),
        ({SESSION_TOKEN_HEADER: encode_token("10.0.0.9:8000")}, [0.0, 0.0, 0.0]),  # endpoint gone
        ({SESSION_TOKEN_HEADER: "not base64!!"}, [0.0, 0.0, 0.0]),
        ({SESSION_TOKEN_HEADER: base64.b64encode(b"\xff\xfe").decode()}, [0.0, 0.0, 0.0]),  # not utf-8
        ({SESSION_TOKEN_HEADER: ""}, [0.0, 0.0, 0.0]),
        ({"x-other": encode_token("10.0.0.1:8000")}, [0.0, 0.0, 0.0]),
    ],
)
def test_scores(headers: dict[str, str], expected: list[float]) -> None:
    assert SessionAffinityScorer("s").score(CycleState(), req(headers), EPS) == expected


def test_token_round_trip() -> None:
    assert encode_token("10.0.0.1:8000") == base64.b64encode(b"10.0.0.1:8000").decode()
    assert decode_token(encode_token("[::1]:8000")) == "[::1]:8000"
    assert decode_token("%%%") is None


def test_response_sets_token_for_served_endpoint() -> None:
    s = SessionAffinityScorer("s")
    assert isinstance(s, ResponseHeadersProvider)
    result = SchedulingResult("d", (EPS[0], EPS[1]), {"d": ProfileResult("d", (ScoredEndpoint(EPS[0], 1),))})
    assert s.response_headers(req({}), result, None) == {SESSION_TOKEN_HEADER: encode_token(EPS[0].address)}
    assert s.response_headers(req({}), result, EPS[1].address) == {
        SESSION_TOKEN_HEADER: encode_token(EPS[1].address)
    }
    empty = SchedulingResult("d", (), {})
    assert s.response_headers(req({}), empty, None) == {}


def test_header_name_and_profile_name() -> None:
    from scheduler.handle import PluginHandle
    from scheduler.plugins.scorers.session_affinity import SessionAffinityParams, factory

    s = factory("s", {"headerName": "X-Session-Token-Prefill", "profileName": "prefill"}, PluginHandle())
    assert isinstance(s, SessionAffinityScorer)
    assert s.params == SessionAffinityParams(header_name="x-session-token-prefill", profile_name="prefill")
    token = {"x-session-token-prefill": encode_token(EPS[2].address)}
    assert s.score(CycleState(), req(token), EPS) == [0.0, 0.0, 1.0]
    result = SchedulingResult(
        "decode",
        (EPS[0],),
        {
            "decode": ProfileResult("decode", (ScoredEndpoint(EPS[0], 1),)),
            "prefill": ProfileResult("prefill", (ScoredEndpoint(EPS[2], 1),)),
        },
    )
    assert s.response_headers(req({}), result, EPS[0].address) == {
        "x-session-token-prefill": encode_token(EPS[2].address)
    }
    decode_only = SchedulingResult("decode", (EPS[0],), {"decode": result.profile_results["decode"]})
    assert s.response_headers(req({}), decode_only, None) == {}


@pytest.mark.parametrize(
    ("parameters", "key"),
    [
        ({"algorithm": "session_id_header"}, "algorithm"),
        ({"headerName": ""}, "headerName"),
        ({"headerName": 5}, "headerName"),
    ],
)
def test_bad_parameters(parameters: dict[str, object], key: str) -> None:
    from scheduler.errors import ConfigError
    from scheduler.handle import PluginHandle
    from scheduler.plugins.scorers.session_affinity import factory

    with pytest.raises(ConfigError, match=f"parameters.{key}"):
        factory("s", parameters, PluginHandle())
