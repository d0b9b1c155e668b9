"""A small, fast parser of the Prometheus text exposition format (version 0.0.4).

:func:`parse_exposition` returns ``{sample_name: [(labels, value), ...]}``. With ``wanted`` given,
only lines that start with a wanted name are located (``str.find`` of ``"\\n" + name``) and tokenized;
the other lines are never looked at, so they are not validated either. This
is what makes a 50 ms scrape of a few hundred model servers affordable: a vLLM ``/metrics`` body has
hundreds of histogram lines, of which the picker needs five.

Grammar handled (the same as ``prometheus_client.parser`` for the text format):

* lines are separated by ``\\n``; empty lines and lines starting with ``#`` (HELP, TYPE, comments) are
  skipped;
* ``name [{label="value", ...}] value [timestamp]``, tokens separated by spaces or tabs (only: other
  whitespace such as ``\r`` inside a value makes it invalid, e.g. ``8.\r0``; at a token's ends it is
  ignored, so CRLF line ends work); a trailing comma inside the braces is allowed;
* label values may contain ``\\\\``, ``\\"`` and ``\\n`` escapes (any other escaped character is kept
  with its backslash, as Prometheus does);
* values are Go-style floats, including ``NaN``, ``+Inf``, ``-Inf``; histogram and summary samples
  (``_bucket``, ``_sum``, ``_count``, ``quantile``) are plain samples here.

Anything else raises :class:`ExpositionError` naming the line. No regular expressions: the tokenizer
scans with ``str.find`` and checks characters explicitly.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["ExpositionError", "LazySamples", "Samples", "parse_exposition"]

Series = list[tuple[dict[str, str], float]]
Samples = Mapping[str, Series]

_FLOAT_WORDS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "inf": float("inf")}
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(ValueError):
    """The body is not valid Prometheus text; ``line`` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        self.reason = message
        self.line = line
        super().__init__(f"line {line}: {message}")


def _valid_metric_name(name: str) -> bool:
    """``[a-zA-Z_:][a-zA-Z0-9_:]*`` (checked with C-level string methods)."""
    return name.isascii() and name.replace(":", "_").isidentifier()


def _valid_label_name(name: str) -> bool:
    """``[a-zA-Z_][a-zA-Z0-9_]*``."""
    return name.isascii() and name.isidentifier()


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
        while i < n and (line[i] == " " or line[i] == "\t"):
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        eq = line.find("=", i)
        if eq < 0:
            raise ExpositionError("expected label=value", lineno)
        name = line[i:eq]
        if name[-1:] in (" ", "\t"):
            name = name.rstrip(" \t")
        if not _valid_label_name(name):
            raise ExpositionError(f"invalid label name {name!r}", lineno)
        i = eq + 1
        while i < n and (line[i] == " " or line[i] == "\t"):
            i += 1
        if i >= n or line[i] != '"':
            raise ExpositionError(f"label {name!r}: expected a quoted value", lineno)
        end = line.find('"', i + 1)
        if end < 0:
            raise ExpositionError("unterminated label value", lineno)
        if line[end - 1] == "\\":
            end = _closing_quote(line, i + 1, lineno)
        raw = line[i + 1 : end]
        if name in labels:
            raise ExpositionError(f"duplicate label {name!r}", lineno)
        labels[name] = _unescape(raw, lineno) if "\\" in raw else raw
        i = end + 1
        c = line[i] if i < n else ""
        if c == ",":
            i += 1
            continue
        if c == "}":
            return labels, i + 1
        while i < n and (line[i] == " " or line[i] == "\t"):
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
    rest = line[end:]
    tokens = rest.split()
    if not rest.isprintable():  # only spaces and tabs separate: "8.\r0" is one (invalid) token
        tokens = [t.strip() for t in rest.replace("\t", " ").split(" ") if t.strip()]
    if not tokens or len(tokens) > 2:
        raise ExpositionError(f"{line[:end]}: expected 'value [timestamp]'", lineno)
    value = _parse_float(tokens[0], lineno)
    if len(tokens) == 2:
        _parse_float(tokens[1], lineno)
    return labels, value


def _parse_all(text: str) -> dict[str, Series]:
    out: dict[str, Series] = {}
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
        if not _valid_metric_name(name):
            raise ExpositionError(f"invalid metric name {name!r}", lineno)
        out.setdefault(name, []).append(_parse_sample(line, end, lineno))
    return out


def _parse_wanted(text: str, wanted: Iterable[str]) -> dict[str, Series]:
    """Find the lines starting with each wanted name (``str.find``) and tokenize only those."""
    out: dict[str, Series] = {}
    size = len(text)
    for name in wanted:
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


def parse_exposition(text: str, wanted: Collection[str] | None = None) -> dict[str, Series]:
    """Parse exposition ``text``; with ``wanted``, only samples of those names (others unchecked)."""
    return _parse_all(text) if wanted is None else _parse_wanted(text, wanted)


def _first_group(text: str, name: str) -> Series:
    """The samples of ``name`` in the first group of consecutive lines that start with it."""
    needle = "\n" + name
    size = len(text)
    if text.startswith(name) and size > len(name) and text[len(name)] in "{ \t":
        start = 0
    else:
        start = -1
        pos = 0
        while (hit := text.find(needle, pos)) >= 0:
            after = hit + 1 + len(name)
            if after < size and text[after] in "{ \t":
                start = hit + 1
                break
            pos = after
        if start < 0:
            return []
    series: Series = []
    while True:
        stop = text.find("\n", start)
        line = text[start:] if stop < 0 else text[start:stop]
        try:
            series.append(_parse_sample(line, len(name), 0))
        except ExpositionError as exc:
            raise ExpositionError(exc.reason, text.count("\n", 0, start) + 1) from None
        if stop < 0:
            return series
        start = stop + 1
        after = start + len(name)
        if not (text.startswith(name, start) and after < size and text[after] in "{ \t"):
            return series


class LazySamples(Mapping[str, Series]):
    """Samples parsed on demand: ``get(name)`` tokenizes only the lines of ``name``.

    A lookup finds the first line starting with ``name`` (``str.find``) and reads the consecutive
    lines of that name: the exposition format requires all lines of a metric family to form one
    group. Names never looked up are never parsed (nor validated); iteration parses everything.
    Results are cached. Raises :class:`ExpositionError` on a malformed line of a looked-up name.
    """

    __slots__ = ("_cache", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._cache: dict[str, Series] = {}

    def get(self, name: str, default: Any = None) -> Any:
        series = self._cache.get(name)
        if series is None:
            series = _first_group(self._text, name)
            self._cache[name] = series
        return series if series else default

    def __getitem__(self, name: str) -> Series:
        series = self.get(name)
        if series is None:
            raise KeyError(name)
        return series  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return iter(_parse_all(self._text))

    def __len__(self) -> int:
        return len(_parse_all(self._text))
