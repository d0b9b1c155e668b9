"""A small, fast parser of the Prometheus text exposition format (version 0.0.4).

:func:`parse_exposition` returns ``{sample_name: [(labels, value), ...]}``. With ``wanted`` given,
only lines that start with a wanted name are located (``str.find`` of ``"\\n" + name``) and tokenized;
the other lines are never looked at, so they are not validated either. This
is what makes a 50 ms scrape of a few hundred model servers affordable: a vLLM ``/metrics`` body has
hundreds of histogram lines, of which the picker needs five.

Grammar handled (the same as ``prometheus_client.parser`` for the text format):

* lines are separated by ``\\n``; empty lines and lines starting with ``#`` (HELP, TYPE, comments) are
  skipped;
* ``name [{label="value", ...}] value [timestamp]``, tokens separated by spaces or tabs; a trailing
  comma inside the braces is allowed;
* label values may contain ``\\\\``, ``\\"`` and ``\\n`` escapes (any other escaped character is kept
  with its backslash, as Prometheus does);
* values are Go-style floats, including ``NaN``, ``+Inf``, ``-Inf``; histogram and summary samples
  (``_bucket``, ``_sum``, ``_count``, ``quantile``) are plain samples here.

Anything else raises :class:`ExpositionError` naming the line. No regular expressions: the tokenizer
scans with ``str.find`` and checks characters explicitly.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = ["ExpositionError", "Samples", "parse_exposition"]

Samples = dict[str, list[tuple[dict[str, str], float]]]

_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_NAME_REST = _NAME_FIRST | frozenset("0123456789")
_LABEL_FIRST = _NAME_FIRST - {":"}
_LABEL_REST = _NAME_REST - {":"}
_FLOAT_WORDS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "inf": float("inf")}
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(ValueError):
    """The body is not valid Prometheus text; ``line`` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        self.reason = message
        self.line = line
        super().__init__(f"line {line}: {message}")


def _valid_name(name: str, first: frozenset[str], rest: frozenset[str]) -> bool:
    return bool(name) and name[0] in first and all(c in rest for c in name)


def _parse_float(token: str, lineno: int) -> float:
    word = _FLOAT_WORDS.get(token.lower())
    if word is not None:
        return word
    if "_" in token or not token.isascii():
        raise ExpositionError(f"invalid value {token!r}", lineno)
    try:
        return float(token)
    except ValueError:
        raise ExpositionError(f"invalid value {token!r}", lineno) from None


def _unescape(raw: str, lineno: int) -> str:
    out: list[str] = []
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            if i + 1 >= n:
                raise ExpositionError("dangling backslash in label value", lineno)
            nxt = raw[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _closing_quote(line: str, start: int, lineno: int) -> int:
    """Index of the quote that ends the label value starting at ``start``."""
    i = start
    while True:
        q = line.find('"', i)
        if q < 0:
            raise ExpositionError("unterminated label value", lineno)
        backslashes = 0
        k = q - 1
        while k >= start and line[k] == "\\":
            backslashes += 1
            k -= 1
        if backslashes % 2 == 0:
            return q
        i = q + 1


def _parse_labels(line: str, i: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``name="value",...}`` from ``i`` (after ``{``); return the labels and the index after ``}``."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        eq = line.find("=", i)
        if eq < 0:
            raise ExpositionError("expected label=value", lineno)
        name = line[i:eq].strip(" \t")
        if not _valid_name(name, _LABEL_FIRST, _LABEL_REST):
            raise ExpositionError(f"invalid label name {name!r}", lineno)
        i = eq + 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise ExpositionError(f"label {name!r}: expected a quoted value", lineno)
        end = _closing_quote(line, i + 1, lineno)
        raw = line[i + 1 : end]
        if name in labels:
            raise ExpositionError(f"duplicate label {name!r}", lineno)
        labels[name] = _unescape(raw, lineno) if "\\" in raw else raw
        i = end + 1
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
        elif i >= n or line[i] != "}":
            raise ExpositionError("expected ',' or '}' after a label", lineno)


def _name_end(line: str) -> int:
    end = len(line)
    for sep in ("{", " ", "\t"):
        k = line.find(sep, 0, end)
        if k >= 0:
            end = k
    return end


def _parse_sample(line: str, end: int, lineno: int) -> tuple[dict[str, str], float]:
    """Labels and value of a sample line whose (valid) name ends at ``end``."""
    labels: dict[str, str] = {}
    brace = end
    while brace < len(line) and line[brace] in " \t":
        brace += 1
    if brace < len(line) and line[brace] == "{":
        labels, end = _parse_labels(line, brace + 1, lineno)
    tokens = line[end:].split()
    if not tokens or len(tokens) > 2:
        raise ExpositionError(f"{line[:end]}: expected 'value [timestamp]'", lineno)
    value = _parse_float(tokens[0], lineno)
    if len(tokens) == 2:
        _parse_float(tokens[1], lineno)
    return labels, value


def _parse_all(text: str) -> Samples:
    out: Samples = {}
    lineno = 0
    for line in text.split("\n"):
        lineno += 1
        if not line or line[0] == "#":
            continue
        end = _name_end(line)
        if end == 0:
            if line.strip(" \t\r"):
                raise ExpositionError("expected a metric name", lineno)
            continue
        name = line[:end]
        if not _valid_name(name, _NAME_FIRST, _NAME_REST):
            raise ExpositionError(f"invalid metric name {name!r}", lineno)
        out.setdefault(name, []).append(_parse_sample(line, end, lineno))
    return out


def _parse_wanted(text: str, wanted: Iterable[str]) -> Samples:
    """Find the lines starting with each wanted name (``str.find``) and tokenize only those."""
    out: Samples = {}
    size = len(text)
    for name in wanted:
        if not _valid_name(name, _NAME_FIRST, _NAME_REST):
            raise ValueError(f"invalid wanted metric name {name!r}")
        needle = "\n" + name
        start = 0 if text.startswith(name) else -1
        if start < 0:
            hit = text.find(needle)
            start = hit + 1 if hit >= 0 else -1
        while start >= 0:
            after = start + len(name)
            if after < size and text[after] in "{ \t":
                stop = text.find("\n", after)
                line = text[start:] if stop < 0 else text[start:stop]
                try:
                    sample = _parse_sample(line, len(name), 0)
                except ExpositionError as exc:
                    raise ExpositionError(exc.reason, text.count("\n", 0, start) + 1) from None
                out.setdefault(name, []).append(sample)
            hit = text.find(needle, after)
            start = hit + 1 if hit >= 0 else -1
    return out


def parse_exposition(text: str, wanted: Collection[str] | None = None) -> Samples:
    """Parse exposition ``text``; with ``wanted``, only samples of those names (others unchecked)."""
    return _parse_all(text) if wanted is None else _parse_wanted(text, wanted)
