"""A RequestAdmitter plugin (probabilistic-admitter) in admission: 429 with its reason."""

from __future__ import annotations

import random

import pytest

from epp.admission.admitter import Admitter
from epp.request.errors import RequestError
from scheduler.plugins.admitters import ProbabilisticAdmitter, ProbabilisticAdmitterParams
from scheduler.types import Endpoint, LLMRequest, Metrics

SHEDDABLE = LLMRequest(request_id="r", model="m", target_model="m", priority=-1)
CRITICAL = LLMRequest(request_id="r", model="m", target_model="m", priority=0)


class Boom(ProbabilisticAdmitter):
    def admit(self, request: LLMRequest, endpoints: object) -> str | None:  # type: ignore[override]
        raise RuntimeError("boom")


def test_epp_admitter_rejects_with_429() -> None:
    gate = Admitter(
        None, lambda: 0.0, [ProbabilisticAdmitter("a", ProbabilisticAdmitterParams(), random.Random(0))]
    )
    pool = [Endpoint("10.0.0.1:8000", metrics=Metrics(waiting_queue_size=100))]
    with pytest.raises(RequestError) as info:
        gate.admit(SHEDDABLE, None, pool)
    assert info.value.status == 429 and "probabilistic-admitter" in info.value.message
    assert gate.shed_total == 1
    assert list(gate.admit(CRITICAL, None, pool)) == pool


def test_a_failing_admitter_admits() -> None:
    gate = Admitter(None, lambda: 0.0, [Boom("b", ProbabilisticAdmitterParams(), random.Random(0))])
    pool = [Endpoint("10.0.0.1:8000")]
    assert list(gate.admit(SHEDDABLE, None, pool)) == pool
