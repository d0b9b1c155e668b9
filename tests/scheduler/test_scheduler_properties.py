"""Hypothesis properties of a whole scheduling cycle with the built-in plugins."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import load_config_text
from scheduler.types import Endpoint, LLMRequest, Metrics

CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: {picker}
  parameters: {{maxNumOfEndpoints: {n}}}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: {picker}
"""

metrics = st.builds(
    Metrics,
    waiting_queue_size=st.integers(0, 50),
    running_requests=st.integers(0, 50),
    kv_cache_usage=st.floats(-0.5, 1.5, allow_nan=False),
)
pools = st.lists(metrics, min_size=1, max_size=12).map(
    lambda ms: [Endpoint(f"10.0.{i // 250}.{i % 250}:8000", metrics=m) for i, m in enumerate(ms)]
)
prompts = st.lists(st.sampled_from(["sys" * 30, "a" * 64, "b" * 64, "é" * 70, "q"]), max_size=8).map("".join)
pickers = st.sampled_from(["max-score-picker", "random-picker", "weighted-random-picker"])


@settings(max_examples=40, deadline=None)
@given(pool=pools, picker=pickers, n=st.integers(1, 4), history=st.lists(prompts, max_size=6), prompt=prompts)
def test_cycle_properties(pool: list[Endpoint], picker: str, n: int, history: list[str], prompt: str) -> None:
    decisions = []
    for _ in range(2):  # same seed, same history -> same decision
        scheduler = load_config_text(CONFIG.format(picker=picker, n=n), seed=3).build_scheduler()
        for i, text in enumerate(history):
            past = LLMRequest(f"h{i}", "m", "m", prompt_text=text)
            scheduler.dispatched(past, scheduler.schedule(past, pool))
        result = scheduler.schedule(LLMRequest("r", "m", "m", prompt_text=prompt), pool)
        decision = result.decision
        assert decision is not None
        profile = decision.profiles[0]
        for values in profile.scores.values():
            assert all(0.0 <= v <= 1.0 for v in values)
        assert all(0.0 <= t <= 7.0 for t in profile.totals)
        picked = result.addresses
        assert 1 <= len(picked) <= n and len(set(picked)) == len(picked)
        assert set(picked) <= {e.address for e in pool}
        decisions.append(picked)
    assert decisions[0] == decisions[1]
