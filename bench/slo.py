"""Per-request latency SLOs for the routing benchmark: the SLO mix a scenario sends and its attainment.

An :class:`SloMix` gives every request of a workload an ``x-slo-ttft-ms`` header, tight for a seeded
fraction of the requests and loose for the rest, optionally an ``x-slo-tpot-ms`` header, and marks a
seeded fraction as sheddable with ``x-gateway-inference-objective: <objective>``; the scenario's
objectives file (:data:`OBJECTIVES`) gives that InferenceObjective priority -1, so the picker's
``latency-slo-admitter`` may reject it with 429 when no server is predicted to meet its SLO. SLOs are
in wall-clock milliseconds (what the picker measures), not simulated time.

:func:`attainment` scores one run: of the requests that carried an SLO and were admitted (answered
2xx), the fraction whose client-side TTFT met the TTFT SLO (and whose mean inter-token latency met the
TPOT SLO, when one was sent); 429 answers count as rejected, other failures as neither. The same is
also counted after warm-up: for the requests from index ``warmup`` on (default :data:`WARMUP_REQUESTS`;
the learnt latency model predicts after 16 first tokens, the cold-start prior before it, and before the
first requests of each prefix group no server holds it, so a tight SLO cannot be met there by any router).

With ``streamingMode: true`` (the shipped predicted-latency profile), upstream's rule makes a request
without ``x-slo-tpot-ms`` invalid on every server (its TPOT headroom is ``0 - tpot``), so the tier
filter keeps all servers and the admitter rejects it whatever its TTFT SLO: the SLO scenario sends a
TPOT SLO with every request.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from epp.request.build import OBJECTIVE_HEADER
from simulator.loadgen import RequestResult
from simulator.workloads import Workload

__all__ = [
    "OBJECTIVES",
    "OBJECTIVE_HEADER",
    "TPOT_HEADER",
    "TTFT_HEADER",
    "WARMUP_REQUESTS",
    "SloAttainment",
    "SloMix",
    "apply_slo",
    "attainment",
    "slo_targets",
]

TTFT_HEADER = "x-slo-ttft-ms"
TPOT_HEADER = "x-slo-tpot-ms"
SHEDDABLE_OBJECTIVE = "sheddable"
WARMUP_REQUESTS = 64
OBJECTIVES = f"""\
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {{name: {SHEDDABLE_OBJECTIVE}}}
spec: {{priority: -1}}
"""
"""The objectives file the SLO scenario gives the picker (``--objectives-file``)."""


@dataclass(frozen=True, slots=True)
class SloMix:
    """``tight_fraction`` of the requests get ``tight_ttft_ms``, the others ``loose_ttft_ms``;
    ``tpot_ms`` (0 = none) goes to every request; ``sheddable_fraction`` of the requests (drawn
    independently) name the sheddable objective. Draws come from ``seed``."""

    tight_ttft_ms: float
    loose_ttft_ms: float
    tight_fraction: float = 0.5
    tpot_ms: float = 0.0
    sheddable_fraction: float = 0.5
    seed: int = 7

    def __post_init__(self) -> None:
        if not (0 < self.tight_ttft_ms <= self.loose_ttft_ms):
            raise ValueError(f"SloMix: need 0 < tight_ttft_ms <= loose_ttft_ms, got {self}")
        for name in ("tight_fraction", "sheddable_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"SloMix: {name} must be in [0, 1], got {getattr(self, name)}")
        if self.tpot_ms < 0:
            raise ValueError(f"SloMix: tpot_ms must be >= 0, got {self.tpot_ms}")


def apply_slo(workload: Workload, mix: SloMix) -> Workload:
    """``workload`` with the SLO headers of ``mix`` added to every request (deterministic)."""
    rng = random.Random(mix.seed)
    requests = []
    for spec in workload.requests:
        tight = rng.random() < mix.tight_fraction
        sheddable = rng.random() < mix.sheddable_fraction
        headers = [(TTFT_HEADER, f"{mix.tight_ttft_ms if tight else mix.loose_ttft_ms:g}")]
        if mix.tpot_ms > 0:
            headers.append((TPOT_HEADER, f"{mix.tpot_ms:g}"))
        if sheddable:
            headers.append((OBJECTIVE_HEADER, SHEDDABLE_OBJECTIVE))
        requests.append(replace(spec, headers=(*spec.headers, *headers)))
    return replace(workload, requests=tuple(requests))


def slo_targets(workload: Workload) -> dict[int, tuple[float, float]]:
    """Request index -> (TTFT SLO ms, TPOT SLO ms; 0 = none) for the requests that carry an SLO."""
    out: dict[int, tuple[float, float]] = {}
    for spec in workload.requests:
        h = dict(spec.headers)
        ttft, tpot = float(h.get(TTFT_HEADER, 0) or 0), float(h.get(TPOT_HEADER, 0) or 0)
        if ttft > 0 or tpot > 0:
            out[spec.index] = (ttft, tpot)
    return out


@dataclass(frozen=True, slots=True)
class SloAttainment:
    """``requests`` with an SLO that were sent; ``admitted`` answered 2xx, ``met`` of them within the
    SLO; ``rejected`` answered 429; ``tight_*`` the same for the tightest TTFT SLO sent; ``warm_*``
    for the requests after warm-up."""

    requests: int
    admitted: int
    met: int
    rejected: int
    tight_admitted: int = 0
    tight_met: int = 0
    warm_admitted: int = 0
    warm_met: int = 0

    @property
    def rate(self) -> float:
        """Attainment of the admitted requests (NaN when none was admitted)."""
        return self.met / self.admitted if self.admitted else math.nan

    @property
    def tight_rate(self) -> float:
        return self.tight_met / self.tight_admitted if self.tight_admitted else math.nan

    @property
    def warm_rate(self) -> float:
        return self.warm_met / self.warm_admitted if self.warm_admitted else math.nan


def _met(r: RequestResult, ttft_ms: float, tpot_ms: float) -> bool:
    if ttft_ms > 0 and (r.ttft is None or r.ttft * 1000 > ttft_ms):
        return False
    return not (tpot_ms > 0 and r.itl and sum(r.itl) / len(r.itl) * 1000 > tpot_ms)


def attainment(
    results: Sequence[RequestResult], slos: Mapping[int, tuple[float, float]], warmup: int = WARMUP_REQUESTS
) -> SloAttainment:
    """SLO attainment of one run (see the module docstring)."""
    tightest = min((t for t, _ in slos.values() if t > 0), default=0.0)
    requests = admitted = met = rejected = tight_admitted = tight_met = warm_admitted = warm_met = 0
    for r in results:
        slo = slos.get(r.index)
        if slo is None:
            continue
        requests += 1
        if r.status == 429:
            rejected += 1
        if not r.ok:
            continue
        ok = _met(r, *slo)
        admitted += 1
        met += ok
        if slo[0] == tightest and tightest > 0:
            tight_admitted += 1
            tight_met += ok
        if r.index >= warmup:
            warm_admitted += 1
            warm_met += ok
    return SloAttainment(
        requests, admitted, met, rejected, tight_admitted, tight_met, warm_admitted, warm_met
    )
