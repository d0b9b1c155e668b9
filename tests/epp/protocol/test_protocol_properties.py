"""Properties: however a request or response body is split into chunks, the results are the same."""

from __future__ import annotations

import itertools

import orjson
from extproc_messages import (
    request_body,
    request_headers,
    response_body,
    response_headers,
    result,
    streamed_chunks,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from epp.protocol import Completed, Schedule, Send, Session, SessionConfig
from epp.protocol.response import SSE_WINDOW
from scheduler.types import Usage

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)
_messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": _text}),
    min_size=1,
    max_size=5,
)


def _cuts(size: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(min_value=0, max_value=size), max_size=8).map(sorted)


@st.composite
def bodies_and_cuts(draw: st.DrawFn) -> tuple[bytes, list[int], bool]:
    body = orjson.dumps({"model": draw(st.sampled_from(["m", "llama-3"])), "messages": draw(_messages)})
    return body, draw(_cuts(len(body))), draw(st.booleans())


def run(body: bytes, cuts: list[int], rewrite: bool) -> tuple[object, bytes]:
    s = Session(SessionConfig(chunk_size=97))
    headers = {"x-gateway-model-name-rewrite": "target"} if rewrite else {}
    s.receive(request_headers(headers, path="/v1/chat/completions"))
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)]
    for piece in pieces[:-1]:
        assert s.receive(request_body(piece, eos=False)) == []
    (sched,) = s.receive(request_body(pieces[-1], eos=True))
    assert isinstance(sched, Schedule)
    sent = [a.response for a in s.scheduled(result("1.1.1.1:80")) if isinstance(a, Send)]
    chunks = streamed_chunks(sent[1:], "request_body")
    assert all(len(c) <= 97 for c, _ in chunks) and chunks[-1][1]
    return sched.request, b"".join(c for c, _ in chunks)


@settings(max_examples=60, deadline=None)
@given(bodies_and_cuts())
def test_any_split_yields_same_request_and_bytes(case: tuple[bytes, list[int], bool]) -> None:
    body, cuts, rewrite = case
    whole_request, whole_bytes = run(body, [], rewrite)
    split_request, split_bytes = run(body, cuts, rewrite)
    assert split_request == whole_request
    assert split_bytes == whole_bytes
    if not rewrite:
        assert split_bytes == body
    else:
        assert orjson.loads(split_bytes) == {**orjson.loads(body), "model": "target"}


def _respond(session: Session, content_type: str, body: bytes, cuts: list[int]) -> tuple[bytes, object]:
    session.receive(response_headers(200, content_type))
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)]
    forwarded: list[bytes] = []
    completion = None
    for i, piece in enumerate(pieces):
        for action in session.receive(response_body(piece, eos=i == len(pieces) - 1)):
            if isinstance(action, Send):
                forwarded.extend(c for c, _ in streamed_chunks([action.response], "response_body"))
            elif isinstance(action, Completed):
                completion = action.completion
    assert completion is not None
    return b"".join(forwarded), completion.usage  # type: ignore[attr-defined]


def _dispatched(rewrite: bool) -> Session:
    s = Session(SessionConfig())
    headers = {"x-gateway-model-name-rewrite": "target-model"} if rewrite else {}
    s.receive(request_headers(headers, path="/v1/chat/completions"))
    s.receive(request_body(b'{"model":"m","messages":[{"role":"user","content":"x"}]}'))
    s.scheduled(result("1.1.1.1:80"))
    return s


_usage = st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)}
)


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[int], dict[str, int]]:
    usage = draw(_usage)
    events = [
        orjson.dumps({"model": "m", "choices": [{"delta": {"content": draw(_text)}}], "usage": None})
        for _ in range(draw(st.integers(0, 4)))
    ]
    events.append(orjson.dumps({"model": "m", "choices": [], "usage": usage}))
    body = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    cuts = draw(st.lists(st.integers(0, len(body)), max_size=SSE_WINDOW - 2).map(sorted))
    return body, cuts, usage


@settings(max_examples=60, deadline=None)
@given(sse_streams())
def test_any_split_of_an_sse_response_yields_same_bytes_and_usage(
    case: tuple[bytes, list[int], dict],
) -> None:
    body, cuts, usage = case
    forwarded, got = _respond(_dispatched(False), "text/event-stream", body, cuts)
    assert forwarded == body
    assert got == Usage(usage["prompt_tokens"], usage["completion_tokens"], sum(usage.values()), 0)


@settings(max_examples=60, deadline=None)
@given(_usage, _text, st.data())
def test_any_split_of_a_json_response_yields_same_result(usage: dict, text: str, data: st.DataObject) -> None:
    body = orjson.dumps({"model": "target-model", "choices": [{"text": text}], "usage": usage})
    cuts = data.draw(_cuts(len(body)))
    expected = Usage(usage["prompt_tokens"], usage["completion_tokens"], sum(usage.values()), 0)
    forwarded, got = _respond(_dispatched(False), "application/json", body, cuts)
    assert forwarded == body and got == expected
    rewritten, got = _respond(_dispatched(True), "application/json", body, cuts)
    assert orjson.loads(rewritten) == {**orjson.loads(body), "model": "m"} and got == expected
