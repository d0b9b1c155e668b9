"""The in-process tokenizer of ``precise-prefix-cache-*`` (llm-d's ``tokenizersPoolConfig``, ``local``).

A ``tokenizer.json`` read from a local directory with the ``tokenizers`` package (HuggingFace's Rust
tokenizers; never a hub download) turns each request into the token ids the model server computes, so
the producer's block keys are the servers' without a render round trip.

Which file (llm-d-kv-cache's ``LocalTokenizerConfig``): ``modelTokenizerMap[modelName]`` when the map
names the model, else auto-discovery: every file named ``autoDiscoveryTokenizerFileName`` (default
``tokenizer.json``, env ``LOCAL_TOKENIZER_FILENAME``) under ``autoDiscoveryDir`` (default
``/mnt/models``, env ``LOCAL_TOKENIZER_DIR``) is filed under a model name: the ``models--org--name``
component of a HuggingFace cache path (``org/name``), else the file's directory relative to
``autoDiscoveryDir`` (``.`` for the directory itself). The walk visits at most 100,000 entries.

What is tokenised, as the server in the loop does:

* completions: a string prompt with the special tokens the tokenizer's post-processor adds (vLLM's
  ``add_special_tokens=True`` for completions; ``epp-sim --tokenizer DIR`` does the same); a list of
  strings: each so, concatenated; a prompt given as token ids: taken as is;
* chat completions: the messages rendered with the directory's chat template when it has one
  (``chat_template.jinja`` or ``tokenizer_config.json``'s ``chat_template``, a real model's; rendered as
  transformers renders it for vLLM, :class:`scheduler.chat_render.ChatTemplate`, which ``epp-sim
  --tokenizer DIR`` uses too), else with ``epp-sim``'s fixed template
  (:func:`scheduler.chat_render.render_chat`); tokenised without added special tokens (the template
  writes its own). Messages the template refuses (``raise_exception``) get no ids.

The prefix cache (llm-d's ``prefixStoreConfig``: ``blockSize`` characters per chunk, ``cacheSize``
chunks). The text is cut into chunks of at least ``blockSize`` characters, each ending just after an
ASCII whitespace character that is followed by a printable ASCII character; a chunk's key chains the
previous chunk's key with its text, so equal keys mean equal text from the start of the prompt. Each
chunk's ids are kept (LRU, at most ``cacheSize`` chunks and 8M ids in all: 32 MiB of ids as 4-byte
integers plus about 150 bytes of bookkeeping per chunk); a request takes the ids of its cached leading
chunks. The rest is cut at every ASCII space into words, looked up in a word memo (word -> ids, at most
262,144 words, cleared when full: about 30 MB), and only the words never seen are tokenised, in one
batched call. Exact, not approximate: the cuts are made only where the tokenizer cannot join text
across them, which holds when its pre-tokenizer splits at whitespace and drops it
(``Whitespace``, ``WhitespaceSplit``, ``BertPreTokenizer``, or a ``Sequence`` of those with
``Punctuation`` / ``Digits`` / ``UnicodeScripts``), its normalizer is character-local (none, ``NFC``,
``NFD``, ``NFKC``, ``NFKD``, ``Lowercase``, ``StripAccents``, ``BertNormalizer`` or a sequence of them), no
added token contains whitespace and the file sets no truncation, padding or BPE dropout
(:attr:`LocalTokenizer.mode` ``"words"``).

Byte-level BPE (GPT-2's, Llama 3's, Qwen2's: :attr:`LocalTokenizer.mode` ``"bytes"``) and
SentencePiece's ``Metaspace`` (Llama 2's, Mistral's converted files: ``"metaspace"``) keep a word's
leading space in its token (``" world"``, ``"▁world"``), so their chunks end just after an ASCII letter
that is followed by a space and an ASCII letter, the space going to the next chunk. No token can span
such a cut when no vocabulary token holds a letter followed by the model's space (``Ġ`` for byte-level,
the ``Metaspace`` replacement): a token spanning it would hold the letter before the cut and the space
after it; checked on the whole vocabulary at load. BPE merges and a Unigram segmentation then work on
each side alone, exactly as on the whole text. Also required: a ``ByteLevel`` pre-tokenizer (its own
regex, with or without ``add_prefix_space``: a chunk after the first starts with its space, so none is
added), or a ``Sequence`` of isolated, non-inverted ``Split`` / ``Digits`` ending in ``ByteLevel``; or a
``Metaspace`` alone (split or not; a chunk after the first starts with its space, so no replacement is
prepended); no normalizer but ``NFC`` (Llama 2's older files prepend "▁" in their normalizer: refused);
no added token that holds whitespace or strips the whitespace around it; and, on the real file at load,
every cut the rule allows in a probe text (prose, code, numbers, punctuation, other scripts, whitespace
runs, contractions) must give the whole text's ids. There is no word memo (a word's ids depend on the
space before it): the chunks after the cached ones are tokenised in batches of 64 in one call each. Any
other tokenizer is used whole on every prompt (:attr:`LocalTokenizer.chunked` False,
:attr:`LocalTokenizer.unchunked_reason` says why; the EPP logs it at start-up): exact, at the full cost.
llm-d's ``minPrefixOverlapRatio`` (accept cached tokens covering that share of the prompt, an
approximation) has no use here and is only validated.

Thread safety and the GIL: the tokenizer is immutable; the cache is guarded by a lock held only for
lookups and insertions, never while tokenising, so ``workersCount`` threads can tokenise at once. Every
call into the library is ``encode_batch``, which releases the GIL while it works (``encode`` does not:
measured, a thread in ``encode`` stalls the serving loop for the whole call), so a long prompt
tokenised in the EPP's thread pool leaves the event loop running.
"""

