"""The data-producer model of llm-d-router: a producer computes per-request data, consumers read it.

A *data key* names one kind of data and the producer instance that computed it:
``"<data type>/<producer name>"`` (for example ``PrefixCacheMatchInfo/approx-prefix-cache-producer``).
A producer announces the keys it writes (:class:`DataProducer`); a consumer announces the keys it
needs (:class:`DataConsumer`), each with the parameter that named the producer (e.g. a scorer's
``prefixMatchInfoProducerName``) and the producer type created when none is configured.

Wiring rules (applied by :mod:`scheduler.config.build` after every configured plugin is built;
upstream's ``CreateMissingDataProducers``):

* a needed key produced by a configured plugin binds the consumer to that plugin;
* a key no plugin produces, whose producer the consumer's parameter named explicitly, is a
  ConfigError naming that parameter (the name is wrong, or the plugin is not such a producer);
* a need with a ``fallback_key`` that some plugin produces, or an ``optional`` need, is left unbound
  (the consumer reads the fallback data, or works without);
* producers added here are wired in turn (a default producer may itself consume data);
* otherwise the default producer type is created with default parameters under its type name and
  bound (the resolved configuration lists it as implicit), except under the legacy apiVersion
  ``inference.networking.x-k8s.io/v1alpha1`` for a need marked ``legacy_self_contained``: there the
  consumer keeps its own state, as GIE's plugins did before the producer split.

Consumers read the producer's output through the bound instance during the cycle (the data is
memoised per cycle in :class:`~scheduler.cycle_state.CycleState`), so the order of ``prepare`` hooks
does not matter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from scheduler.interfaces import Plugin

__all__ = ["DataConsumer", "DataNeed", "DataProducer", "SelfContainedConsumer", "data_key"]


def data_key(data_type: str, producer_name: str) -> str:
    """The key of ``data_type`` computed by the producer instance ``producer_name``."""
    return f"{data_type}/{producer_name}"


@dataclass(frozen=True, slots=True)
class DataNeed:
    """One key a consumer needs.

    ``parameter``: the consumer's parameter naming the producer (for error locations);
    ``explicit``: whether the configuration set that parameter; ``default_producer``: the plugin type
    created when nothing produces the key; ``legacy_self_contained``: under the legacy apiVersion the
    consumer works without a producer (it computes or reads the data itself); ``fallback_key``: when
    the parameter was not set and a configured plugin produces this key, the consumer works without a
    producer under either apiVersion (it reads that data its own way); ``optional``: when the
    parameter was not set and nothing produces the key, the consumer works without it (no producer
    is injected).
    """

    key: str
    parameter: str
    explicit: bool
    default_producer: str
    legacy_self_contained: bool = False
    fallback_key: str | None = None
    optional: bool = False


@runtime_checkable
class DataProducer(Plugin, Protocol):
    def produced_keys(self) -> frozenset[str]:
        """The data keys this instance computes (constant after construction)."""
        ...


@runtime_checkable
class DataConsumer(Plugin, Protocol):
    def data_needs(self) -> Sequence[DataNeed]:
        """The keys this instance reads (constant after construction)."""
        ...

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        """Called once per need at configuration time: the producer of ``key`` (None: work alone,
        only for a ``legacy_self_contained`` need under the legacy apiVersion)."""
        ...


@runtime_checkable
class SelfContainedConsumer(DataConsumer, Protocol):
    def standalone_parameters(self) -> Mapping[str, Any] | None:
        """Parameters that keep this instance self-contained under either apiVersion (None when it
        reads a producer). Used by ``check-config --to`` to convert without changing the meaning."""
        ...
