"""probabilistic-admitter (llm-d's test cases)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins import admitters
from scheduler.plugins.admitters import ProbabilisticAdmitter, ProbabilisticAdmitterParams
from scheduler.types import Endpoint, LLMRequest, Metrics


class Draw(random.Random):
    """A random source that always returns ``value``."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def admitter(draw: float, **params: Any) -> ProbabilisticAdmitter:
    return ProbabilisticAdmitter("a", ProbabilisticAdmitterParams(**params), Draw(draw))


def ep(queue: int = 0, kv: float = 0.0) -> Endpoint:
    return Endpoint("10.0.0.1:8000", metrics=Metrics(waiting_queue_size=queue, kv_cache_usage=kv))


SHEDDABLE = LLMRequest(request_id="r", model="m", target_model="m", priority=-1)
CRITICAL = LLMRequest(request_id="r", model="m", target_model="m", priority=0)


def test_defaults_and_validation() -> None:
    plugin = admitters.factory("a", {}, PluginHandle())
    assert isinstance(plugin, ProbabilisticAdmitter)
    assert plugin.params == ProbabilisticAdmitterParams(5, 0.8, 5.0, 300.0)
    for bad in (
        {"queueDepthThreshold": 0},
        {"kvCacheUtilThreshold": 0},
        {"power": -1},
        {"power": 0},
        {"k": -1},
        {"k": 0},
    ):
        with pytest.raises(ConfigError, match=r'\(probabilistic-admitter "a"\): parameters'):
            admitters.factory("a", bad, PluginHandle())


def test_admission_decisions() -> None:
    assert admitter(0.999).admit(SHEDDABLE, [ep(queue=100)]) is not None  # saturation 20 -> p = 1
    assert admitter(0.0).admit(SHEDDABLE, [ep()]) is None  # saturation 0 -> p = 0
    assert admitter(0.0).admit(CRITICAL, [ep(queue=100)]) is None  # priority >= 0 always admitted
    assert admitter(0.0).admit(SHEDDABLE, []) is None  # no candidates: admit
    assert admitter(0.5).admit(SHEDDABLE, [ep(queue=5), ep(kv=0.8)]) is not None  # mean saturation 1.0
    sat = 0.272 / 0.8  # ~0.34: p ~ 1
    assert min(math.pow(sat, 5) * 300, 1.0) >= 0.99
    assert admitter(0.999).admit(SHEDDABLE, [ep(kv=0.272)]) is not None
    # saturation 0.2 -> p = 0.2^5 * 300 = 0.096
    assert admitter(0.0).reject_probability([ep(kv=0.16)]) == pytest.approx(0.096)
    assert admitter(0.9).admit(SHEDDABLE, [ep(kv=0.16)]) is None
    reason = admitter(0.0).admit(SHEDDABLE, [ep(kv=0.16)])
    assert reason == "probabilistic-admitter: rejected, saturation=0.200 prob=0.10"


UPSTREAM = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: probabilistic-admitter
- type: random-picker
- type: utilization-detector
  parameters:
    queueDepthThreshold: 999999999
    kvCacheUtilThreshold: 1.0
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: random-picker
"""


def test_upstream_config_without_its_flow_control_section_loads() -> None:
    from scheduler.config import load_config_text

    resolved = load_config_text(UPSTREAM)
    assert isinstance(resolved.plugin("probabilistic-admitter"), ProbabilisticAdmitter)
