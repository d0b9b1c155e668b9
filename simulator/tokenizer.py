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
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import xxhash

from scheduler.chat_render import (
    DEFAULT_ARGS,
    ChatArgs,
    ChatTemplate,
    ChatTemplateError,
    load_chat_template,
    render_chat,
)

__all__ = ["HFTokenizer", "OfflineTokenizer", "Tokenizer", "TokenizerError", "load_tokenizer", "render_chat"]

_PIECE = re.compile(r"\w+|[^\w\s]")


class TokenizerError(ValueError):
    """The tokenizer could not be loaded (message names the path and the cause)."""


class Tokenizer(Protocol):
    """Turns text into token ids. Pure and deterministic; safe to share between servers.

    ``encode``: text as is (a rendered chat prompt, whose template carries its own special tokens);
    ``encode_prompt``: a completions prompt, with the special tokens the tokenizer's post-processor adds
    (a BOS, for most models), as vLLM tokenises ``/v1/completions`` prompts.
    """

    def encode(self, text: str) -> list[int]: ...

    def encode_prompt(self, text: str) -> list[int]: ...

    def render_chat(self, messages: Sequence[Mapping[str, Any]], args: ChatArgs = DEFAULT_ARGS) -> str: ...


class _PieceIds(dict[str, int]):
    """Memo of piece -> id; a miss hashes the piece (so lookups run in C via ``map``)."""

    __slots__ = ("vocab",)

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def __missing__(self, piece: str) -> int:
        value = self[piece] = xxhash.xxh32_intdigest(piece.encode()) % self.vocab
        return value


class OfflineTokenizer:
    """Regex word/punctuation split with hashed ids in ``[0, vocab_size)``.

    Two memos keep repeated work cheap: piece -> id (bounded at ~1M pieces) and the last
    ``recent_texts`` texts -> ids (a router's render call followed by the request itself, repeated
    prompts). Both are pure caches; :meth:`encode` always returns a fresh list.
    """

    __slots__ = ("_ids", "_recent", "_recent_max")

    _MAX_PIECES = 1 << 20

    def __init__(self, vocab_size: int = 128_000, recent_texts: int = 64) -> None:
        self._ids = _PieceIds(vocab_size)
        self._recent: OrderedDict[str, list[int]] = OrderedDict()
        self._recent_max = recent_texts

    def encode(self, text: str) -> list[int]:
        recent = self._recent
        hit = recent.get(text)
        if hit is not None:
            recent.move_to_end(text)
            return list(hit)
        if len(self._ids) >= self._MAX_PIECES:
            self._ids.clear()
        ids = list(map(self._ids.__getitem__, _PIECE.findall(text)))
        if self._recent_max:
            recent[text] = ids
            if len(recent) > self._recent_max:
                recent.popitem(last=False)
        return list(ids)

    def encode_prompt(self, text: str) -> list[int]:
        return self.encode(text)  # no special tokens in this vocabulary

    def render_chat(self, messages: Sequence[Mapping[str, Any]], args: ChatArgs = DEFAULT_ARGS) -> str:
        return render_chat(messages)  # the fixed template takes no tools or template variables


class HFTokenizer:
    """Wraps ``tokenizers.Tokenizer`` (a real model's vocabulary, loaded from a local file) and the
    directory's chat template, if any (:func:`scheduler.chat_render.load_chat_template`; without one,
    chat messages are rendered with :func:`render_chat`)."""

    __slots__ = ("_tok", "template")

    def __init__(self, tok: Any, template: ChatTemplate | None = None) -> None:
        self._tok = tok
        self.template = template

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_prompt(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=True).ids)

    def render_chat(self, messages: Sequence[Mapping[str, Any]], args: ChatArgs = DEFAULT_ARGS) -> str:
        """The chat prompt (ChatTemplateError: the model's template refused the messages); ``args``: the
        request's tools and template variables, for the model's template."""
        return self.template.render(messages, args) if self.template is not None else render_chat(messages)


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
            "--tokenizer: the 'tokenizers' package is not installed (pip install 'pyepp[sim]')"
        ) from exc
    try:
        tok = tokenizers.Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises plain Exception on a malformed file
        raise TokenizerError(f"--tokenizer: cannot load {file}: {exc}") from exc
    try:
        return HFTokenizer(tok, load_chat_template(file.parent))
    except ChatTemplateError as exc:
        raise TokenizerError(f"--tokenizer: {file.parent}: {exc}") from exc
