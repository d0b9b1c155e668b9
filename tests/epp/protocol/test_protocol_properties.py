"""Property: however the body is split into chunks, the parsed request and the returned bytes agree."""

from __future__ import annotations

import itertools

import orjson
from extproc_messages import request_body, request_headers, result, streamed_chunks
from hypothesis import given, settings
from hypothesis import strategies as st

from epp.protocol import Schedule, Send, Session, SessionConfig

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
