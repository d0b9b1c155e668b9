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
    "json_error",
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


def json_error(exc: ValueError, body: bytes, what: str = "request body") -> InvalidRequestError:
    """A plain-language 400 for ``body`` that failed to parse as JSON (``exc`` from ``orjson.loads``).

    The message says what is wrong and where, as a byte offset into the body: e.g.
    ``request body is not valid JSON: unexpected text 'not json a' at byte 0``; an empty body, a body
    cut short and one that is not UTF-8 get a sentence of their own."""
    if not body.strip():
        return InvalidRequestError(f"{what} is empty: expected a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as bad:
        return InvalidRequestError(f"{what} is not valid UTF-8 (JSON must be UTF-8): byte {bad.start}")
    pos = getattr(exc, "pos", 0) or 0
    at = len(text[:pos].encode("utf-8"))  # orjson counts characters; users count bytes
    snippet = text[pos : pos + 12]
    reason = str(getattr(exc, "msg", "") or exc).split(": line ")[0]
    if reason.startswith("invalid literal") or reason.startswith("unexpected character"):
        detail = f"unexpected text {snippet!r} at byte {at}"
        if "expected" in reason and not reason.startswith("invalid literal"):
            detail += f" ({reason.split(', ', 1)[-1]})"
    elif reason.startswith("unexpected end of data"):
        detail = f"it ends at byte {at} before the JSON value is complete (an unclosed {{, [ or string?)"
    elif reason.startswith("unexpected content after document"):
        detail = f"unexpected text {snippet!r} after the JSON value, at byte {at}"
    elif reason.startswith("trailing comma"):
        detail = f"a trailing comma at byte {at} (JSON allows none)"
    else:
        detail = f"{reason} at byte {at}"
    return InvalidRequestError(f"{what} is not valid JSON: {detail}")
