"""Parameters of ``token-producer`` (llm-d-router's ``tokenizer`` package, ``tokenizerPluginConfig``).

Backend selection, as upstream: ``vllm`` or ``modelName`` selects the vLLM HTTP ``/render`` backend
(``modelName`` required); ``estimate`` selects tokenizer-free byte packing, also the backend when
nothing is set; at most one of ``estimate``, ``vllm`` / ``modelName``, ``udsTokenizerConfig``.

``vllm``: ``url`` (default ``http://localhost:8000``, trailing ``/`` removed; llm-d-inference-scheduler
named it ``http``, accepted too), ``timeout`` (Go duration, default ``5s``, text-only requests),
``mmTimeout`` (default ``30s``, requests whose chat messages carry array content). Unknown keys are
rejected.

Not available in pyepp, rejected with a ConfigError naming the field: ``udsTokenizerConfig`` (the
deprecated gRPC-over-UDS tokenizer sidecar; upstream says to migrate to ``vllm.url``) and
``estimate.image`` / ``estimate.video`` (multimodal placeholder estimation: pyepp's prompt text carries
no images or videos to estimate). ``estimate.image.mode`` / ``estimate.video.*.mode`` values outside
upstream's choices are reported as upstream reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.duration import parse_duration
from scheduler.errors import ConfigError
from scheduler.params import plugin_location

__all__ = ["DEFAULT_URL", "RenderBackend", "TokenProducerParams", "parse_token_producer_params"]

DEFAULT_URL = "http://localhost:8000"
DEFAULT_TIMEOUT = 5.0
DEFAULT_MM_TIMEOUT = 30.0
_TOP_KEYS = ("modelName", "vllm", "estimate", "udsTokenizerConfig")
_VLLM_KEYS = ("url", "http", "timeout", "mmTimeout")
_MODES = {
    ("image", "mode"): ("dynamic", "static"),
    ("video", "tokensPerFrame", "mode"): ("dynamic", "static"),
    ("video", "frames", "mode"): ("sampled", "strided"),
}


@dataclass(frozen=True, slots=True)
class RenderBackend:
    """The vLLM ``/render`` backend: base ``url``, the ``model`` stamped into each call, timeouts (s)."""

    url: str
    model: str
    timeout: float
    mm_timeout: float


@dataclass(frozen=True, slots=True)
class TokenProducerParams:
    """Resolved parameters; ``render`` is None for the ``estimate`` backend."""

    model_name: str = ""
    render: RenderBackend | None = None

    def as_yaml(self) -> dict[str, Any]:
        """The resolved parameters in upstream's YAML form."""
        if self.render is None:
            return {"estimate": {}}
        r = self.render
        return {
            "modelName": self.model_name,
            "vllm": {"url": r.url, "timeout": f"{r.timeout:g}s", "mmTimeout": f"{r.mm_timeout:g}s"},
        }


def parse_token_producer_params(parameters: Any, plugin_type: str, name: str) -> TokenProducerParams:
    """Validate ``parameters`` as upstream's factory does; ConfigError names the field at fault."""
    where = plugin_location(plugin_type, name)

    def fail(field: str, message: str) -> ConfigError:
        return ConfigError(message, location=f"{where}: parameters{'.' + field if field else ''}")

    if parameters is None:
        parameters = {}
    if not isinstance(parameters, Mapping):
        raise fail("", f"expected a mapping, got {parameters!r}")
    for key in parameters:
        if key not in _TOP_KEYS:
            raise fail(str(key), f"unknown parameter (expected one of {', '.join(_TOP_KEYS)})")
    model = parameters.get("modelName") or ""
    if not isinstance(model, str):
        raise fail("modelName", f"expected a string, got {model!r}")
    vllm = parameters.get("vllm")
    estimate = parameters.get("estimate")
    uds = parameters.get("udsTokenizerConfig")
    use_vllm = vllm is not None or bool(model)
    if sum((estimate is not None, use_vllm, uds is not None)) > 1:
        raise fail("", "only one of 'estimate', 'vllm', or 'udsTokenizerConfig' may be set")
    if uds is not None:
        raise fail(
            "udsTokenizerConfig",
            "the deprecated gRPC-over-UDS tokenizer backend is not available in pyepp; "
            "use 'vllm.url' (vLLM's /render endpoints), as upstream's migration note says",
        )
    if estimate is not None:
        _check_estimate(estimate, fail)
        return TokenProducerParams()
    if not use_vllm:
        return TokenProducerParams()
    if not model:
        raise fail("modelName", "'modelName' must be specified for the vllm backend")
    return TokenProducerParams(model, _render(vllm or {}, model, fail))


def _render(vllm: Any, model: str, fail: Any) -> RenderBackend:
    if not isinstance(vllm, Mapping):
        raise fail("vllm", f"expected a mapping, got {vllm!r}")
    for key in vllm:
        if key not in _VLLM_KEYS:
            raise fail(f"vllm.{key}", "unknown parameter (expected url, timeout or mmTimeout)")
    url, http = vllm.get("url") or "", vllm.get("http") or ""
    for field, value in (("url", url), ("http", http)):
        if not isinstance(value, str):
            raise fail(f"vllm.{field}", f"expected a string, got {value!r}")
    if url and http and url.rstrip("/") != http.rstrip("/"):
        raise fail("vllm.http", "'http' (the older name of 'url') differs from 'url'")
    base = (url or http).rstrip("/") or DEFAULT_URL
    if not base.startswith("http://"):
        raise fail("vllm.url", f"expected a plain http:// base URL (TLS is not supported), got {base!r}")
    timeouts = []
    for field, default in (("timeout", DEFAULT_TIMEOUT), ("mmTimeout", DEFAULT_MM_TIMEOUT)):
        raw = vllm.get(field)
        if raw is None or raw == "":
            timeouts.append(default)
            continue
        try:
            seconds = parse_duration(raw)
        except ValueError:
            raise fail(f"vllm.{field}", f'expected a duration such as "5s", got {raw!r}') from None
        if seconds <= 0:
            raise fail(f"vllm.{field}", f"expected a positive duration, got {raw!r}")
        timeouts.append(seconds)
    return RenderBackend(base, model, timeouts[0], timeouts[1])


def _check_estimate(estimate: Any, fail: Any) -> None:
    if not isinstance(estimate, Mapping):
        raise fail("estimate", f"expected a mapping, got {estimate!r}")
    for key in estimate:
        if key not in ("image", "video"):
            raise fail(f"estimate.{key}", "unknown parameter (expected image or video)")
    for path, choices in _MODES.items():
        node: Any = estimate
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node not in (None, "") and node not in choices:
            field = "estimate." + ".".join(path)
            raise fail(field, f"{field} must be {choices[0]!r} or {choices[1]!r}")
    for key in ("image", "video"):
        if estimate.get(key):
            raise fail(
                f"estimate.{key}",
                "multimodal placeholder estimation is not available in pyepp (its prompt text "
                "carries no images or videos); leave 'estimate' empty",
            )
