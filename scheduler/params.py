"""Plugin parameters: a YAML ``parameters`` mapping parsed into a frozen dataclass.

A plugin declares its parameters as a frozen, slotted dataclass whose fields are made with
:func:`param`; the YAML key defaults to the camelCase form of the field name::

    @dataclass(frozen=True, slots=True)
    class PickerParams:
        max_num_of_endpoints: int = param(1, ge=1)          # YAML key maxNumOfEndpoints

    params = parse_params(PickerParams, {"maxNumOfEndpoints": 2}, "max-score-picker", "p")

Supported field types: ``int`` (bools rejected), ``float`` (ints accepted), ``bool``, ``str``,
``tuple[str, ...]``, ``Mapping[str, str]`` (stored read-only), optional variants (``X | None``, null
accepted), and ``Any`` (passed through, usually with a ``convert`` function). A field whose ``convert``
gives a value of another shape than the YAML one (a tuple for a mapping, ...) has a ``render`` function
giving the YAML form back, so that :func:`params_to_dict` (``epp check-config``) prints parameters
that load again to the same values. Bounds (``ge``, ``gt``,
``le``, ``lt``) and ``choices`` are checked after conversion. Unknown keys, missing required keys, wrong
types and out-of-range values raise :class:`~scheduler.errors.ConfigError` whose location names the
plugin and parameter, e.g. ``(max-score-picker "p"): parameters.maxNumOfEndpoints`` with the message
``expected an integer >= 1, got "two"``. Nothing is ever defaulted silently.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from scheduler.errors import ConfigError, did_you_mean

__all__ = ["REQUIRED", "param", "params_to_dict", "parse_params", "plugin_location"]

P = TypeVar("P")
REQUIRED: Any = dataclasses.MISSING
"""Default value of a parameter that must be given."""

_META = "scheduler.param"


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    key: str | None
    ge: float | None
    gt: float | None
    le: float | None
    lt: float | None
    choices: tuple[Any, ...] | None
    convert: Callable[[Any], Any] | None
    expect: str | None
    render: Callable[[Any], Any] | None = None


def param(
    default: Any = REQUIRED,
    *,
    key: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[Any, ...] | None = None,
    convert: Callable[[Any], Any] | None = None,
    expect: str | None = None,
    render: Callable[[Any], Any] | None = None,
) -> Any:
    """A dataclass field describing one parameter.

    Mapping defaults are stored read-only, list defaults as tuples. ``convert`` (optional) turns the
    raw YAML value into the field value and raises ``ValueError`` or ``TypeError`` when it cannot;
    ``expect`` then describes what was expected for the error message. ``render`` (with ``convert``)
    turns a non-null field value back into a YAML value that ``convert`` maps to the same value.
    """
    spec = _Spec(key, ge, gt, le, lt, choices, convert, expect, render)
    if default is REQUIRED:
        return dataclasses.field(metadata={_META: spec})
    if isinstance(default, Mapping):
        frozen = MappingProxyType(dict(default))
        return dataclasses.field(default_factory=lambda: frozen, metadata={_META: spec})
    if isinstance(default, list):
        default = tuple(default)
    return dataclasses.field(default=default, metadata={_META: spec})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def plugin_location(plugin_type: str, plugin_name: str) -> str:
    """How an error location names a plugin instance: ``(type "name")``."""
    return f'({plugin_type} "{plugin_name}")'


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    key: str
    kind: Any
    optional: bool
    required: bool
    spec: _Spec


_FIELDS: dict[type[Any], tuple[_Field, ...]] = {}


def _fields(cls: type[Any]) -> tuple[_Field, ...]:
    cached = _FIELDS.get(cls)
    if cached is None:
        cached = _FIELDS[cls] = _collect_fields(cls)
    return cached


def _collect_fields(cls: type[Any]) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out: list[_Field] = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META) or _Spec(None, None, None, None, None, None, None, None)
        kind = hints[f.name]
        optional = False
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            optional = len(args) < len(typing.get_args(kind))
            kind = args[0] if len(args) == 1 else Any
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(_Field(f.name, spec.key or _camel(f.name), kind, optional, required, spec))
    return tuple(out)


def _bounds_text(spec: _Spec) -> str:
    parts = []
    for op, bound in ((">=", spec.ge), (">", spec.gt), ("<=", spec.le), ("<", spec.lt)):
        if bound is not None:
            parts.append(f"{op} {bound:g}" if isinstance(bound, float) else f"{op} {bound}")
    return " and ".join(parts)


def _expectation(f: _Field) -> str:
    if f.spec.expect:
        return f.spec.expect
    if f.spec.choices is not None:
        return "one of " + ", ".join(_show(c) for c in f.spec.choices)
    base = {
        int: "an integer",
        float: "a number",
        bool: "a boolean (true or false)",
        str: "a string",
    }.get(f.kind)
    if base is None:
        origin = typing.get_origin(f.kind)
        base = {tuple: "a list of strings", Mapping: "a mapping of strings to strings"}.get(origin, "a value")
    bounds = _bounds_text(f.spec)
    text = f"{base} {bounds}" if bounds else base
    return f"{text} or null" if f.optional else text


def _convert(f: _Field, raw: Any) -> Any:
    """Convert one raw value; raises ValueError when it does not fit the field."""
    if raw is None:
        if f.optional:
            return None
        raise ValueError
    if f.spec.convert is not None:
        value = f.spec.convert(raw)
    elif f.kind is bool:
        if not isinstance(raw, bool):
            raise ValueError
        value = raw
    elif f.kind is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError
        value = raw
    elif f.kind is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ValueError
        value = float(raw)
    elif f.kind is str:
        if not isinstance(raw, str):
            raise ValueError
        value = raw
    elif typing.get_origin(f.kind) is tuple:
        if not isinstance(raw, list | tuple) or not all(isinstance(v, str) for v in raw):
            raise ValueError
        value = tuple(raw)
    elif typing.get_origin(f.kind) is Mapping:
        if not isinstance(raw, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
        ):
            raise ValueError
        value = MappingProxyType(dict(raw))
    else:
        value = raw
    spec = f.spec
    if spec.choices is not None and value not in spec.choices:
        raise ValueError
    if isinstance(value, int | float) and not isinstance(value, bool) and _out_of_range(spec, value):
        raise ValueError
    return value


def _out_of_range(spec: _Spec, value: float) -> bool:
    return (
        (spec.ge is not None and value < spec.ge)
        or (spec.gt is not None and value <= spec.gt)
        or (spec.le is not None and value > spec.le)
        or (spec.lt is not None and value >= spec.lt)
    )


def parse_params(cls: type[P], parameters: Mapping[str, Any] | None, plugin_type: str, plugin_name: str) -> P:
    """Build ``cls`` from a YAML ``parameters`` mapping (None = no parameters given).

    Raises ConfigError for a non-mapping, unknown keys, missing required keys and invalid values.
    """
    where = plugin_location(plugin_type, plugin_name)
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, Mapping):
        raise ConfigError(f"expected a mapping, got {_show(parameters)}", location=f"{where}: parameters")
    fields = _fields(cls)
    known = {f.key: f for f in fields}
    for key in parameters:
        if key not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise ConfigError(
                f"unknown parameter{did_you_mean(key, known)} (allowed: {allowed})",
                location=f"{where}: parameters.{key}",
            )
    values: dict[str, Any] = {}
    for f in fields:
        if f.key not in parameters:
            if f.required:
                raise ConfigError(
                    f"required parameter missing: expected {_expectation(f)}",
                    location=f"{where}: parameters.{f.key}",
                )
            continue
        raw = parameters[f.key]
        try:
            values[f.name] = _convert(f, raw)
        except (ValueError, TypeError) as exc:
            detail = f" ({exc})" if str(exc) else ""
            raise ConfigError(
                f"expected {_expectation(f)}, got {_show(raw)}{detail}",
                location=f"{where}: parameters.{f.key}",
            ) from None
    try:
        return cls(**values)
    except (ValueError, TypeError) as exc:  # cross-field checks in __post_init__
        raise ConfigError(str(exc), location=f"{where}: parameters") from None


def params_to_dict(params: object) -> dict[str, Any]:
    """The YAML form of a parameters dataclass (every field, defaults included, camelCase keys; a
    field's ``render`` function applied), which :func:`parse_params` maps to the same values."""
    if not dataclasses.is_dataclass(params) or isinstance(params, type):
        raise TypeError(f"not a parameters dataclass instance: {params!r}")
    out: dict[str, Any] = {}
    for f in _fields(type(params)):
        value = getattr(params, f.name)
        if hasattr(value, "as_yaml"):  # a structured value that renders itself (e.g. sessionIdConfig)
            value = value.as_yaml()
        elif f.spec.render is not None and value is not None:
            value = f.spec.render(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.key] = value
    return out
