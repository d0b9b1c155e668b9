"""The fixed chat template of ``epp-sim`` (pyepp's simulated vLLM), shared with the picker.

``epp-sim`` renders a chat request's messages into one prompt text with :func:`render_chat` before
tokenising it; the picker's in-process tokenizer (``precise-prefix-cache-*`` with
``indexerConfig.tokenizersPoolConfig``) renders chat messages the same way when the tokenizer's
directory carries no ``chat_template``, so both compute the same token ids. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["content_text", "render_chat"]


def content_text(content: Any) -> str:
    """A message's ``content``: a string as is; a list of parts: their ``text`` parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "\n".join(texts)
    return ""


def render_chat(messages: Iterable[Mapping[str, Any]]) -> str:
    """Render chat messages with a fixed template ``<|role|>\\ncontent\\n`` ending ``<|assistant|>``."""
    out = [f"<|{m.get('role', 'user')}|>\n{content_text(m.get('content'))}\n" for m in messages]
    out.append("<|assistant|>\n")
    return "".join(out)
