"""Observability streams: the second ext_proc filter of the ``observability`` Envoy variant.

An :class:`~epp.server.stream.ExtProcStream` whose first message has ``observability_mode`` set is
driven by an :class:`ObservabilityStream`: an :class:`~epp.protocol.observability.ObservabilitySession`
turns its messages into one :class:`~epp.protocol.actions.Observed` report, which goes to the server's
:class:`~epp.server.correlation.UsageCorrelation` (matched to the routing stream by ``x-request-id``).
Never scheduled, never answered: Envoy ignores answers in that mode, so nothing is sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from epp.protocol import ObservabilitySession
from scheduler.types import Outcome

if TYPE_CHECKING:
    from epp.server.stream import StreamCore

__all__ = ["ObservabilityStream"]


class ObservabilityStream:
    """The state of one observability stream. Not thread-safe; drive it from one task."""

    __slots__ = ("_correlation", "session")

    dispatched = False  # nothing is ever dispatched on this stream
    suspended = False  # nothing ever waits

    def __init__(self, core: StreamCore) -> None:
        self.session = ObservabilitySession(core.config.usage_capture_bytes)
        self._correlation = core.correlation
        self._correlation.opened()

    @property
    def finished(self) -> bool:
        """The response ended (its report was made): nothing more is expected."""
        return self.session.finished

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """Report a finished response; nothing is ever answered. Raises RemoteProtocolError."""
        for observed in self.session.receive(msg):
            self._correlation.report(observed)
        return []

    async def settle(self) -> list[ProcessingResponse]:
        return []  # never suspended

    def end(self, outcome: Outcome) -> None:
        """The stream is over (called once); cut off before its response ended, it reports nothing and
        a routing stream that deferred its completion to it completes with its own outcome."""
        session = self.session
        if not session.finished:
            self._correlation.cut_off(session.request_id)
        session.abort()
