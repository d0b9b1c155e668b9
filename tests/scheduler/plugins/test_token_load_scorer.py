import pytest
from plugin_builders import endpoints, req, routed

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.scorers.token_load import TokenLoadParams, TokenLoadScorer, factory
from scheduler.plugins.shared.inflight_hooks import SERVED_ENDPOINT_HEADER
from scheduler.types import Completion, Outcome

EPS = endpoints(3)


def scorer(threshold: int = 100) -> TokenLoadScorer:
    return TokenLoadScorer("t", lambda: 0.0, TokenLoadParams(queue_threshold_tokens=threshold))


@pytest.mark.parametrize(
    ("dispatches", "expected"),
    [
        ([], [1.0, 1.0, 1.0]),
        ([(0, 50)], [0.5, 1.0, 1.0]),
        ([(0, 50), (0, 25), (1, 100)], [0.25, 0.0, 1.0]),
        ([(2, 1000)], [1.0, 1.0, 0.0]),  # capped at the threshold
        ([(1, 0)], [1.0, 1.0, 1.0]),
    ],
)
def test_scores(dispatches: list[tuple[int, int]], expected: list[float]) -> None:
    s = scorer()
    for n, (i, tokens) in enumerate(dispatches):
        s.on_dispatched(req(n, tokens), routed(EPS[i]))
    assert s.score(CycleState(), req(99, 0), EPS) == pytest.approx(expected)


def test_streamed_output_tokens_count_until_completion() -> None:
    s = scorer()
    r = req(1, 10, stream=True)
    result = routed(EPS[0])
    s.on_dispatched(r, result)
    s.on_response_chunk(r, result, b'data: {"x":1}\n\ndata: {"x":2}\n\n')
    s.on_response_chunk(r, result, b'data: {"x":3}\n\n')
    assert s.tracker.tokens(EPS[0].address) == 13
    s.on_completed(r, result, Completion(Outcome.OK))
    s.on_completed(r, result, Completion(Outcome.OK))
    assert s.tracker.tokens(EPS[0].address) == 0


def test_non_streamed_body_adds_nothing() -> None:
    s = scorer()
    r = req(1, 10)
    s.on_dispatched(r, routed(EPS[0]))
    s.on_response_chunk(r, routed(EPS[0]), b'{"choices": [{"text": "data: hello"}]}')
    assert s.tracker.tokens(EPS[0].address) == 10


def test_fallback_served_moves_tokens() -> None:
    s = scorer()
    r, result = req(1, 40), routed(EPS[0], EPS[1])
    s.on_dispatched(r, result)
    s.on_response_headers(r, result, 200, {SERVED_ENDPOINT_HEADER: EPS[1].address})
    assert s.score(CycleState(), req(2, 0), EPS) == pytest.approx([1.0, 0.6, 1.0])


def test_parameters() -> None:
    s = factory("t", {}, PluginHandle())
    assert isinstance(s, TokenLoadScorer) and s.params == TokenLoadParams(None, None, 120.0)
    assert s.params.effective_threshold == 4_194_304
    for key in ("queueThresholdTokens", "threshold"):
        t = factory("t", {key: 1000}, PluginHandle())
        assert isinstance(t, TokenLoadScorer) and t.params.effective_threshold == 1000
        with pytest.raises(ConfigError, match=key):
            factory("t", {key: 0}, PluginHandle())
    with pytest.raises(ConfigError, match="not both"):
        factory("t", {"threshold": 5, "queueThresholdTokens": 5}, PluginHandle())
