"""Response bodies and SSE frames in vLLM's exact shapes, with per-token work kept to a byte join.

Generated text is drawn from a fixed word list: token ``i`` of a request is
``WORDS[(offset + i) % len(WORDS)]`` (offset from the request id), so text is deterministic. For a stream,
:class:`StreamRenderer` pre-renders, once per request, the bytes before and after the token text of a
content frame; each token frame is then ``prefix + escaped_word + suffix`` without JSON encoding.
Frames are ``data: <json>\\n\\n``; the last content frame carries ``finish_reason``; a usage frame
(``choices: []``) follows only with ``stream_options.include_usage``; then ``data: [DONE]\\n\\n``.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["WORDS", "StreamRenderer", "completion_body", "output_text", "usage"]

_VOCAB = (
    "the quick brown fox jumps over a lazy dog while routers pick replicas that hold the prefix so "
    "requests start sooner and queues stay short under load , every token streams in order ."
)
WORDS: tuple[str, ...] = tuple(" " + w for w in _VOCAB.split(" "))
_ESCAPED: tuple[bytes, ...] = tuple(orjson.dumps(w)[1:-1] for w in WORDS)
DONE = b"data: [DONE]\n\n"


def output_text(offset: int, n: int) -> str:
    k = len(WORDS)
    return "".join(WORDS[(offset + i) % k] for i in range(n))


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_body(
    *,
    chat: bool,
    request_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage_: dict[str, Any],
) -> bytes:
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        obj = "text_completion"
    body = {"id": request_id, "object": obj, "created": created, "model": model, "choices": [choice],
            "usage": usage_, "prompt_logprobs": None}  # fmt: skip
    if not chat:
        del body["prompt_logprobs"]
    return orjson.dumps(body)


class StreamRenderer:
    """Pre-rendered SSE frame pieces for one streamed request."""

    __slots__ = ("_chat", "_head", "_offset", "_prefix", "_suffix", "_tail")

    def __init__(self, *, chat: bool, request_id: str, created: int, model: str, offset: int) -> None:
        self._chat = chat
        self._offset = offset
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = (
            b'data: {"id":' + orjson.dumps(request_id) + b',"object":"' + obj.encode() + b'","created":'
            + str(created).encode() + b',"model":' + orjson.dumps(model)
        )  # fmt: skip
        if chat:
            self._prefix = self._head + b',"choices":[{"index":0,"delta":{"content":"'
            self._suffix = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            self._tail = b'"},"logprobs":null,"finish_reason":'
        else:
            self._prefix = self._head + b',"choices":[{"index":0,"text":"'
            self._suffix = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            self._tail = b'","logprobs":null,"finish_reason":'

    def first(self) -> bytes:
        """The role frame vLLM sends before chat content (empty for text completions)."""
        if not self._chat:
            return b""
        return self._head + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},' \
            b'"logprobs":null,"finish_reason":null}]}\n\n'  # fmt: skip

    def tokens(self, start: int, count: int, total: int, finish_reason: str) -> bytes:
        """Frames for tokens ``start .. start+count-1`` of ``total``; the last one carries the reason."""
        k = len(_ESCAPED)
        prefix, suffix, base = self._prefix, self._suffix, self._offset
        parts: list[bytes] = []
        for i in range(start, start + count):
            parts.append(prefix)
            parts.append(_ESCAPED[(base + i) % k])
            if i == total - 1:
                parts.append(self._tail + b'"' + finish_reason.encode() + b'","stop_reason":null}]}\n\n')
            else:
                parts.append(suffix)
        return b"".join(parts)

    def usage_frame(self, usage_: dict[str, Any]) -> bytes:
        return self._head + b',"choices":[],"usage":' + orjson.dumps(usage_) + b"}\n\n"