from __future__ import annotations

import json
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain, pairwise
from pathlib import Path
from typing import Any

from scheduler.chat_render import (
    DEFAULT_ARGS,
    ChatArgs,
    ChatTemplateError,
    chat_args,
    load_chat_template,
    render_chat,
)
from scheduler.plugins.precise.chunking import BOUNDARY as _BOUNDARY
from scheduler.plugins.precise.chunking import BYTE_BOUNDARY as _BYTE_BOUNDARY
from scheduler.plugins.precise.chunking import PROBE as _PROBE
from scheduler.plugins.precise.chunking import chunk_mode

__all__ = [
    "DEFAULT_CACHE_ENTRIES",
    "DEFAULT_CHUNK_CHARS",
    "LocalTokenizer",
    "LocalTokenizerError",
    "LocalTokenizerSettings",
    "discover_tokenizers",
]

DEFAULT_DIR = "/mnt/models"
DEFAULT_FILE = "tokenizer.json"
DEFAULT_WORKERS = 5
DEFAULT_CHUNK_CHARS = 256
DEFAULT_CACHE_ENTRIES = 65536
MAX_CACHED_IDS = 8 << 20
MAX_WORDS = 1 << 18
_WALK_LIMIT = 100_000
_U32 = next(code for code in "ILH" if array(code).itemsize == 4)


class LocalTokenizerError(ValueError):
    """The tokenizer could not be found or loaded (the message says which file or model and why)."""


@dataclass(frozen=True, slots=True)
class LocalTokenizerSettings:
    """``tokenizersPoolConfig`` (local backend) and ``prefixStoreConfig``, resolved."""

    model_name: str
    workers: int = DEFAULT_WORKERS
    discovery_dir: str = DEFAULT_DIR
    file_name: str = DEFAULT_FILE
    model_map: Mapping[str, str] = field(default_factory=dict)
    min_overlap: float = 0.8
    chunk_chars: int = DEFAULT_CHUNK_CHARS
    cache_entries: int = DEFAULT_CACHE_ENTRIES

    def as_yaml(self) -> dict[str, Any]:
        return {
            "modelName": self.model_name,
            "workersCount": self.workers,
            "minPrefixOverlapRatio": self.min_overlap,
            "local": {
                "autoDiscoveryDir": self.discovery_dir,
                "autoDiscoveryTokenizerFileName": self.file_name,
                "modelTokenizerMap": dict(self.model_map),
            },
        }


def _hf_cache_name(component: str) -> str | None:
    if not component.startswith("models--"):
        return None
    return "/".join(component[len("models--") :].split("--")) or None


