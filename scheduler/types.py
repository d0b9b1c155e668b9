"""Value types of the scheduling framework.

Everything here is an immutable value (:func:`scheduler.values.value_type`: slotted dataclasses, frozen
for the type checker) and free of logic beyond trivial accessors.
The framework is agnostic to endpoint kinds and to Kubernetes: an endpoint is anything that satisfies
:class:`EndpointView`, and its metrics anything that satisfies :class:`MetricsView`. The data layer
produces such objects; tests and benchmarks use :class:`Endpoint` and :class:`Metrics` from this module.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import field
from types import MappingProxyType
from typing import Any, Protocol, overload, runtime_checkable

from scheduler.values import value_type

__all__ = [
    "DEFAULT_FAIRNESS_ID",
    "EMPTY_MAPPING",
    "ApiKind",
    "Completion",
    "DecisionRecord",
    "Endpoint",
    "EndpointView",
    "FilterStep",
    "LLMRequest",
    "Metrics",
    "MetricsView",
    "Outcome",
    "ProfileDecision",
    "ProfileResult",
    "SchedulingResult",
    "ScoredCandidates",
    "ScoredEndpoint",
    "Usage",
]

EMPTY_MAPPING: Mapping[str, Any] = MappingProxyType({})


def _empty_mapping() -> Mapping[str, Any]:
    return EMPTY_MAPPING


class ApiKind(enum.Enum):
    """Which OpenAI-compatible API a request targets (from the suffix of ``:path``)."""

    COMPLETIONS = "completions"
    CHAT_COMPLETIONS = "chat_completions"
    EMBEDDINGS = "embeddings"
    RESPONSES = "responses"
    CONVERSATIONS = "conversations"
    OTHER = "other"  # passthrough parser / header-only requests


DEFAULT_FAIRNESS_ID = "default-flow"
"""The fairness id of a request without one (upstream's ``DefaultFairnessID``)."""


@value_type
class LLMRequest:
    """The structured inference request the scheduler decides on.

    ``prompt_text`` is the text used for prefix hashing and the token estimate: for completions the
    prompt (a list prompt joined), for chat a canonical serialisation of the messages, empty for
    header-only or passthrough requests. ``messages`` keeps the parsed chat messages for plugins that
    want structure. ``target_model`` is the model the server will be asked for (after any rewrite);
    ``adapter`` is set when ``target_model`` is a LoRA adapter rather than a base model.
    """

    request_id: str
    model: str
    target_model: str
    prompt_text: str = ""
    messages: tuple[Mapping[str, Any], ...] | None = None
    headers: Mapping[str, str] = field(default_factory=_empty_mapping)
    priority: int = 0
    fairness_id: str = DEFAULT_FAIRNESS_ID
    stream: bool = False
    adapter: str | None = None
    token_estimate: int = 0
    cache_salt: str = ""
    api: ApiKind = ApiKind.COMPLETIONS
    body_size: int = 0

    @property
    def sheddable(self) -> bool:
        """A request with negative priority may be dropped when the pool is saturated."""
        return self.priority < 0


@runtime_checkable
class MetricsView(Protocol):
    """What the scheduler reads of one endpoint's model-server state (one immutable scrape).

    ``updated_at`` is the monotonic time (seconds, same clock as the scheduler's) of the last good
    scrape; 0.0 means never scraped. ``kv_cache_usage`` is in [0, 1]. ``max_lora`` is 0 when unknown.
    ``block_size`` and ``num_gpu_blocks`` are None until the server reports its cache configuration.
    """

    @property
    def waiting_queue_size(self) -> int: ...
    @property
    def running_requests(self) -> int: ...
    @property
    def kv_cache_usage(self) -> float: ...
    @property
    def max_lora(self) -> int: ...
    @property
    def running_adapters(self) -> frozenset[str]: ...
    @property
    def waiting_adapters(self) -> frozenset[str]: ...
    @property
    def block_size(self) -> int | None: ...
    @property
    def num_gpu_blocks(self) -> int | None: ...
    @property
    def updated_at(self) -> float: ...


@runtime_checkable
class EndpointView(Protocol):
    """One model-server endpoint as seen by a scheduling cycle (must not change during the cycle).

    ``address`` is ``ip:port``, the value written to ``x-gateway-destination-endpoint``, and the
    endpoint's identity within the framework. ``name`` is a human name (``<pod>-rank-<i>`` in
    Kubernetes). ``ready`` is false while the server starts, drains or is known unhealthy.
    ``attributes`` holds named values added by data-layer plugins (e.g. ``"models"``).
    """

    @property
    def address(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def ready(self) -> bool: ...
    @property
    def metrics(self) -> MetricsView: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...


@value_type
class Metrics:
    """Concrete :class:`MetricsView` for tests, benchmarks and simple callers."""

    waiting_queue_size: int = 0
    running_requests: int = 0
    kv_cache_usage: float = 0.0
    max_lora: int = 0
    running_adapters: frozenset[str] = frozenset()
    waiting_adapters: frozenset[str] = frozenset()
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    updated_at: float = 0.0


@value_type
class Endpoint:
    """Concrete :class:`EndpointView` for tests, benchmarks and simple callers."""

    address: str
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=_empty_mapping)
    ready: bool = True
    metrics: MetricsView = field(default_factory=Metrics)
    attributes: Mapping[str, Any] = field(default_factory=_empty_mapping)


@value_type
class ScoredEndpoint:
    """An endpoint with its weighted total score in one profile run (lives for one cycle)."""

    endpoint: EndpointView
    score: float


class ScoredCandidates(Sequence[ScoredEndpoint]):
    """The candidates of one profile run with their totals: a read-only sequence of
    :class:`ScoredEndpoint`, each built on first access (and the same object afterwards).

    ``endpoints`` and ``totals`` are aligned tuples. A picker may read ``totals`` directly and index
    only the endpoints it returns, so the objects of the candidates it does not pick are never built.
    Equal to a tuple (and hashed like one) holding the same scored endpoints.
    """

    __slots__ = ("_items", "endpoints", "totals")

    def __init__(self, endpoints: tuple[EndpointView, ...], totals: tuple[float, ...]) -> None:
        if len(endpoints) != len(totals):
            raise ValueError(f"{len(endpoints)} endpoints but {len(totals)} totals")
        self.endpoints = endpoints
        self.totals = totals
        self._items: list[ScoredEndpoint | None] = [None] * len(endpoints)

    def __len__(self) -> int:
        return len(self.endpoints)

    @overload
    def __getitem__(self, index: int) -> ScoredEndpoint: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[ScoredEndpoint, ...]: ...
    def __getitem__(self, index: int | slice) -> ScoredEndpoint | tuple[ScoredEndpoint, ...]:
        if isinstance(index, slice):
            return self._all()[index]
        item = self._items[index]
        if item is None:
            item = self._items[index] = ScoredEndpoint(self.endpoints[index], self.totals[index])
        return item

    def __iter__(self) -> Iterator[ScoredEndpoint]:
        return iter(self._all())

    def _all(self) -> tuple[ScoredEndpoint, ...]:
        items = self._items
        if None in items:
            for i, item in enumerate(items):
                if item is None:
                    items[i] = ScoredEndpoint(self.endpoints[i], self.totals[i])
        return tuple(items)  # type: ignore[arg-type]  # every slot is filled

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ScoredCandidates):
            other = other._all()
        return isinstance(other, tuple) and self._all() == other

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


