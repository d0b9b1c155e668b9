"""The frozen-response test mode of :mod:`epp.protocol.messages` (``EPP_FROZEN_RESPONSES=1``, set by
``tests/conftest.py``): a modified shared response is detected on reuse and by the after-test check."""

from __future__ import annotations

import re

import pytest

from epp.protocol import messages
from epp.protocol.headers import DESTINATION_HEADER
from epp.protocol.messages import (
    SharedResponseModifiedError,
    routing_headers_response,
    streamed_body,
    trailers_response,
    verify_shared_responses,
)


def test_the_suite_runs_with_frozen_responses() -> None:
    assert messages.FROZEN_RESPONSES


def test_a_modified_routing_response_raises_on_reuse_and_in_the_check() -> None:
    destination = "10.9.8.7:8000"
    shared = routing_headers_response({DESTINATION_HEADER: destination}, (), destination)
    assert routing_headers_response({DESTINATION_HEADER: destination}, (), destination) is shared
    shared.request_headers.response.clear_route_cache = False
    try:
        expected = re.escape("routing response for '10.9.8.7:8000'")
        with pytest.raises(SharedResponseModifiedError, match=expected):
            routing_headers_response({DESTINATION_HEADER: destination}, (), destination)
        with pytest.raises(SharedResponseModifiedError):
            verify_shared_responses()
    finally:
        shared.request_headers.response.clear_route_cache = True
    verify_shared_responses()


@pytest.mark.parametrize("modify", ["trailers", "empty chunk"])
def test_modified_empty_responses_are_detected(modify: str) -> None:
    if modify == "trailers":
        shared = trailers_response("response_trailers")
        shared.response_trailers.header_mutation.remove_headers.append("x-added")
        undo = shared.response_trailers.ClearField
        field = "header_mutation"
    else:
        shared = streamed_body("response_body", b"", 100, True)[0]
        shared.response_body.response.clear_route_cache = True
        undo = shared.response_body.response.ClearField
        field = "clear_route_cache"
    try:
        with pytest.raises(SharedResponseModifiedError):
            verify_shared_responses()
    finally:
        undo(field)
    verify_shared_responses()
