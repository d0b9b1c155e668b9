"""What the HTTP/2 protocol core asks of its I/O adapter, and the states of its streams.

The core (:class:`~epp.server.h2.core.H2Core`) turns received bytes into bytes to send; the few things it
cannot do without a clock or an event loop it reports as events in ``H2Core.events``, which the adapter
(:class:`~epp.server.h2.connection.H2Connection`) empties after every call into the core:

* :class:`DeadlineSet` / :class:`DeadlineCleared`: arm or drop a stream's ``grpc-timeout`` timer (when it
  fires, the adapter calls ``H2Core.expire``);
* :class:`Suspended`: a stream's ext_proc request waits for its async pre-scheduling step or flow
  control; the adapter awaits ``ExtProcStream.settle()`` and hands the answers to ``H2Core.settled``;
* :class:`ConnectionClosed`: the core sent GOAWAY and reads nothing more; the adapter closes the socket
  after writing what the call returned.

Events are frozen slotted dataclasses; none is raised on the hot path of a request without a deadline.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from scheduler.types import Outcome

__all__ = [
    "ConnectionClosed",
    "DeadlineCleared",
    "DeadlineSet",
    "Event",
    "ExtProcHandler",
    "StreamError",
    "StreamState",
    "Suspended",
]


class ExtProcHandler(Protocol):
    """What the core needs of the application behind one stream (:class:`~epp.server.stream.ExtProcStream`
    is the engine's): a synchronous state machine fed one decoded message at a time."""

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """The answers to ``msg``, in order; raises RemoteProtocolError for a protocol violation."""
        ...

    @property
    def finished(self) -> bool:
        """Nothing more will be sent: the stream ends with ``grpc-status: 0``."""
        ...

    @property
    def suspended(self) -> bool:
        """Later messages must wait for :meth:`settle` (the core reports :class:`Suspended`)."""
        ...

    async def settle(self) -> list[ProcessingResponse]:
        """Await what the stream waits for; the answers to send then."""
        ...

    def end(self, outcome: Outcome, status: int = -1) -> None:
        """The stream ended (``status``: the gRPC status sent, -1 for none); called once or more,
        idempotent."""
        ...


class StreamError(Exception):
    """Raised by a handler's ``feed``: the stream ends with gRPC ``status`` and ``message`` (the health
    service's NOT_FOUND, for one); the connection goes on."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class StreamState(enum.Enum):
    """A stream's state in the core (RFC 9113 section 5.1, as a gRPC server for one method sees it).

    * OPEN: reading messages, each complete one is fed to the ext_proc stream at once;
    * SUSPENDED: the ext_proc stream waits for :class:`Suspended`'s settle; its later messages stay
      buffered (and count against the memory budget) until ``H2Core.settled``;
    * CLOSING: the trailers are decided (half-closed local in RFC terms): answers still wait for the peer's
      windows, the stream's DATA is ignored (only the connection window counts it);
    * CLOSED: forgotten by the connection (its buffers left the budget, its deadline was cleared).

    Transitions (:data:`TRANSITIONS`): OPEN <-> SUSPENDED, OPEN | SUSPENDED -> CLOSING, any -> CLOSED.
    Whether the client finished sending (half-closed remote) is the stream's ``remote_closed`` flag: it
    only decides whether the trailers are followed by RST_STREAM NO_ERROR.
    """

    OPEN = "open"
    SUSPENDED = "suspended"
    CLOSING = "closing"
    CLOSED = "closed"


TRANSITIONS: dict[StreamState, frozenset[StreamState]] = {
    StreamState.OPEN: frozenset({StreamState.SUSPENDED, StreamState.CLOSING, StreamState.CLOSED}),
    StreamState.SUSPENDED: frozenset({StreamState.OPEN, StreamState.CLOSING, StreamState.CLOSED}),
    StreamState.CLOSING: frozenset({StreamState.CLOSED}),
    StreamState.CLOSED: frozenset(),
}
"""The transitions the core makes; anything else is a bug (``H2Stream.move`` raises AssertionError)."""


@dataclass(frozen=True, slots=True)
class DeadlineSet:
    """Stream ``stream_id`` has a ``grpc-timeout``: call ``H2Core.expire(stream_id)`` after ``seconds``."""

    stream_id: int
    seconds: float


@dataclass(frozen=True, slots=True)
class DeadlineCleared:
    """Stream ``stream_id`` ended before its deadline: its timer may be cancelled."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class Suspended:
    """Stream ``stream_id`` waits: await ``ext.settle()`` and pass its answers (None if it raised) to
    ``H2Core.settled(stream_id, answers)``."""

    stream_id: int
    ext: ExtProcHandler


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The core ended the connection with GOAWAY ``code`` (``reason`` is its debug data)."""

    code: int
    reason: str


Event = DeadlineSet | DeadlineCleared | Suspended | ConnectionClosed
