"""Kubernetes label selectors (``metav1.LabelSelector``) with Kubernetes' validation and semantics.

A selector is ``matchLabels`` (key -> value, each an ``In`` with one value) plus ``matchExpressions``
(``{key, operator, values}``), all ANDed. Operators and their rules, as Kubernetes enforces them:

=================  =======================  ===========================================
operator           ``values``               matches labels when
=================  =======================  ===========================================
``In``             required, non-empty      the key is present and its value is listed
``NotIn``          required, non-empty      the key is absent or its value is not listed
``Exists``         must be empty / absent   the key is present
``DoesNotExist``   must be empty / absent   the key is absent
=================  =======================  ===========================================

Keys must be qualified names (``[prefix/]name``: name 1-63 characters of alphanumerics, ``-``, ``_``,
``.``, starting and ending alphanumeric; prefix a DNS-1123 subdomain of at most 253 characters);
values must be valid label values (at most 63 such characters, may be empty). The empty selector
matches everything. :func:`parse_selector` raises ValueError with a Kubernetes-style message.

:func:`parse_selector_text` reads the same selector written as text (``labels.Parse``, as in
``kubectl -l``): comma-separated ``key=value`` / ``key==value`` (In), ``key!=value`` (NotIn),
``key in (a,b)``, ``key notin (a,b)``, ``key`` (Exists) and ``!key`` (DoesNotExist); the numeric
``key>n`` / ``key<n`` are not supported (ValueError). The empty text matches everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OPERATORS",
    "LabelSelector",
    "Requirement",
    "check_key",
    "check_value",
    "parse_selector",
    "parse_selector_text",
]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op == "NotIn":
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op == "Exists":
            return self.key in labels
        return self.key not in labels

    def __str__(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        op = "in" if self.operator == "In" else "notin"
        return f"{self.key} {op} ({','.join(sorted(self.values))})"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def first_unmet(self, labels: Mapping[str, str]) -> Requirement | None:
        return next((r for r in self.requirements if not r.matches(labels)), None)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def check_key(key: Any, where: str) -> str:
    """``key`` if it is a valid qualified label key; ValueError naming ``where`` otherwise."""
    if not isinstance(key, str):
        raise ValueError(f"{where}: key must be a string")
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        raise ValueError(f"{where}: {key!r}: prefix part must be non-empty")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"{where}: {key!r}: prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _NAME.match(name):
        raise ValueError(
            f"{where}: {key!r}: name part must be 1-63 alphanumeric characters, '-', '_' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return key


def check_value(value: Any, where: str) -> str:
    """``value`` if it is a valid label value; ValueError naming ``where`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: value must be a string, got {value!r}")
    if len(value) > 63 or not _VALUE.match(value):
        raise ValueError(
            f"{where}: {value!r}: a valid label value must be 63 characters or less, alphanumeric, "
            "'-', '_' or '.', starting and ending with an alphanumeric character"
        )
    return value


def _parse_expression(raw: Any, where: str) -> Requirement:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping with key, operator and values")
    unknown = set(raw) - {"key", "operator", "values"}
    if unknown:
        raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r} (allowed: key, operator, values)")
    key = check_key(raw.get("key"), f"{where}.key")
    operator = raw.get("operator")
    if operator not in OPERATORS:
        raise ValueError(
            f"{where}.operator: {operator!r} is not a valid label selector operator ({', '.join(OPERATORS)})"
        )
    values = raw.get("values")
    if values is None:
        values = []
    if not isinstance(values, list):
        raise ValueError(f"{where}.values: expected a list of strings")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"{where}.values: must be specified when `operator` is 'In' or 'NotIn'")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(
            f"{where}.values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        )
    checked = frozenset(check_value(v, f"{where}.values[{i}]") for i, v in enumerate(values))
    return Requirement(key, operator, checked)


def parse_selector(match_labels: Any = None, match_expressions: Any = None) -> LabelSelector:
    """Validate and compile a selector; None or empty parts select everything."""
    requirements: list[Requirement] = []
    if match_labels is not None:
        if not isinstance(match_labels, Mapping):
            raise ValueError("matchLabels: expected a mapping of label keys to values")
        for key, value in match_labels.items():
            check_key(key, f"matchLabels.{key}")
            requirements.append(Requirement(key, "In", frozenset({check_value(value, f"matchLabels.{key}")})))
    if match_expressions is not None:
        if not isinstance(match_expressions, list):
            raise ValueError("matchExpressions: expected a list of {key, operator, values}")
        requirements.extend(
            _parse_expression(raw, f"matchExpressions[{i}]") for i, raw in enumerate(match_expressions)
        )
    return LabelSelector(tuple(requirements))


_TEXT_TERM = re.compile(
    r"\s*(?:!\s*(?P<nkey>[^\s!=<>,()]+)"
    r"|(?P<key>[^\s!=<>,()]+)(?:\s*(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^()]*)\))?)\s*"
)


def parse_selector_text(text: str) -> LabelSelector:
    """Compile a selector written as text (see the module docstring); ValueError naming the bad term."""
    requirements: list[Requirement] = []
    pos = 0
    while text.strip() and pos <= len(text):
        m = _TEXT_TERM.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"invalid label selector {text!r} at position {pos}")
        if m["nkey"]:
            requirements.append(Requirement(check_key(m["nkey"], text), "DoesNotExist", frozenset()))
        elif m["op"]:
            key, op = check_key(m["key"], text), m["op"]
            if op in "<>":
                raise ValueError(f"{text!r}: the numeric operators < and > are not supported")
            value = frozenset({check_value(m["value"], text)})
            requirements.append(Requirement(key, "NotIn" if op == "!=" else "In", value))
        elif m["setop"]:
            values = [check_value(v.strip(), text) for v in m["set"].split(",")]
            if not all(values):
                raise ValueError(f"{text!r}: {m['key']} {m['setop']} (...) has an empty value")
            operator = "In" if m["setop"] == "in" else "NotIn"
            requirements.append(Requirement(check_key(m["key"], text), operator, frozenset(values)))
        else:
            requirements.append(Requirement(check_key(m["key"], text), "Exists", frozenset()))
        pos = m.end()
        if pos == len(text):
            break
        if text[pos] != ",":
            raise ValueError(f"invalid label selector {text!r} at position {pos}")
        pos += 1
    return LabelSelector(tuple(requirements))
