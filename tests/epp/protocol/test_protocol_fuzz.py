"""Fuzz: any message sequence either proceeds or raises RemoteProtocolError, and lifecycle is exact.

For every sequence: no exception other than RemoteProtocolError escapes ``receive``; after ``abort``
the number of Completed actions equals the number of Dispatched actions (0 or 1).
"""

from __future__ import annotations

from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest
from extproc_messages import (
    request_body,
    request_headers,
    request_trailers,
    response_body,
    response_headers,
    response_trailers,
    result,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

from epp.protocol import Completed, Dispatched, RemoteProtocolError, Schedule, Session, SessionConfig
from scheduler.types import Outcome

_MODES = [ProcessingMode.FULL_DUPLEX_STREAMED, ProcessingMode.BUFFERED, ProcessingMode.NONE, None]
_BODIES = [
    b'{"model":"m","prompt":"p"}',
    b'{"model":"m",',
    b"",
    b"not json",
    b'{"model":"m","prompt":"p","stream":true}',
]

_message = st.one_of(
    st.builds(
        lambda mode, eos, rewrite: request_headers(
            {"x-gateway-model-name-rewrite": "t"} if rewrite else {}, request_mode=mode, eos=eos
        ),
        st.sampled_from(_MODES),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(request_body, st.sampled_from(_BODIES), st.booleans()),
    st.just(request_trailers()),
    st.builds(
        response_headers,
        st.sampled_from([200, 500]),
        st.sampled_from(["application/json", "text/event-stream"]),
    ),
    st.builds(
        response_body,
        st.sampled_from([b'data: {"usage":{"prompt_tokens":1}}\n\n', b'{"model":"t"}', b""]),
        st.booleans(),
    ),
    st.just(response_trailers()),
    st.just(ProcessingRequest()),
)


_GOOD = b'{"model":"m","prompt":"p"}'
_prefixes = st.sampled_from(
    [
        [],
        [request_headers(), request_body(_GOOD)],
        [request_headers(eos=True)],
        [request_headers(request_mode=ProcessingMode.BUFFERED), request_body(_GOOD, eos=False)],
        [request_headers(), request_body(_GOOD, eos=False), request_trailers()],
    ]
)


@settings(max_examples=400, deadline=None)
@given(_prefixes, st.lists(_message, max_size=8), st.sampled_from(list(Outcome)), st.booleans())
def test_any_message_sequence_is_safe_and_completes_exactly_once(
    prefix: list[ProcessingRequest], rest: list[ProcessingRequest], outcome: Outcome, reject: bool
) -> None:
    messages = prefix + rest
    session = Session(SessionConfig(max_body_bytes=64))
    dispatched = completed = 0
    try:
        for msg in messages:
            actions = session.receive(msg)
            for action in actions:
                if isinstance(action, Schedule):
                    more = (
                        session.reject(503, "x", "y") if reject else session.scheduled(result("1.1.1.1:80"))
                    )
                    actions.extend(more)
                elif isinstance(action, Dispatched):
                    dispatched += 1
                elif isinstance(action, Completed):
                    completed += 1
    except RemoteProtocolError:
        pass
    completed += sum(isinstance(a, Completed) for a in session.abort(outcome))
    event(f"dispatched={dispatched} completed={completed} final={session.state.value}")
    assert dispatched <= 1 and completed == dispatched
    assert session.abort(outcome) == []
