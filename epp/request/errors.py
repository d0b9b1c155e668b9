"""Per-request errors that end a request with an HTTP error response (never a stream or server error).

A :class:`RequestError` carries the HTTP status, a short machine-readable ``error_type`` and a human
message. The protocol core turns it into an Envoy ``ImmediateResponse`` whose body is
``{"error": {"type": error_type, "message": message}}`` with ``content-type: application/json``.

Status table (see docs/epp-protocol.md):

=====  ============================  ==========================================================
code   error_type                    when
=====  ============================  ==========================================================
400    ``invalid_request_error``     body not JSON / not an object, bad ``model``, prompt, ...
413    ``request_too_large``         body over the configured size limit
429    ``rate_limit_exceeded``       sheddable request while the pool is saturated
503    ``service_unavailable``       no candidate endpoint, empty subset, none after filtering
500    ``internal_error``            a bug; the message is short and generic
=====  ============================  ==========================================================
"""

from __future__ import annotations

__all__ = [
    "BAD_REQUEST",
    "INTERNAL_ERROR",
    "RATE_LIMITED",
    "TOO_LARGE",
    "UNAVAILABLE",
    "BodyTooLargeError",
    "InvalidRequestError",
    "RequestError",
]

BAD_REQUEST = "invalid_request_error"
TOO_LARGE = "request_too_large"
RATE_LIMITED = "rate_limit_exceeded"
UNAVAILABLE = "service_unavailable"
INTERNAL_ERROR = "internal_error"


class RequestError(Exception):
    """End this request with HTTP ``status``; ``error_type`` and ``message`` go into the JSON body."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"RequestError status must be an HTTP error status, got {status}")
        self.status = status
        self.error_type = error_type
        self.message = message
        super().__init__(f"{status} {error_type}: {message}")


class InvalidRequestError(RequestError):
    """The request body is malformed (HTTP 400). ``message`` names the offending field."""

    def __init__(self, message: str) -> None:
        super().__init__(400, BAD_REQUEST, message)


class BodyTooLargeError(RequestError):
    """The request body exceeds the configured limit (HTTP 413)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(413, TOO_LARGE, f"request body of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit
