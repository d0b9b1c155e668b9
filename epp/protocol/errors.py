"""Protocol error types of the ext_proc core (the h11 split between the two sides).

* :class:`RemoteProtocolError`: the proxy sent something the protocol does not allow in the current
  state (a body before headers, a second request, an unsupported body mode). The gRPC loop ends the
  stream with a gRPC error (``INVALID_ARGUMENT``), so the proxy's failure mode (fail-open/close) applies.
* :class:`LocalProtocolError`: the caller of :class:`~epp.protocol.session.Session` misused it
  (``scheduled()`` without a pending ``Schedule``). This is a bug in the loop.

Per-request HTTP errors are not protocol errors: they are :class:`epp.request.errors.RequestError`
and become an ImmediateResponse.
"""

from __future__ import annotations

__all__ = ["LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """Base class of ext_proc protocol errors."""


class RemoteProtocolError(ProtocolError):
    """The proxy violated the ext_proc protocol; end the stream with a gRPC error."""


class LocalProtocolError(ProtocolError):
    """The session was driven incorrectly by its caller (a bug in the loop)."""