@value_type
class FilterStep:
    """What one filter did in a profile run: the endpoints it removed, each with a reason."""

    plugin_type: str
    plugin_name: str
    removed: tuple[tuple[str, str], ...]  # (address, reason)


@value_type
class ProfileDecision:
    """The decision record of one profile run.

    ``candidates`` are the addresses that reached scoring, in order; ``scores`` maps each scorer name
    to its clamped, unweighted scores aligned with ``candidates``; ``weights`` maps scorer name to
    weight; ``totals`` are the weighted sums aligned with ``candidates``.
    """

    profile: str
    filters: tuple[FilterStep, ...]
    candidates: tuple[str, ...]
    scores: Mapping[str, tuple[float, ...]]
    weights: Mapping[str, float]
    totals: tuple[float, ...]
    picker: str
    picked: tuple[str, ...]
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for logs and the debug endpoint)."""
        return {
            "profile": self.profile,
            "filters": [
                {"plugin": f"{f.plugin_type}/{f.plugin_name}", "removed": dict(f.removed)}
                for f in self.filters
            ],
            "scores": {
                name: dict(zip(self.candidates, values, strict=True)) for name, values in self.scores.items()
            },
            "weights": dict(self.weights),
            "totals": dict(zip(self.candidates, self.totals, strict=True)),
            "picker": self.picker,
            "picked": list(self.picked),
            "failure": self.failure,
        }


@value_type
class DecisionRecord:
    """Why a request went where it went: one :class:`ProfileDecision` per profile run."""

    request_id: str
    profiles: tuple[ProfileDecision, ...]
    primary_profile: str | None
    shadow_profiles: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "primary_profile": self.primary_profile,
            "shadow_profiles": list(self.shadow_profiles),
            "profiles": [p.to_dict() for p in self.profiles],
        }


@value_type
class ProfileResult:
    """The outcome of one profile run: targets ordered best first (primary, then fallbacks)."""

    profile: str
    targets: tuple[ScoredEndpoint, ...]
    shadow: bool = False
    candidates: Sequence[ScoredEndpoint] = ()  # every endpoint the picker chose from, with its total


@value_type
class SchedulingResult:
    """What the scheduler returns for one request.

    ``endpoints`` are the endpoints to route to, primary first then fallbacks (from the primary
    profile). ``headers`` are extra request headers to set (e.g. ``x-prefiller-host-port``).
    ``profile_results`` holds every profile run, shadow ones included (never routed).
    """

    primary_profile: str
    endpoints: tuple[EndpointView, ...]
    profile_results: Mapping[str, ProfileResult]
    headers: Mapping[str, str] = field(default_factory=_empty_mapping)
    decision: DecisionRecord | None = None

    @property
    def primary(self) -> EndpointView:
        return self.endpoints[0]

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(e.address for e in self.endpoints)


class Outcome(enum.Enum):
    """How a dispatched request ended (passed to ``on_completed``; exactly one per dispatch)."""

    OK = "ok"
    UPSTREAM_ERROR = "upstream_error"  # model server answered with a non-2xx status
    CLIENT_CANCEL = "client_cancel"  # downstream client went away
    STREAM_RESET = "stream_reset"  # the proxy reset the ext_proc stream mid-request
    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"  # the picker shut down before the request finished


@value_type
class Usage:
    """Token usage as reported by the model server (zeros when unknown)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0


@value_type
class Completion:
    """Everything known when a dispatched request completes."""

    outcome: Outcome
    status_code: int = 0
    served_endpoint: str | None = None  # ip:port reported by the proxy, when it reports one
    usage: Usage = field(default_factory=Usage)
    output_chunks: int = 0
    decode_seconds: float = 0.0  # from the first to the last response body chunk (0: one chunk, or unknown)


ScoreVector = Sequence[float]
