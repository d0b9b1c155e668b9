import pytest
from plugin_builders import DONE, endpoints, req, routed, routed_pd

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.scorers.active_request import (
    SERVED_ENDPOINT_HEADER,
    ActiveRequestParams,
    ActiveRequestScorer,
    factory,
)
from scheduler.types import Completion, Outcome

EPS = endpoints(4)


def scorer() -> ActiveRequestScorer:
    return ActiveRequestScorer("a", lambda: 0.0)


@pytest.mark.parametrize(
    ("dispatch_to", "expected"),
    [
        ([], [1.0, 1.0, 1.0, 1.0]),
        ([0], [0.0, 1.0, 1.0, 1.0]),
        ([0, 0, 1], [0.0, 0.5, 1.0, 1.0]),
        ([0, 0, 0, 0, 1, 2, 2], [0.0, 0.75, 0.5, 1.0]),
        ([0, 1, 2, 3], [0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_scores(dispatch_to: list[int], expected: list[float]) -> None:
    s = scorer()
    for n, i in enumerate(dispatch_to):
        s.on_dispatched(req(n), routed(EPS[i]))
    assert s.score(CycleState(), req(99), EPS) == pytest.approx(expected)


def test_completion_twice_counts_once() -> None:
    s = scorer()
    s.on_dispatched(req(1), routed(EPS[0]))
    s.on_dispatched(req(2), routed(EPS[0]))
    s.on_completed(req(1), routed(EPS[0]), DONE)
    s.on_completed(req(1), routed(EPS[0]), DONE)
    assert s.tracker.requests(EPS[0].address) == 1
    s.on_completed(req(2), routed(EPS[0]), DONE)
    assert s.score(CycleState(), req(3), EPS) == [1.0] * 4


def test_fallback_served_moves_count() -> None:
    s = scorer()
    result = routed(EPS[0], EPS[1])
    s.on_dispatched(req(1), result)
    s.on_response_headers(req(1), result, 200, {SERVED_ENDPOINT_HEADER: EPS[1].address})
    assert s.tracker.request_counts == {EPS[1].address: 1}
    s.on_completed(req(1), result, Completion(Outcome.OK, served_endpoint=EPS[1].address))
    assert s.tracker.request_counts == {}


def test_counts_every_routed_profile() -> None:
    s = scorer()
    d, p = EPS[0], EPS[1]
    s.on_dispatched(req(1), routed_pd(d, p))
    assert s.tracker.request_counts == {d.address: 1, p.address: 1}
    s.on_endpoints_removed(frozenset({p.address}))
    assert s.tracker.request_counts == {d.address: 1}


def test_timeout_parameter() -> None:
    s = factory("a", {"requestTimeout": "30s"}, PluginHandle())
    assert isinstance(s, ActiveRequestScorer) and s.params == ActiveRequestParams(30.0)
    for key, bad in (("idleThreshold", -1), ("maxBusyScore", 1.5)):
        with pytest.raises(ConfigError, match=key):
            factory("a", {key: bad}, PluginHandle())
    for bad in ("0s", "soon", -1):
        with pytest.raises(ConfigError, match="requestTimeout"):
            factory("a", {"requestTimeout": bad}, PluginHandle())


@pytest.mark.parametrize(
    ("idle", "max_busy", "expected"),
    [
        (0, 1.0, [0.0, 0.5, 1.0, 1.0]),
        (0, 0.5, [0.0, 0.25, 1.0, 1.0]),  # gap between idle and busy
        (1, 1.0, [0.0, 1.0, 1.0, 1.0]),  # one request still counts as idle
        (2, 0.5, [1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_idle_threshold_and_max_busy_score(idle: int, max_busy: float, expected: list[float]) -> None:
    s = ActiveRequestScorer(
        "a", lambda: 0.0, ActiveRequestParams(idle_threshold=idle, max_busy_score=max_busy)
    )
    for n, i in enumerate([0, 0, 1]):
        s.on_dispatched(req(n), routed(EPS[i]))
    assert s.score(CycleState(), req(99), EPS) == pytest.approx(expected)
