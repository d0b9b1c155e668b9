"""Kubernetes label selector syntax for ``--endpoint-selector`` (``labels.Parse`` in apimachinery).

Requirements are separated by commas (commas inside a set's parentheses belong to the set):

* equality: ``key=value``, ``key==value``, ``key!=value`` (the value may be empty);
* sets: ``key in (a,b)``, ``key notin (a,b)``;
* existence: ``key``, ``!key``;
* numeric: ``key>3``, ``key<3`` (an integer).

A key is ``[prefix/]name``: the prefix a DNS subdomain (at most 253 characters), the name and every value
at most 63 characters of ``[A-Za-z0-9]`` with ``-``, ``_``, ``.`` inside. :func:`parse_label_selector`
checks the text and returns it in the canonical form the API server's ``labelSelector`` takes (the
picker passes it through; the API server does the matching), or raises ValueError naming the bad term.
"""

from __future__ import annotations

import re

__all__ = ["parse_label_selector"]

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
_TERM = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<nkey>[^\s!=<>,()]+)"
    r"|(?P<key>[^\s!=<>,()]+)(?:\s*(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^()]*)\))?)\s*"
)


def _key(key: str, text: str) -> str:
    if not _KEY.fullmatch(key) or len(key.partition("/")[0]) > 253:
        raise ValueError(f"invalid label key {key!r} in {text!r}")
    return key


def _value(value: str, text: str) -> str:
    if not _VALUE.fullmatch(value):
        raise ValueError(f"invalid label value {value!r} in {text!r}")
    return value


def parse_label_selector(text: str) -> str:
    """Validate ``text``; returns the canonical selector (terms joined by commas, no extra spaces)."""
    terms: list[str] = []
    pos = 0
    while pos <= len(text):
        match = _TERM.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"invalid label selector {text!r} at position {pos}")
        if match["not"]:
            terms.append("!" + _key(match["nkey"], text))
        elif match["op"]:
            key, op, value = _key(match["key"], text), match["op"], match["value"]
            if op in "<>" and not re.fullmatch(r"-?\d+", value):
                raise ValueError(f"{key}{op}{value}: expected an integer in {text!r}")
            terms.append(f"{key}{op}{_value(value, text)}")
        elif match["setop"]:
            values = [_value(v.strip(), text) for v in match["set"].split(",")]
            if not all(values):
                raise ValueError(f"{match['key']} {match['setop']} (...): empty value in {text!r}")
            terms.append(f"{_key(match['key'], text)} {match['setop']} ({','.join(values)})")
        else:
            terms.append(_key(match["key"], text))
        pos = match.end()
        if pos == len(text):
            break
        if text[pos] != ",":
            raise ValueError(f"invalid label selector {text!r} at position {pos}")
        pos += 1
    return ",".join(terms)
