"""The configuration used when none is given: pyepp's best-measured profile (not GIE's default).

Measured with ``epp-bench routing`` (docs/bench.md, README "Routing quality"): GIE's load and cache
scorers plus the picker's own in-flight count (``active-request-scorer``, exact at dispatch while
scraped gauges lag a scrape interval), ``no-hit-lru-scorer`` (cold prompts spread over the least
recently used endpoints) and ``prefix-affinity-scorer`` (prefix ownership that outlives the KV cache,
with bounded load; an owner keeps a prefix through a burst of other prefixes, and a hot prefix spills to
the endpoints with the lightest footprint of placed prefixes; docs/scheduler.md, "Prefix affinity"). Its
weight (10) lets an owner under its load bound win over the load scorers (total weight 5) for a prompt
whose owned prefix is most of it; the load bound, not the weights, decides when a prefix spills.
``prefix-cache-scorer`` runs with ``autoTune: false`` (it remembers ``lruCapacityPerServer`` blocks per
server instead of the server's KV size): measured equal where caches hold the working set and better
where they do not (shared prefixes with a working set 1.5x the fleet's KV, 24 closed-loop clients: hit
rate 0.55 vs 0.47, TTFT p90 2.6 vs 3.3 s).

GIE's historical default (queue x2, kv-cache x2, prefix x3) ships unchanged as
``deploy/configs/gie-default.yaml``; ``deploy/configs/default.yaml`` is this text as a file.
Configurations that name their plugins keep GIE's exact semantics: only the no-config default differs.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_CONFIG_TEXT",
    "DEFAULT_PICKER_TYPE",
    "DEFAULT_PROFILE_HANDLER_TYPE",
    "DEFAULT_PROFILE_NAME",
    "DEFAULT_SATURATION_DETECTOR_TYPE",
]

DEFAULT_PROFILE_NAME = "default"
DEFAULT_PICKER_TYPE = "max-score-picker"
DEFAULT_PROFILE_HANDLER_TYPE = "single-profile-handler"
DEFAULT_SATURATION_DETECTOR_TYPE = "utilization-detector"

DEFAULT_CONFIG_TEXT = """\
# pyepp's built-in default profile (the best-measured one; see README, "Routing quality").
# GIE's default is deploy/configs/gie-default.yaml.
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
  parameters:
    autoTune: false
- type: prefix-affinity-scorer
- type: active-request-scorer
- type: no-hit-lru-scorer
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 1
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: prefix-affinity-scorer
    weight: 10
  - pluginRef: active-request-scorer
    weight: 1
  - pluginRef: no-hit-lru-scorer
    weight: 1
  - pluginRef: max-score-picker
"""
