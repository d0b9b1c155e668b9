"""Tokenizers: a deterministic offline one, and an optional HuggingFace ``tokenizer.json`` loader.

:class:`OfflineTokenizer` splits text with the regex ``\\w+|[^\\w\\s]`` (words and single punctuation
characters; whitespace is dropped) and maps each piece to ``xxh32(piece) % vocab_size``. The same text
always gives the same ids, in every process. :func:`render_chat` turns chat messages into one prompt text
with a fixed template, so chat prompts tokenise deterministically too.

:func:`load_tokenizer` loads ``<dir>/tokenizer.json`` with the ``tokenizers`` package (an optional
dependency) so the simulator and an external load generator count tokens alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import xxhash

__all__ = ["HFTokenizer", "OfflineTokenizer", "Tokenizer", "TokenizerError", "load_tokenizer", "render_chat"]

_PIECE = re.compile(r"\w+|[^\w\s]")


class TokenizerError(ValueError):
    """The tokenizer could not be loaded (message names the path and the cause)."""


class Tokenizer(Protocol):
    """Turns text into token ids. Pure and deterministic; safe to share between servers."""

    def encode(self, text: str) -> list[int]: ...


class OfflineTokenizer:
    """Regex word/punctuation split with hashed ids in ``[0, vocab_size)``."""

    __slots__ = ("_ids", "_vocab")

    _MAX_MEMO = 1 << 20

    def __init__(self, vocab_size: int = 128_000) -> None:
        self._vocab = vocab_size
        self._ids: dict[str, int] = {}  # memo of piece -> id (pure, so safe to cache)

    def _id(self, piece: str) -> int:
        if len(self._ids) >= self._MAX_MEMO:
            self._ids.clear()
        value = self._ids[piece] = xxhash.xxh32_intdigest(piece.encode()) % self._vocab
        return value

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        get = ids.get
        out = []
        for piece in _PIECE.findall(text):
            value = get(piece)
            out.append(value if value is not None else self._id(piece))
        return out


class HFTokenizer:
    """Wraps ``tokenizers.Tokenizer`` (a real model's vocabulary, loaded from a local file)."""

    __slots__ = ("_tok",)

    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)


def load_tokenizer(directory: str | None) -> Tokenizer:
    """The offline tokenizer when ``directory`` is None, else ``directory/tokenizer.json``."""
    if directory is None:
        return OfflineTokenizer()
    path = Path(directory)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise TokenizerError(f"--tokenizer: {file} does not exist (expected a HuggingFace tokenizer.json)")
    try:
        import tokenizers
    except ImportError as exc:
        raise TokenizerError(
            "--tokenizer: the 'tokenizers' package is not installed (pip install tokenizers)"
        ) from exc
    try:
        return HFTokenizer(tokenizers.Tokenizer.from_file(str(file)))
    except Exception as exc:  # the library raises plain Exception on a malformed file
        raise TokenizerError(f"--tokenizer: cannot load {file}: {exc}") from exc


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "\n".join(texts)
    return ""


def render_chat(messages: Iterable[Mapping[str, Any]]) -> str:
    """Render chat messages with a fixed template ``<|role|>\\ncontent\\n`` ending ``<|assistant|>``."""
    out = [f"<|{m.get('role', 'user')}|>\n{_content_text(m.get('content'))}\n" for m in messages]
    out.append("<|assistant|>\n")
    return "".join(out)
