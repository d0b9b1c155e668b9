"""Where a prompt may be cut into chunks that a tokenizer tokenises exactly as the whole (the in-process
tokenizer's prefix cache, :mod:`scheduler.plugins.precise.local_tokenizer`; the rules are in its module
docstring): :func:`chunk_mode` reads a ``tokenizer.json`` and says which cut applies (``words``: just after
ASCII whitespace, :data:`BOUNDARY`; ``bytes`` and ``metaspace``: after a letter, before " word",
:data:`BYTE_BOUNDARY`) or why none does. :data:`PROBE` is the text the tokenizer checks the leading-space
cuts on at load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["BOUNDARY", "BYTE_BOUNDARY", "PROBE", "chunk_mode", "chunk_safety"]

BOUNDARY = re.compile(r"[ \t\n\r\f\v](?=[!-~])")  # ASCII whitespace: whitespace in every definition
BYTE_BOUNDARY = re.compile(r"[A-Za-z](?= [A-Za-z])")  # a cut between a letter and " word"
_SPLIT_AT_SPACE = {"Whitespace", "WhitespaceSplit", "BertPreTokenizer"}
_LOCAL_PRE = _SPLIT_AT_SPACE | {"Punctuation", "Digits", "UnicodeScripts"}
_LOCAL_NORM = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "BertNormalizer"}
# what the probe of a byte-level tokenizer's cuts is made of (every cut of the rule is tried on it)
PROBE = (
    "Hello world, it's a test of the tokenizer. They'll say: \"we've done it\" and I'm sure you'd agree.\n"
    "Numbers 12345 and 3.14159 or 1,000,000 cost $20 today; emails like a.b@example.com and URLs "
    "https://example.com/path?q=one two. Accents: café naïve résumé Zürich, and 日本語 text, emoji 🙂 ok.\n\n"
    "Double  spaces,   triple spaces, tabs\tand\ttabs, trailing space \nnew line\r\nwindows line.\n"
    "def main(argv): return [x * 2 for x in argv if x] # code with_under_scores and CamelCase words\n"
    "<|special|> tokens <s> and </s> [INST] brackets [/INST] <think> reasoning </think> done A B C d e f"
)


def _byte_level_pre(node: Any) -> str:
    """Why ``node`` is not a byte-level pre-tokenizer that a cut before " word" (after a letter) keeps
    ("" when it is): ``ByteLevel`` with its own regex, or a ``Sequence`` of ``Split`` (isolated, not
    inverted) / ``Digits`` ending in ``ByteLevel``; the probe then checks the cuts on the real file."""
    if not isinstance(node, Mapping):
        return "no pre-tokenizer"
    items = node.get("pretokenizers") if node.get("type") == "Sequence" else [node]
    if not isinstance(items, list) or not items or not all(isinstance(i, Mapping) for i in items):
        return "an unreadable pre-tokenizer"
    *head, last = items
    if last.get("type") != "ByteLevel":
        return "the last pre-tokenizer is not ByteLevel"
    if not head and not last.get("use_regex", True):
        return "ByteLevel without a split"
    for item in head:
        kind = item.get("type")
        if kind == "Split" and item.get("behavior") == "Isolated" and not item.get("invert"):
            continue
        if kind == "Digits":
            continue
        return f"pre-tokenizer {kind} {item.get('behavior') or ''}".strip() + " before ByteLevel"
    return ""


def _types(node: Any, key: str) -> list[str] | None:
    """The component types of a tokenizer.json normalizer / pre-tokenizer (a Sequence flattened)."""
    if node is None:
        return []
    if not isinstance(node, Mapping):
        return None
    kind = node.get("type")
    if kind == "Sequence":
        out: list[str] = []
        for item in node.get(key) or ():
            sub = _types(item, key)
            if sub is None:
                return None
            out.extend(sub)
        return out
    return [str(kind)]


def _joins_words(spec: Mapping[str, Any], space: str) -> str:
    """A vocabulary token holding an ASCII letter followed by ``space`` (the model's form of a space):
    only such a token could span a cut made after a letter, before " word" ("" when there is none)."""
    model = spec.get("model")
    vocab = model.get("vocab") if isinstance(model, Mapping) else None
    if isinstance(vocab, Mapping):
        tokens: list[Any] = list(vocab)
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs
        tokens = [v[0] for v in vocab if isinstance(v, list) and v]
    else:
        return "an unreadable vocabulary"
    joined = re.compile("[A-Za-z]" + re.escape(space))
    found = next((t for t in tokens if isinstance(t, str) and joined.search(t)), None)
    return f"vocabulary token {found!r} joins a word to the next" if found is not None else ""


def chunk_mode(spec: Mapping[str, Any]) -> tuple[str, str]:
    """How a prompt may be cut for this tokenizer: ``("words", "")`` (at whitespace, which it drops),
    ``("bytes", "")`` (byte-level) or ``("metaspace", "")`` (SentencePiece's ``Metaspace``): before a
    space between letters; or ``("", why not)``."""
    if spec.get("truncation") or spec.get("padding"):
        return "", "the file sets truncation or padding"
    model = spec.get("model")
    if isinstance(model, Mapping) and model.get("dropout"):
        return "", "BPE dropout is set"
    for token in spec.get("added_tokens") or ():
        content = token.get("content", "") if isinstance(token, Mapping) else ""
        if any(c.isspace() for c in content):
            return "", f"added token {content!r} contains whitespace"
    norms = _types(spec.get("normalizer"), "normalizers")
    pres = _types(spec.get("pre_tokenizer"), "pretokenizers")
    if pres and ("ByteLevel" in pres or "Metaspace" in pres):
        if norms is None or any(n != "NFC" for n in norms):
            return "", f"normalizer {norms} before a {pres[-1]} pre-tokenizer"
        for token in spec.get("added_tokens") or ():
            if isinstance(token, Mapping) and (token.get("lstrip") or token.get("rstrip")):
                return "", f"added token {token.get('content')!r} strips the whitespace around it"
        pre = spec.get("pre_tokenizer")
        if "Metaspace" in pres:
            if pres != ["Metaspace"] or not isinstance(pre, Mapping):
                return "", f"pre-tokenizer {pres}: Metaspace is cached alone only"
            space = pre.get("replacement", "\u2581")
            if not isinstance(space, str) or len(space) != 1:
                return "", "a Metaspace replacement that is not one character"
            why = _joins_words(spec, space)
            return ("", why) if why else ("metaspace", "")
        why = _byte_level_pre(pre) or _joins_words(spec, "\u0120")  # "Ġ", the byte-level space
        return ("", why) if why else ("bytes", "")
    if norms is None or any(n not in _LOCAL_NORM for n in norms):
        return "", f"normalizer {norms} is not character-local"
    if not pres or any(p not in _LOCAL_PRE for p in pres) or not _SPLIT_AT_SPACE.intersection(pres):
        return "", f"pre-tokenizer {pres or 'none'} does not split at whitespace"
    return "words", ""


def chunk_safety(spec: Mapping[str, Any]) -> str:
    """Why this tokenizer's prompts cannot be cut into cached chunks ("" when they can)."""
    return chunk_mode(spec)[1]
