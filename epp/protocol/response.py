"""Response-path state of one dispatched request (used by :class:`~epp.protocol.session.Session`).

Per chunk the work is: appending a reference to a bounded container, and an optional
``bytes.replace`` when the model name was rewritten. JSON is decoded once, at the end of the response.

* Streaming (``text/event-stream``): chunks are forwarded at once; references to the last
  :data:`SSE_WINDOW` chunks are kept (a deque with ``maxlen``). Model servers send usage in the last
  event before ``[DONE]`` (``include_usage``) or in every event (``continuous_usage_stats``), so at the
  end the window is joined and its ``data:`` lines are read from the last one backwards until one
  carries a non-null usage. An event split over up to ``SSE_WINDOW - 1`` proxy chunks is still read.
* Non-streamed: chunks are forwarded at once and a reference kept (up to ``capture_limit`` bytes)
  to parse the usage at the end. When the model name must be rewritten back the body is held
  until complete, rewritten as JSON, and then sent (its ``content-length`` is removed from the
  response headers since they are answered before the body is known).
* A request parsed by a parser with its own response format (Anthropic, SGLang, gRPC) passes that
  parser's :class:`~epp.request.parser.UsageReader`; for a streamed response the first
  :data:`SSE_HEAD` chunks are kept too (Anthropic reports the input tokens in its first event), and
  the reader gets the head and the window joined (each chunk once).
"""

from __future__ import annotations

from collections import deque
from time import perf_counter

import orjson

from epp.protocol.usage import rewrite_model_bytes, usage_from_json, usage_from_sse
from epp.request.parser import UsageReader
from scheduler.types import Usage

__all__ = ["SSE_HEAD", "SSE_WINDOW", "ResponseState"]

SSE_WINDOW = 16
SSE_HEAD = 4


class ResponseState:
    """Mutable per-response bookkeeping; one instance per dispatched request."""

    __slots__ = (
        "_captured",
        "_captured_bytes",
        "_head",
        "_held",
        "_new_model",
        "_old_model",
        "_reader",
        "_recent",
        "capture_limit",
        "chunks",
        "first_at",
        "size",
        "status",
        "streaming",
    )

    def __init__(
        self,
        status: int,
        streaming: bool,
        rewrite: tuple[str, str] | None,
        capture_limit: int,
        hold: bool = True,
        reader: UsageReader | None = None,
    ) -> None:
        """``rewrite`` is ``(target_model, original_model)``: replace the first by the second.

        ``hold`` allows holding a non-streamed body for a JSON rewrite; without it such bodies are
        rewritten chunk by chunk like streamed ones. ``reader`` reads the usage of the request's
        format (None: the OpenAI-compatible ``usage``).
        """
        self._reader = reader
        self.status = status
        self.streaming = streaming
        self.capture_limit = capture_limit if 200 <= status < 300 else 0
        self.chunks = 0
        self.first_at = 0.0  # perf_counter() at the first body chunk of a streamed response
        self.size = 0  # body bytes received from the model server
        self._old_model = b""
        self._new_model = b""
        if rewrite is not None and 200 <= status < 300:
            self._old_model = orjson.dumps(rewrite[0])
            self._new_model = orjson.dumps(rewrite[1])
        self._captured: list[bytes] = []
        self._captured_bytes = 0
        self._held: list[bytes] | None = [] if self._old_model and hold and not streaming else None
        self._recent: deque[bytes] | None = (
            deque(maxlen=SSE_WINDOW) if streaming and self.capture_limit else None
        )
        self._head: list[bytes] | None = [] if self._recent is not None and reader is not None else None

    @property
    def rewrites(self) -> bool:
        """True when the model name is rewritten back (the body length may change)."""
        return bool(self._old_model)

    @property
    def holds_body(self) -> bool:
        """True when the body is held until complete (non-streamed response with a model rewrite)."""
        return self._held is not None

    def chunk(self, data: bytes) -> bytes | None:
        """Account for one body chunk; return the bytes to forward now (None while holding the body)."""
        self.chunks += 1
        self.size += len(data)
        if self.chunks == 1 and self.streaming:
            self.first_at = perf_counter()
        if self._held is not None:
            self._held.append(data)
            return None
        if self._recent is not None:
            self._recent.append(data)
            if self._head is not None and len(self._head) < SSE_HEAD:
                self._head.append(data)
        elif not self.streaming and self._captured_bytes < self.capture_limit:
            self._captured.append(data)
            self._captured_bytes += len(data)
        if self._old_model:
            return rewrite_model_bytes(data, self._old_model, self._new_model)
        return data

    def finish(self) -> bytes | None:
        """End of the body: the held body to send now (rewritten), or None when nothing was held."""
        if self._held is None:
            return None
        body = b"".join(self._held)
        self._held = None
        self._captured = [body]
        self._captured_bytes = len(body)
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            return rewrite_model_bytes(body, self._old_model, self._new_model)
        if isinstance(doc, dict) and doc.get("model") == orjson.loads(self._old_model):
            doc["model"] = orjson.loads(self._new_model)
            return orjson.dumps(doc)
        return body

    def decode_seconds(self) -> float:
        """Seconds from the first body chunk of a streamed response until now (0.0 when not streamed
        or fewer than two chunks came): at the end of the response, the time its tokens after the
        first took (``Completion.decode_seconds``)."""
        if self.chunks < 2 or not self.first_at:
            return 0.0
        return perf_counter() - self.first_at

    def usage(self) -> Usage:
        """The usage reported by the model server (zeros when it reported none)."""
        if self._reader is not None:
            return self._read_with(self._reader) or Usage()
        found: Usage | None = None
        if self.streaming:
            if self._recent:
                found = usage_from_sse(b"".join(self._recent))
        elif self._captured and self._captured_bytes <= self.capture_limit:
            found = usage_from_json(b"".join(self._captured))
        return found if found is not None else Usage()

    def _read_with(self, reader: UsageReader) -> Usage | None:
        if self.streaming:
            if not self._recent:
                return None
            recent = list(self._recent)
            head = self._head or []
            overlap = max(0, len(head) + len(recent) - self.chunks)
            return reader.read(b"".join(head + recent[overlap:]), True)
        if self._captured and self._captured_bytes <= self.capture_limit:
            return reader.read(b"".join(self._captured), False)
        return None
