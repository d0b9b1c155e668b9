"""Token usage from model-server responses, and the model-name rewrite back.

JSON bodies: ``usage.prompt_tokens``, ``completion_tokens``, ``total_tokens``,
``prompt_tokens_details.cached_tokens``; Responses API: ``input_tokens``, ``output_tokens``,
``input_tokens_details.cached_tokens`` (total = input + output when absent).

SSE bodies: every ``data:`` line holding a JSON object whose ``usage`` is non-null; ``[DONE]`` skipped.
The **last** such object wins: with ``stream_options.include_usage`` only the final chunk carries usage
(so last == first), and with ``continuous_usage_stats`` the last one is the complete count.

Nothing is decoded per chunk: the response state keeps the last few SSE chunks and decodes their last
usage report once, at the end (see :class:`~epp.protocol.response.ResponseState`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from scheduler.types import Usage

__all__ = ["USAGE_MARKER", "rewrite_model_bytes", "usage_from_json", "usage_from_mapping", "usage_from_sse"]

USAGE_MARKER = b'"usage"'


def _int(mapping: Mapping[str, Any], key: str) -> int:
    """A non-negative count; JSON floats are truncated and numeric strings (sent by some
    non-conforming servers) parsed, as upstream does; anything else is 0."""
    value = mapping.get(key)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        return 0
    return int(value) if value < 2**63 else 0


def usage_from_mapping(usage: Any) -> Usage | None:
    """A :class:`Usage` from a decoded ``usage`` object (None when it is not an object)."""
    if not isinstance(usage, dict):
        return None
    prompt = _int(usage, "prompt_tokens") or _int(usage, "input_tokens")
    completion = _int(usage, "completion_tokens") or _int(usage, "output_tokens")
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = _int(details, "cached_tokens") if isinstance(details, dict) else 0
    total = _int(usage, "total_tokens") or prompt + completion
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total, cached_tokens=cached)


def usage_from_json(body: bytes) -> Usage | None:
    """Usage of a JSON response body (top-level ``usage`` or Responses API ``response.usage``)."""
    if USAGE_MARKER not in body:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    found = usage_from_mapping(doc.get("usage"))
    if found is None and isinstance(doc.get("response"), dict):
        found = usage_from_mapping(doc["response"].get("usage"))
    return found


def usage_from_sse(data: bytes) -> Usage | None:
    """Usage from SSE text: the last ``data:`` JSON object with a non-null usage (None if none).

    Lines are read from the end, so only the events after the last usage report are decoded.
    """
    for line in reversed(data.split(b"\n")):
        line = line.strip()
        if not line.startswith(b"data:") or USAGE_MARKER not in line:
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            continue
        usage = usage_from_json(payload)
        if usage is not None:
            return usage
    return None


def rewrite_model_bytes(data: bytes, old: bytes, new: bytes) -> bytes:
    """Replace the JSON member ``"model":"<old>"`` (compact or with one space) by ``<new>``.

    ``old``/``new`` are the JSON-encoded string values (quotes included). Returns ``data`` itself when
    nothing matched, so callers can detect "unchanged" by identity.
    """
    if old not in data:
        return data
    out = data.replace(b'"model":' + old, b'"model":' + new).replace(b'"model": ' + old, b'"model": ' + new)
    return out if out != data else data