def discover_tokenizers(directory: str, file_name: str) -> dict[str, str]:
    """Model name -> tokenizer file under ``directory`` (llm-d's auto-discovery; see the module doc)."""
    found: dict[str, str] = {}
    if not directory or not file_name or not os.path.isdir(directory):
        return found
    seen = 0
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        seen += len(dirs) + len(files)
        if file_name in files:
            path = os.path.join(root, file_name)
            rel = os.path.relpath(root, directory)
            parts = [] if rel == "." else rel.split(os.sep)
            name = next((n for n in map(_hf_cache_name, parts) if n), None) or rel.replace(os.sep, "/")
            found.setdefault(name, path)
        if seen >= _WALK_LIMIT:
            break
    return found


def _resolve(settings: LocalTokenizerSettings) -> Path:
    mapped = settings.model_map.get(settings.model_name)
    if mapped:
        path = Path(mapped)
        return path / settings.file_name if path.is_dir() else path
    found = discover_tokenizers(settings.discovery_dir, settings.file_name)
    if settings.model_name in found:
        return Path(found[settings.model_name])
    listed = ", ".join(sorted(found)[:10]) or "none"
    raise LocalTokenizerError(
        f"no {settings.file_name} for model {settings.model_name!r}: not in modelTokenizerMap, and "
        f"auto-discovery under {settings.discovery_dir!r} found models: {listed}"
    )


