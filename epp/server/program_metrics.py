"""``program-aware-fairness``'s gauges, read from the watched plugins at every scrape.

``llm_d_epp_program_aware_attained_service_tokens{program_id}`` and
``llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id}`` (one series per program the plugin
tracks and has reported for; evicted programs vanish, as upstream deletes their series) and
``llm_d_epp_program_aware_jains_fairness_index`` (one sample per watched plugin's last pick; none until a
plugin is configured). llm-d names only: upstream has no deprecated twin, so ``--metrics-naming
inference`` exports none of them. The series are bounded by the plugin's program budget
(:data:`scheduler.plugins.flowcontrol.program_aware.MAX_PROGRAMS`).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from epp.server.metric_catalog import Naming, Scheme, by_key
from scheduler.observer import ProgramFairnessSource

__all__ = ["ProgramFairnessCollector"]

_KEYS = ("program_attained_service", "program_avg_wait", "program_fairness_index")


class ProgramFairnessCollector(Collector):
    """Exports the watched ``program-aware-fairness`` plugins (one per plugin name)."""

    def __init__(self, naming: Naming = Naming.BOTH) -> None:
        self._sources: dict[str, ProgramFairnessSource] = {}
        self._families = [
            (name, by_key(key).help, by_key(key).labels(Scheme.LLM_D))
            for key in _KEYS
            if naming.exports(Scheme.LLM_D) and (name := by_key(key).name(Scheme.LLM_D)) is not None
        ]

    def watch(self, source: ProgramFairnessSource) -> None:
        """Export ``source`` (replacing an earlier plugin of the same name)."""
        self._sources[source.name] = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._families:
            return
        service, wait, index = (GaugeMetricFamily(n, doc, labels=labels) for n, doc, labels in self._families)
        seen: set[str] = set()
        for source in self._sources.values():
            for sample in source.program_samples():
                if sample.program_id in seen:  # two plugins, one program: the first plugin's series
                    continue
                seen.add(sample.program_id)
                if sample.attained_service is not None:
                    service.add_metric([sample.program_id], sample.attained_service)
                if sample.avg_wait_ms is not None:
                    wait.add_metric([sample.program_id], sample.avg_wait_ms)
            index.add_metric([], source.fairness_index())
        yield service
        yield wait
        yield index
