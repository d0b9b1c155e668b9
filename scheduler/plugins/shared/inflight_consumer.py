"""Reading an ``inflight-load-producer``: the consumer side of ``inFlightLoadProducerName``.

Mixin for plugins that keep their own :class:`~scheduler.plugins.shared.inflight.InflightTracker`
under the legacy apiVersion and read a producer's counts under llm-d-router's model
(:mod:`scheduler.producers`): the producer named by ``inFlightLoadProducerName`` (default: the
instance named ``inflight-load-producer``, injected under ``llm-d.ai/v1alpha1`` when absent). Once
bound, the plugin's own tracking hooks do nothing (``tracking`` is False). A plugin given
``requestTimeout`` (the parameter of its own tracking, which llm-d-router deprecates and ignores)
keeps its own tracking under either apiVersion, as llm-d-inference-scheduler's plugins did; with
``inFlightLoadProducerName`` as well it is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.errors import ConfigError
from scheduler.interfaces import Plugin
from scheduler.params import params_to_dict, plugin_location
from scheduler.plugins.shared.inflight_load import INFLIGHT_LOAD, InflightLoadProducer
from scheduler.producers import DataNeed

__all__ = ["DEFAULT_INFLIGHT_PRODUCER", "OWN_TRACKING_KEYS", "InflightLoadConsumer", "check_own_tracking"]

OWN_TRACKING_KEYS = ("requestTimeout",)

DEFAULT_INFLIGHT_PRODUCER = "inflight-load-producer"


class InflightLoadConsumer:
    """Mixin: ``data_needs`` / ``bind_producer`` over ``inflight_producer_name``."""

    inflight_producer_name: str = ""
    inflight_producer: InflightLoadProducer | None = None
    tracking: bool = True
    own_tracking: bool = False  # the configuration gave OWN_TRACKING_KEYS: never read a producer

    def data_needs(self) -> Sequence[DataNeed]:
        if self.own_tracking:
            return ()
        key = f"{INFLIGHT_LOAD}/{self.inflight_producer_name or DEFAULT_INFLIGHT_PRODUCER}"
        explicit = bool(self.inflight_producer_name)
        return (
            DataNeed(
                key,
                "inFlightLoadProducerName",
                explicit,
                DEFAULT_INFLIGHT_PRODUCER,
                legacy_self_contained=True,
            ),
        )

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if producer is not None:
            assert isinstance(producer, InflightLoadProducer)
            self.inflight_producer = producer
            self.tracking = False

    def standalone_parameters(self) -> Mapping[str, Any] | None:
        if self.inflight_producer is not None:
            return None
        params = params_to_dict(getattr(self, "params"))  # noqa: B009 (set by the plugin class)
        if not params.get("inFlightLoadProducerName"):
            params.pop("inFlightLoadProducerName", None)
        return params


def check_own_tracking(plugin_type: str, name: str, parameters: Mapping[str, Any] | None) -> bool:
    """Whether ``parameters`` ask for the plugin's own tracking; ConfigError when they also name a
    producer."""
    given = [k for k in OWN_TRACKING_KEYS if k in (parameters or {})]
    if given and (parameters or {}).get("inFlightLoadProducerName"):
        raise ConfigError(
            f"{given[0]} configures the plugin's own in-flight tracking, which a plugin reading a producer "
            "(inFlightLoadProducerName) does not have",
            location=f"{plugin_location(plugin_type, name)}: parameters.{given[0]}",
        )
    return bool(given)
