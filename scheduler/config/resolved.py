"""The resolved configuration: plugin instances, profiles, handler and saturation detector.

``build_scheduler()`` wires them into a :class:`~scheduler.scheduler.Scheduler`; ``to_dict()`` /
``render()`` give the effective configuration as YAML: every plugin (implicit ones included) with all
its parameters (defaults filled in), every profile with its filters, weighted scorers and picker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from scheduler.config.document import KIND, PluginSpec
from scheduler.handle import PluginHandle
from scheduler.interfaces import Plugin, ProfileHandler, SaturationDetector
from scheduler.observer import SchedulerObserver
from scheduler.params import params_to_dict
from scheduler.profile import SchedulerProfile
from scheduler.scheduler import Scheduler

__all__ = ["ResolvedConfig", "ResolvedPlugin"]


@dataclass(frozen=True, slots=True)
class ResolvedPlugin:
    spec: PluginSpec
    plugin: Plugin

    @property
    def implicit(self) -> bool:
        return self.spec.location == "(implicit)"


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    source: str
    api_version: str
    plugins: tuple[ResolvedPlugin, ...]
    profiles: Mapping[str, SchedulerProfile]
    handler: ProfileHandler
    saturation_detector: SaturationDetector | None
    sections: Mapping[str, Any]
    raw_sections: Mapping[str, Any]
    handle: PluginHandle

    def plugin(self, name: str) -> Plugin:
        return self.handle.plugin(name)

    def build_scheduler(self, observer: SchedulerObserver | None = None) -> Scheduler:
        return Scheduler(
            self.profiles,
            self.handler,
            [p.plugin for p in self.plugins],
            clock=self.handle.clock,
            observer=observer,
            saturation_detector=self.saturation_detector,
        )

    def to_dict(self) -> dict[str, Any]:
        plugins = []
        for resolved in self.plugins:
            entry: dict[str, Any] = {"name": resolved.plugin.name, "type": resolved.plugin.plugin_type}
            params = getattr(resolved.plugin, "params", None)
            if params is not None and dataclasses.is_dataclass(params) and not isinstance(params, type):
                entry["parameters"] = params_to_dict(params)
            elif resolved.spec.parameters:
                entry["parameters"] = dict(resolved.spec.parameters)
            plugins.append(entry)
        profiles = []
        for profile in self.profiles.values():
            by_name: dict[str, dict[str, Any]] = {f.name: {"pluginRef": f.name} for f in profile.filters}
            for scorer, weight in profile.scorers:  # a filter that also scores is referenced once
                by_name.setdefault(scorer.name, {"pluginRef": scorer.name})["weight"] = weight
            refs: list[dict[str, Any]] = list(by_name.values())
            refs.append({"pluginRef": profile.picker.name})
            entry = {"name": profile.name, "plugins": refs}
            if profile.shadow:
                entry["shadow"] = True
            profiles.append(entry)
        out: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": KIND,
            "plugins": plugins,
            "schedulingProfiles": profiles,
        }
        if self.saturation_detector is not None:
            out["saturationDetector"] = {"pluginRef": self.saturation_detector.name}
        out.update(self.raw_sections)
        return out

    def render(self) -> str:
        """The effective configuration as YAML (loadable again, with the same meaning)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)
