"""``predicted-latency-producer``'s sidecar mode (a mix-in of
:class:`~scheduler.plugins.latency.producer.PredictedLatencyProducer`, which owns the attributes it sets;
split out only to keep each module readable).

In sidecar mode (:mod:`epp.server.latency_sidecar`, set up by upstream's environment variables)
upstream's prediction server answers: its predictions are fetched before scheduling and handed in
(:meth:`SidecarMode.accept_remote`, at most :data:`~scheduler.plugins.latency.inflight.PENDING_LIMIT`
requests); the in-process model keeps learning and answers for the requests the server did not (failure,
timeout); every training sample is also queued for the training server (:meth:`SidecarMode.drain_samples`,
at most :data:`SIDECAR_QUEUE_LIMIT`, the oldest dropped beyond). The I/O is all in ``epp``.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.plugins.latency.inflight import PENDING_LIMIT
from scheduler.plugins.latency.info import PredictedLatencyParams
from scheduler.plugins.latency.model import Features, LatencyModel
from scheduler.plugins.prefix.match import PrefixMatch
from scheduler.types import EndpointView, LLMRequest

__all__ = ["SIDECAR_QUEUE_LIMIT", "SidecarMode", "SidecarSample"]

SIDECAR_QUEUE_LIMIT = 16384  # training samples waiting for the sidecar client (the oldest dropped beyond)
_POD_TYPES = frozenset({"prefill", "decode"})


@dataclass(frozen=True, slots=True)
class SidecarSample:
    """One training sample for upstream's training server (sidecar mode): the features at dispatch and
    the observed latency; 0 marks the target a sample does not carry (upstream's convention)."""

    features: Features
    ttft_ms: float
    tpot_ms: float
    tokens_generated: int
    pod_type: str  # "prefill", "decode" or "" (the endpointRoleLabel label's value)
    at: float  # wall-clock seconds (time.time()) when observed


class SidecarMode:
    """Predictions handed in, training samples handed out (see the module docstring)."""

    params: PredictedLatencyParams
    model: LatencyModel
    prefix_match_for: Callable[[CycleState, LLMRequest], PrefixMatch | None]
    features: Callable[[LLMRequest, EndpointView, PrefixMatch | None], Features]

    def _init_sidecar(self) -> None:
        # predictions fetched before scheduling, per request, and the fetch's duration
        self._remote: OrderedDict[str, Mapping[str, tuple[float, float]]] = OrderedDict()
        self._remote_seconds: dict[str, float] = {}
        self._outbox: deque[SidecarSample] | None = None  # None: not in sidecar mode, or no training
        self._sidecar_state: Callable[[], Mapping[str, Any]] | None = None
        self.samples_dropped = 0
        self.remote_cycles = 0  # prediction sets that used the sidecar's predictions

    def enable_sidecar(self, training: bool, state: Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Sidecar mode: predictions handed in by :meth:`accept_remote` take precedence over the
        in-process model's (which keeps learning: it answers whenever the sidecar did not); with
        ``training`` every sample is also queued for :meth:`drain_samples`. ``state``: the client's
        counters, shown in :meth:`dump_state`."""
        self._outbox = deque() if training else None
        self._sidecar_state = state

    def pod_type(self, endpoint: EndpointView) -> str:
        """Upstream's ``pod_type`` of ``endpoint``: its ``endpointRoleLabel`` label when that is
        ``prefill`` or ``decode``, else "" (monolithic)."""
        role = self.params.endpoint_role_label
        value = endpoint.labels.get(role, "") if role else ""
        return value if value in _POD_TYPES else ""

    def remote_features(
        self, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> list[tuple[EndpointView, Features]]:
        """The features to ask the prediction server about, one per endpoint (the prefix match on a
        cycle state of its own, as :meth:`admission_predictions`)."""
        match = self.prefix_match_for(CycleState(), request)
        return [(e, self.features(request, e, match)) for e in endpoints]

    def accept_remote(
        self, request_id: str, predictions: Mapping[str, tuple[float, float]] | None, seconds: float = 0.0
    ) -> None:
        """The prediction server's ``{address: (ttft_ms, tpot_ms)}`` for a request about to be
        scheduled (None: none, the in-process model answers), fetched in ``seconds`` (added to the
        prediction duration metric, which upstream measures around its bulk call). Kept until the
        request is dispatched or completes, at most :data:`PENDING_LIMIT` requests (the oldest
        dropped beyond)."""
        if predictions is None:
            self._forget_remote(request_id)
            return
        if len(self._remote) >= PENDING_LIMIT and request_id not in self._remote:
            self._forget_remote(next(iter(self._remote)))
        self._remote[request_id] = predictions
        self._remote_seconds[request_id] = seconds

    def _forget_remote(self, request_id: str) -> None:
        self._remote.pop(request_id, None)
        self._remote_seconds.pop(request_id, None)

    def drain_samples(self, limit: int) -> list[SidecarSample]:
        """Up to ``limit`` queued training samples, oldest first (removed from the queue)."""
        outbox = self._outbox
        if not outbox:
            return []
        return [outbox.popleft() for _ in range(min(limit, len(outbox)))]

    def queued_samples(self) -> int:
        return len(self._outbox) if self._outbox is not None else 0

    def _observe(
        self, address: str, features: Features, ttft: float | None, tpot: float | None, tokens: int, pod: str
    ) -> None:
        self.model.observe(address, features, ttft, tpot)
        outbox = self._outbox
        if outbox is not None:
            if len(outbox) >= SIDECAR_QUEUE_LIMIT:
                outbox.popleft()
                self.samples_dropped += 1
            outbox.append(SidecarSample(features, ttft or 0.0, tpot or 0.0, tokens, pod, time.time()))

    def _sidecar_dump(self) -> dict[str, Any] | None:
        """The sidecar part of ``/debug/plugins/state`` (None: not in sidecar mode)."""
        if self._sidecar_state is None and self._outbox is None:
            return None
        sidecar = dict(self._sidecar_state()) if self._sidecar_state is not None else {}
        sidecar.update(
            cyclesWithSidecarPredictions=self.remote_cycles,
            trainingSamplesQueued=self.queued_samples(),
            trainingSamplesDropped=self.samples_dropped,
        )
        return sidecar
