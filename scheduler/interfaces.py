"""Plugin contracts (extension points) of the scheduling framework.

A plugin instance has a ``plugin_type`` (the registry key used in configuration files) and a
``name`` (unique per configuration, defaults to the type). One instance may implement several
extension points; the framework slots it by which of these protocols it satisfies (a plugin whose methods
match roles of two kinds declares the ones it fills: :mod:`scheduler.roles`). Contracts:

* Filters and scorers are **pure**: no I/O, no awaits, no mutation of endpoint objects or of the
  request. They may read and write the :class:`~scheduler.cycle_state.CycleState` of the cycle.
* Plugin state that lives across requests (a prefix index, in-flight counters) belongs to the
  plugin instance and is only changed from lifecycle hooks, which run on the caller's thread.
* Hooks never raise into the caller: the framework catches and reports exceptions from them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from scheduler.types import (
    Completion,
    EndpointView,
    LLMRequest,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
    Usage,
)

if TYPE_CHECKING:
    from scheduler.cycle_state import CycleState
    from scheduler.observer import PluginMetrics
    from scheduler.profile import SchedulerProfile

__all__ = [
    "CompletionHook",
    "DispatchHook",
    "EndpointRemovalHook",
    "ExplainingFilter",
    "Filter",
    "Handle",
    "MetricsReporter",
    "PDDecider",
    "Picker",
    "Plugin",
    "PluginFactory",
    "PrefixIndexStats",
    "PrepareHook",
    "ProfileHandler",
    "RequestAdmitter",
    "RequestHeadersProvider",
    "ResponseChunkHook",
    "ResponseHeadersHook",
    "ResponseHeadersProvider",
    "ResponseMetadataProvider",
    "SaturationDetector",
    "Scorer",
    "StateDumper",
]


@runtime_checkable
class Plugin(Protocol):
    """Every plugin has a type (registry key) and an instance name."""

    @property
    def plugin_type(self) -> str: ...

    @property
    def name(self) -> str: ...


@runtime_checkable
class Filter(Plugin, Protocol):
    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        """Return the subset of ``endpoints`` fit for this request, preserving order.

        Pure. Returning an empty sequence is not an error of the filter: the framework fails the
        profile run with a reason naming this filter. Must not return endpoints not in the input.
        """
        ...


@runtime_checkable
class ExplainingFilter(Filter, Protocol):
    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        """Why ``endpoint`` was removed (called only for removed endpoints, for decision records)."""
        ...


@runtime_checkable
class Scorer(Plugin, Protocol):
    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        """Score every endpoint in [0, 1] (higher is better); the list is aligned with ``endpoints``.

        Pure. The framework clamps each value into [0, 1], multiplies it by the profile's weight for
        this scorer and sums across scorers.
        """
        ...


@runtime_checkable
class Picker(Plugin, Protocol):
    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        """Choose between 1 and ``maxNumOfEndpoints`` distinct endpoints from a non-empty ``scored``.

        Returned best first: the primary, then fallbacks. Randomness comes only from the seeded
        source the plugin received from its :class:`Handle`.
        """
        ...


@runtime_checkable
class ProfileHandler(Plugin, Protocol):
    def pick_profiles(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        """Return the profiles to run next; called repeatedly until it returns an empty mapping.

        ``results`` holds every profile run so far (None for a run that failed).
        """
        ...

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        """Turn the profile results into the routing result (primary profile, extra headers).

        Raises :class:`scheduler.errors.NoEndpointError` when no routable result exists.
        """
        ...


@runtime_checkable
class RequestAdmitter(Plugin, Protocol):
    def admit(self, request: LLMRequest, endpoints: Sequence[EndpointView]) -> str | None:
        """Admission control before scheduling (llm-d's Admitter): None admits the request.

        A string rejects it with 429 (resource exhausted) and is the reason given to the client.
        ``endpoints`` are the request's candidates (after the subset hint). Called once per
        request, on the event-loop thread; may draw from the plugin's seeded random source but does
        no I/O. An exception is logged and the request is admitted.
        """
        ...


@runtime_checkable
class RequestHeadersProvider(Plugin, Protocol):
    def request_headers(
        self, cycle: CycleState, request: LLMRequest, result: SchedulingResult
    ) -> Mapping[str, str]:
        """Headers to set on the request sent to the model server (llm-d's header PreRequest plugins).

        Called once per scheduling cycle, after the profile handler built ``result``, in
        configuration order, with the cycle's state (e.g. the prefix match); the returned headers
        are merged into ``result.headers`` (a later provider wins on the same name). Pure: no I/O,
        no mutation. Header names are lower-case. An exception is reported and the cycle goes on
        without that provider's headers.
        """
        ...


@runtime_checkable
class PrepareHook(Plugin, Protocol):
    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        """Precompute per-request data into ``cycle`` before any profile runs (e.g. the prefix match).

        Called once per scheduling cycle, on the whole snapshot, in configuration order. Pure apart
        from writing ``cycle``; an exception is reported and the cycle goes on without the data.
        """
        ...


@runtime_checkable
class DispatchHook(Plugin, Protocol):
    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        """The request was sent toward ``result``'s endpoints. Exactly once per dispatch."""
        ...


@runtime_checkable
class ResponseHeadersHook(Plugin, Protocol):
    def on_response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None:
        """The model server's response headers arrived.

        When the proxy reported which endpoint actually served the request (a fallback may have),
        ``headers`` carries it as ``x-gateway-destination-endpoint-served: ip:port``.
        """
        ...


@runtime_checkable
class ResponseChunkHook(Plugin, Protocol):
    """A plugin that sees response body chunks. One that needs only the first chunk of a response
    (the first token's time) sets the class attribute ``first_chunk_only = True``: when every chunk
    hook of the scheduler says so, the server calls the hooks for a response's first chunk only
    (otherwise for every chunk, so such a plugin must still ignore the later ones)."""

    def on_response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        """One response body chunk passed through. Hot path: keep it O(1) and allocation-free."""
        ...


@runtime_checkable
class CompletionHook(Plugin, Protocol):
    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        """The dispatched request ended (any outcome). Exactly once per dispatch; idempotent."""
        ...


@runtime_checkable
class EndpointRemovalHook(Plugin, Protocol):
    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        """These endpoints left the pool: drop any state kept for them."""
        ...


@runtime_checkable
class StateDumper(Plugin, Protocol):
    def dump_state(self) -> dict[str, Any]:
        """The plugin's state for ``/debug/plugins/state`` (llm-d-router's StateDumper): JSON-ready,
        aggregates only (no client-supplied strings beyond what the plugin already exports as metrics),
        bounded in size. Called from the event loop; cheap, no I/O."""
        ...


@runtime_checkable
class ResponseHeadersProvider(Plugin, Protocol):
    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        """Headers to add to the response sent back to the client (e.g. a session-affinity token).

        Called once per dispatch when the model server's response headers arrive; ``served`` is the
        ``ip:port`` the proxy reported as having served the request (a fallback may have), None when
        it reported none. Pure and cheap: no I/O, no mutation of ``request`` or ``result``. Header
        names are lower-case. An exception is reported and the response goes on without the headers.
        """
        ...


@runtime_checkable
class ResponseMetadataProvider(Plugin, Protocol):
    def response_metadata(
        self, request: LLMRequest, result: SchedulingResult, usage: Usage
    ) -> Mapping[str, Mapping[str, float]]:
        """Dynamic metadata ``{namespace: {key: number}}`` for the proxy at the end of the response.

        Called once per dispatch whose response body the EPP sees, when it ends; ``usage`` is the
        model server's (zeros when unknown or the response failed). Pure and cheap. An exception is
        reported and nothing is added.
        """
        ...


@runtime_checkable
class MetricsReporter(Plugin, Protocol):
    def bind_metrics(self, metrics: PluginMetrics) -> None:
        """Report this plugin's own metric families to ``metrics`` from now on.

        Called once by the scheduler at construction when its observer implements
        :class:`scheduler.observer.PluginMetrics` (a later scheduler built from the same plugins
        binds them again, replacing the earlier binding). Until then the plugin reports to
        :data:`scheduler.observer.NO_PLUGIN_METRICS`.
        """
        ...


@runtime_checkable
class PDDecider(Plugin, Protocol):
    def should_disaggregate(
        self, cycle: CycleState, request: LLMRequest, decode: EndpointView | None
    ) -> bool:
        """True when the disaggregated stage (prefill, or encode) should run for ``request``.

        Called by a disaggregation profile handler once per request and stage, after the decode
        profile chose ``decode``; ``decode`` is None when the stage runs before decode (llm-d's
        ``prefill-first`` order asks the encode decider that way). Pure: may read ``cycle`` (e.g.
        the prefix match), must not write it; no I/O.
        """
        ...


@runtime_checkable
class SaturationDetector(Plugin, Protocol):
    def saturation(self, endpoints: Sequence[EndpointView], now: float) -> float:
        """Pool saturation, 0.0 (idle) upward; >= 1.0 means saturated. Stale endpoints count as full."""
        ...

    def is_saturated(self, endpoints: Sequence[EndpointView], now: float) -> bool:
        """True when sheddable (priority < 0) requests should be rejected with 429."""
        ...


@runtime_checkable
class PrefixIndexStats(Plugin, Protocol):
    """Optional: a plugin that holds an approximate prefix index, or scores from one, reports it for the
    ``*_prefix_indexer_*`` metrics (index size, per-request hit bytes and ratio).

    The metrics code finds these plugins by this protocol, never by type name or attribute lookup.
    """

    def stats_index(self) -> PrefixIndexStats | None:
        """The plugin whose index this one reads: itself when it holds its own, its producer when it
        reads one that reports stats, None when the index it reads reports none."""
        ...

    def index_entries(self) -> int:
        """Distinct block hashes the index of this plugin holds now (0 when it holds none)."""
        ...

    @property
    def block_chars(self) -> int:
        """Prompt characters per block of the index (4 per token)."""
        ...

    def max_blocks(self) -> int:
        """How many leading blocks of a prompt are hashed and matched."""
        ...


class Handle(Protocol):
    """What a plugin factory receives besides its name and parameters."""

    def plugin(self, name: str) -> Plugin:
        """Another plugin instance of the same configuration, by name (KeyError if unknown).

        Plugins are instantiated in configuration order; only earlier plugins can be looked up
        at construction time.
        """
        ...

    def rng(self, name: str) -> random.Random:
        """A random source for the named plugin, seeded deterministically from the scheduler seed."""
        ...

    @property
    def clock(self) -> Callable[[], float]:
        """Monotonic clock in seconds (same clock as :attr:`MetricsView.updated_at`)."""
        ...


PluginFactory = Callable[[str, Mapping[str, Any], Handle], Plugin]
"""``factory(name, parameters, handle) -> plugin``; raises ConfigError for bad parameters."""
