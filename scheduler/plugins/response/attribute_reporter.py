"""``request-attribute-reporter`` (llm-d-router): a CEL expression over the response usage, reported to
the proxy as ext_proc dynamic metadata.

Parameters (upstream's; unknown keys rejected)::

    attributes:                       # exactly one entry
    - key: {namespace: envoy.lb, name: x-gateway-inference-request-cost}   # namespace default envoy.lb
      expression: usage.prompt_tokens + usage.completion_tokens          # required
      condition: has(usage.prompt_tokens)                                # optional

At the end of a response whose body the picker sees, ``usage`` is the model server's usage as
upstream builds it (a ``google.protobuf.Struct``, so every number is a double):
``{prompt_tokens, completion_tokens, total_tokens}`` (zeros when the response reported none) plus
``prompt_tokens_details: {cached_tokens}`` when the server reported cached tokens (pyepp's usage keeps
no "reported zero" apart from "absent", so a reported 0 reads as absent). When ``condition`` is set
and does not evaluate to ``true`` nothing is reported; otherwise ``expression`` must give a number,
truncated to an integer; 0 and -1 are not reported (upstream skips them), nor is anything after an
evaluation error or a non-numeric result (each logged). The value becomes
``dynamic_metadata[namespace][name] = <number>`` on the last ext_proc response for the response body.

Expressions are compiled at startup with the ``common-expression-language`` package (CEL); a syntax
error, a variable other than ``usage`` or an unknown function is a ConfigError (as cel-go's compile
errors). Evaluation is pure and takes a few microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.errors import ConfigError
from scheduler.headers import LB_NAMESPACE
from scheduler.interfaces import Handle, Plugin
from scheduler.params import plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.types import LLMRequest, SchedulingResult, Usage

__all__ = ["DEFAULT_NAMESPACE", "AttributeSpec", "RequestAttributeReporter", "factory", "usage_struct"]

DEFAULT_NAMESPACE = LB_NAMESPACE
_log = structlog.get_logger("scheduler.attribute_reporter")


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    namespace: str
    name: str
    expression: str
    condition: str


def usage_struct(usage: Usage) -> dict[str, Any]:
    """``usage`` as upstream's CEL variable: its JSON form read as a protobuf Struct (doubles)."""
    out: dict[str, Any] = {
        "prompt_tokens": float(usage.prompt_tokens),
        "completion_tokens": float(usage.completion_tokens),
        "total_tokens": float(usage.total_tokens),
    }
    if usage.cached_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": float(usage.cached_tokens)}
    return out


class RequestAttributeReporter(PluginBase):
    plugin_type = "request-attribute-reporter"

    def __init__(self, name: str, spec: AttributeSpec, expression: Any, condition: Any | None) -> None:
        super().__init__(name)
        self.spec = spec
        self._expression = expression
        self._condition = condition

    def response_metadata(
        self, request: LLMRequest, result: SchedulingResult, usage: Usage
    ) -> Mapping[str, Mapping[str, float]]:
        """``{namespace: {name: value}}`` to report at the end of the response ({} for nothing)."""
        data = {"usage": usage_struct(usage)}
        spec = self.spec
        try:
            if self._condition is not None and self._condition.execute(data) is not True:
                return {}
            value = self._expression.execute(data)
        except Exception as exc:
            _log.error(
                "CEL evaluation failed", plugin=self.name, request_id=request.request_id, error=str(exc)
            )
            return {}
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            _log.error(
                "CEL expression result is not a number",
                plugin=self.name,
                expression=spec.expression,
                result=repr(value),
            )
            return {}
        number = int(value)
        if number in (0, -1):
            return {}
        return {spec.namespace: {spec.name: float(number)}}


def _compile(text: str, field: str, where: str) -> Any:
    # common-expression-language, imported only when the plugin is configured. Its binding is the
    # extension module cel.cel: xds-protos also ships a (empty) cel/__init__.py for its cel.expr protos,
    # and when pip installs it after common-expression-language, ``import cel`` has no compile().
    from cel import cel

    def fail(message: str) -> ConfigError:
        return ConfigError(message, location=f"{where}: parameters.attributes[0].{field}")

    try:
        program = cel.compile(text)
    except ValueError as exc:
        raise fail(f"failed to compile {field}: {exc}") from None
    unknown = [v for v in program.variables() if v != "usage"]
    if unknown:
        raise fail(f"failed to compile {field}: undeclared reference to {unknown[0]!r} (only 'usage')")
    try:  # unknown functions surface only at evaluation in this CEL runtime: try the zero usage
        program.execute({"usage": usage_struct(Usage())})
    except RuntimeError as exc:
        if "Undefined variable or function" in str(exc):
            raise fail(f"failed to compile {field}: {exc}") from None
    except Exception:
        pass  # a runtime error on zero usage (e.g. a missing field) is a runtime matter, as upstream
    return program


def _spec(parameters: Any, where: str) -> AttributeSpec:
    def fail(field: str, message: str) -> ConfigError:
        return ConfigError(message, location=f"{where}: parameters{'.' + field if field else ''}")

    if not isinstance(parameters, Mapping):
        raise fail("", f"expected a mapping with key attributes, got {parameters!r}")
    for key in parameters:
        if key != "attributes":
            raise fail(str(key), "unknown parameter (expected attributes)")
    attributes = parameters.get("attributes")
    if not isinstance(attributes, list) or len(attributes) != 1:
        raise fail("attributes", "attributes must contain exactly one entry")
    entry = attributes[0]
    if not isinstance(entry, Mapping):
        raise fail("attributes[0]", "expected a mapping with keys key, expression, condition")
    for key in entry:
        if key not in ("key", "expression", "condition"):
            raise fail(f"attributes[0].{key}", "unknown field (expected key, expression or condition)")
    attr_key = entry.get("key") or {}
    if not isinstance(attr_key, Mapping) or set(attr_key) - {"namespace", "name"}:
        raise fail("attributes[0].key", "expected a mapping with keys namespace, name")
    name, namespace = attr_key.get("name") or "", attr_key.get("namespace") or ""
    expression, condition = entry.get("expression") or "", entry.get("condition") or ""
    for field, value in (("key.name", name), ("key.namespace", namespace), ("expression", expression),
                         ("condition", condition)):  # fmt: skip
        if not isinstance(value, str):
            raise fail(f"attributes[0].{field}", f"expected a string, got {value!r}")
    if not name:
        raise fail("attributes[0].key.name", "attributeKey.name cannot be empty")
    if not expression:
        raise fail("attributes[0].expression", "attributes[0].expression cannot be empty")
    return AttributeSpec(namespace or DEFAULT_NAMESPACE, name, expression, condition)


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    where = plugin_location(RequestAttributeReporter.plugin_type, name)
    spec = _spec(parameters, where)
    expression = _compile(spec.expression, "expression", where)
    condition = _compile(spec.condition, "condition", where) if spec.condition else None
    return RequestAttributeReporter(name, spec, expression, condition)