class _ChunkCache:
    """LRU of chunk key -> ids (at most ``entries`` chunks and ``max_ids`` ids); callers hold the lock."""

    def __init__(self, entries: int, max_ids: int) -> None:
        self.entries = entries
        self.max_ids = max_ids
        self.ids = 0
        self._map: OrderedDict[int, array[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._map)

    def get(self, key: int) -> array[int] | None:
        found = self._map.get(key)
        if found is not None:
            self._map.move_to_end(key)
        return found

    def put(self, key: int, ids: array[int]) -> None:
        old = self._map.pop(key, None)
        if old is not None:
            self.ids -= len(old)
        self._map[key] = ids
        self.ids += len(ids)
        while self._map and (len(self._map) > self.entries or self.ids > self.max_ids):
            _, dropped = self._map.popitem(last=False)
            self.ids -= len(dropped)


class LocalTokenizer:
    """A ``tokenizer.json`` and its prefix cache (see the module docstring)."""

    def __init__(self, settings: LocalTokenizerSettings, path: Path | None = None) -> None:
        self.settings = settings
        self.path = path or _resolve(settings)
        try:
            import tokenizers
        except ImportError as exc:
            raise LocalTokenizerError(
                "the 'tokenizers' package is not installed (pip install 'pyepp[tokenizer]'; the container "
                "image: build it with --build-arg EPP_EXTRAS=tokenizer)"
            ) from exc
        try:
            text = self.path.read_text(encoding="utf-8")
            spec = json.loads(text)
            self._tok = tokenizers.Tokenizer.from_str(text)
        except Exception as exc:  # the library raises plain Exception on a malformed file
            raise LocalTokenizerError(f"cannot load {self.path}: {exc}") from exc
        try:
            self.template = load_chat_template(self.path.parent)
        except ChatTemplateError as exc:
            raise LocalTokenizerError(f"{self.path.parent}: {exc}") from None
        mode, why = chunk_mode(spec) if isinstance(spec, Mapping) else ("", "not a JSON object")
        if mode in ("bytes", "metaspace"):
            why = self._probe_cuts()
            mode = "" if why else mode
        self.mode = mode  # "words", "bytes", "metaspace" or "" (not chunked)
        self.unchunked_reason = why
        self.chunked = bool(mode)
        self._boundary = _BOUNDARY if mode == "words" else _BYTE_BOUNDARY
        self._special = self._special_tokens()
        self._lock = threading.Lock()
        self._cache = _ChunkCache(settings.cache_entries, MAX_CACHED_IDS)
        self._words: dict[str, tuple[int, ...]] = {}  # word -> ids (at most MAX_WORDS; cleared when full)
        self._single: dict[str, int] = {}  # word -> its id, for the words of one id (a subset of _words)
        self.cached_tokens = 0  # ids taken from the cache (statistics; updated under the lock)
        self.encoded_tokens = 0  # ids computed by the tokenizer

    def _probe_cuts(self) -> str:
        """Why cutting before " word" changes this tokenizer's ids ("" when, on a probe text of
        prose, code, numbers, punctuation, other scripts and whitespace runs, it changes none): every cut
        the rule allows is made at once, and the pieces' ids must be the whole text's."""
        cuts = [m.end() for m in _BYTE_BOUNDARY.finditer(_PROBE)]
        pieces = [_PROBE[a:b] for a, b in pairwise([0, *cuts, len(_PROBE)])]
        whole = self._tok.encode_batch([_PROBE], add_special_tokens=False)[0].ids
        parts = [t for enc in self._tok.encode_batch(pieces, add_special_tokens=False) for t in enc.ids]
        if parts != whole:
            return "cutting before ' word' changes the ids of a probe text (its pre-tokenizer joins across)"
        return ""

    def _special_tokens(self) -> tuple[list[int], list[int]] | None:
        """The ids the post-processor puts before and after a prompt (None: not a plain wrap)."""
        found: tuple[list[int], list[int]] | None = None
        for probe in ("a", "a b c"):
            plain = self._tok.encode(probe, add_special_tokens=False).ids
            full = self._tok.encode(probe, add_special_tokens=True).ids
            k = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), -1)
            if k < 0 or not plain:
                return None
            wrap = (full[:k], full[k + len(plain) :])
            if found is not None and wrap != found:
                return None
            found = wrap
        return found

    @property
    def cache_entries(self) -> int:
        return len(self._cache)

    # -- tokenising ------------------------------------------------------------------------------------

    def encode(self, text: str, special: bool, limit: int = 0) -> list[int]:
        """``text``'s ids (with the post-processor's special tokens when ``special``); with ``limit`` > 0
        tokenisation may stop once that many ids are known (the rest of the prompt is not needed)."""
        if not self.chunked or (special and self._special is None):
            ids = self._tok.encode_batch([text], add_special_tokens=special)[0].ids
            with self._lock:
                self.encoded_tokens += len(ids)
            return list(ids)
        head, tail = self._special if special and self._special is not None else ([], [])
        out = array(_U32, head)
        complete = self._chunks(text, out, limit)
        if complete:
            out.extend(tail)
        return out.tolist()

    def _chunks(self, text: str, out: array[int], limit: int) -> bool:
        """Appends ``text``'s ids to ``out`` chunk by chunk; False when stopped early at ``limit``."""
        size = self.settings.chunk_chars
        boundary = self._boundary
        n = len(text)
        pos, key, cached = 0, 0, 0
        cache = self._cache
        pending: list[tuple[int, str]] = []  # (start, text) of the chunks tokenised together
        with self._lock:
            while pos < n:
                m = boundary.search(text, pos + size) if pos + size < n else None
                end = m.end() if m is not None else n
                piece = text[pos:end]
                chunk_key = hash((key, piece))
                found = cache.get(chunk_key)
                if found is None:
                    break
                out.extend(found)
                cached += len(found)
                key, pos = chunk_key, end
                if limit and len(out) >= limit:
                    self.cached_tokens += cached
                    return False
            self.cached_tokens += cached
        while pos < n:  # the rest, in batches of chunks, until the end or the limit
            pending.clear()
            chars = 0
            while pos < n and (len(pending) < 64 or not limit):
                m = boundary.search(text, pos + size) if pos + size < n else None
                end = m.end() if m is not None else n
                pending.append((pos, text[pos:end]))
                chars += end - pos
                pos = end
            fresh: list[tuple[int, array[int]]] = []
            pieces = [p for _, p in pending]
            computed = self._words_ids(pieces) if self.mode == "words" else self._pieces_ids(pieces)
            for (_, piece), ids in zip(pending, computed, strict=True):
                key = hash((key, piece))
                fresh.append((key, ids))
                out.extend(ids)
            with self._lock:
                for chunk_key, ids in fresh:
                    cache.put(chunk_key, ids)
            if limit and len(out) >= limit and pos < n:
                return False
        return True

    def _pieces_ids(self, chunks: list[str]) -> list[array[int]]:
        """Each chunk's ids, the chunks tokenised in one ``encode_batch`` call (byte-level and Metaspace
        tokenizers: a word's ids depend on the space before it, so there is no word memo)."""
        encodings = self._tok.encode_batch(chunks, add_special_tokens=False)
        out = [array(_U32, enc.ids) for enc in encodings]
        with self._lock:
            self.encoded_tokens += sum(map(len, out))
        return out

    def _words_ids(self, chunks: list[str]) -> list[array[int]]:
        """Each chunk's ids, from the word memo: a chunk is cut at every ASCII space into words, each
        tokenised alone, which gives the chunk's ids exactly (the tokenizers chunked here drop whitespace
        and never join text across it; see the module docstring). A chunk whose words all have one id each
        is one C-level pass over the single-id memo; the others go through the full memo, after the words
        not memoised yet are tokenised in one ``encode_batch`` call."""
        single = self._single.__getitem__
        split = [c.split(" ") for c in chunks]  # "" (around a space): no ids, filtered out
        out: list[array[int] | None] = []
        retry: list[int] = []
        for i, words in enumerate(split):
            try:
                out.append(array(_U32, map(single, filter(None, words))))
            except KeyError:  # a word of several ids (or none), or not memoised yet
                out.append(None)
                retry.append(i)
        if not retry:
            return out  # type: ignore[return-value]
        memo = self._words
        missing = [w for w in set(chain.from_iterable(split[i] for i in retry)) if w and w not in memo]
        if missing:
            encodings = self._tok.encode_batch(missing, add_special_tokens=False)
            with self._lock:
                if len(memo) + len(missing) > MAX_WORDS:
                    memo.clear()
                    self._single.clear()
                for word, enc in zip(missing, encodings, strict=True):
                    ids = tuple(enc.ids)
                    memo[word] = ids
                    if len(ids) == 1:
                        self._single[word] = ids[0]
                    self.encoded_tokens += len(ids)
        get = memo.__getitem__
        for i in retry:
            words = split[i]
            try:
                out[i] = array(_U32, chain.from_iterable(map(get, filter(None, words))))
            except KeyError:  # another thread cleared the memo meanwhile
                out[i] = array(_U32, chain.from_iterable(map(self._word, filter(None, words))))
        return out  # type: ignore[return-value]

    def _word(self, word: str) -> tuple[int, ...]:
        found = self._words.get(word)
        if found is None:
            found = tuple(self._tok.encode_batch([word], add_special_tokens=False)[0].ids)
        return found

    def completion_ids(self, prompt: Any, limit: int = 0) -> list[int] | None:
        """A completions ``prompt``'s ids (string, list of strings, token ids); None: not a prompt."""
        if isinstance(prompt, str):
            return self.encode(prompt, True, limit) or None
        if not isinstance(prompt, list) or not prompt:
            return None
        if all(isinstance(p, str) for p in prompt):
            out: list[int] = []
            for p in prompt:
                out.extend(self.encode(p, True, limit))
                if limit and len(out) >= limit:
                    break
            return out or None
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return list(prompt)
        if all(isinstance(p, list) for p in prompt):
            flat = [t for p in prompt for t in p]
            if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in flat):
                return flat or None
        return None

    def chat_ids(self, messages: Any, limit: int = 0, args: ChatArgs = DEFAULT_ARGS) -> list[int] | None:
        """Chat messages' ids (None: not a message list, or the template refused them); ``args``: the
        request's tools and template variables (:func:`scheduler.chat_render.chat_args`)."""
        if not isinstance(messages, list) or not messages:
            return None
        if not all(isinstance(m, Mapping) for m in messages):
            return None
        if self.template is None:
            return self.encode(render_chat(messages), False, limit) or None
        try:
            text = self.template.render(messages, args)
        except ChatTemplateError:
            return None
        return self.encode(text, False, limit) or None

    def body_ids(self, chat: bool, payload: Mapping[str, Any], limit: int = 0) -> list[int] | None:
        """The ids of a parsed ``/v1/(chat/)completions`` body (None: nothing to tokenise)."""
        if chat:
            try:
                args = chat_args(payload)
            except ChatTemplateError:
                return None  # the server answers it 400: nothing to route on
            return self.chat_ids(payload.get("messages"), limit, args)
        return self.completion_ids(payload.get("prompt"), limit)
