"""The configuration used when none is given (GIE's default plugins and weights)."""

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
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: max-score-picker
"""
