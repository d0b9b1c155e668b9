"""The sans-I/O ext_proc protocol core: :class:`Session` turns ProcessingRequest messages into actions.

Typical loop (the gRPC servicer)::

    session = Session(config)
    try:
        async for msg in request_iterator:
            for action in session.receive(msg):
                ...  # Send -> write; Schedule -> admit + schedule, then session.scheduled()/reject()
    finally:
        for action in session.abort(outcome):   # Completed exactly once if still dispatched
            ...
"""

from epp.protocol.actions import (
    Action,
    Completed,
    Dispatched,
    Observed,
    ResponseChunk,
    ResponseStarted,
    Schedule,
    Send,
)
from epp.protocol.config import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_BODY_BYTES, SessionConfig
from epp.protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from epp.protocol.headers import CONTROL_HEADERS, DESTINATION_HEADER, DESTINATION_METADATA_KEY, LB_NAMESPACE
from epp.protocol.observability import ObservabilitySession, ObservabilityState, is_observability_stream
from epp.protocol.session import Session, State
from epp.protocol.subset import subset_hint

__all__ = [
    "CONTROL_HEADERS",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_BODY_BYTES",
    "DESTINATION_HEADER",
    "DESTINATION_METADATA_KEY",
    "LB_NAMESPACE",
    "Action",
    "Completed",
    "Dispatched",
    "LocalProtocolError",
    "ObservabilitySession",
    "ObservabilityState",
    "Observed",
    "ProtocolError",
    "RemoteProtocolError",
    "ResponseChunk",
    "ResponseStarted",
    "Schedule",
    "Send",
    "Session",
    "SessionConfig",
    "State",
    "is_observability_stream",
    "subset_hint",
]
