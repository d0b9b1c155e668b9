"""``endpoint-notification-source`` (llm-d-router): endpoint lifecycle events for extractor plugins.

Whenever discovery adds an endpoint, changes one (name, labels, engine) or removes one, the data layer
hands an :class:`EndpointEvent` to every configured endpoint-notification source, which passes it on,
unchanged, to each of its extractors in order (upstream's ``EndpointDataSource.NotifyEndpoint`` is
the identity too; the extractors do the work: dropping per-endpoint caches on delete, for example).
An extractor is any plugin of the ``plugins`` list that implements :class:`EndpointExtractor`
(``extract_endpoint(event)``); naming one that does not, or two of the same type, is a configuration
error, as upstream's ``validateSourceExtractors`` makes it. Events are delivered synchronously on the
event loop, in discovery order (adds and updates after removals of the same batch); an extractor that
raises is logged and the others still run. The source takes no parameters.

Configuration::

    plugins:
      - type: endpoint-notification-source
      - type: my-endpoint-extractor        # a plugin implementing EndpointExtractor
    dataLayer:
      sources:
        - pluginRef: endpoint-notification-source
          extractors:
            - pluginRef: my-endpoint-extractor
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import structlog

from datalayer.records import EndpointSpec

__all__ = [
    "ENDPOINT_NOTIFICATION_SOURCE",
    "EndpointEvent",
    "EndpointEventType",
    "EndpointExtractor",
    "EndpointNotificationSource",
]

ENDPOINT_NOTIFICATION_SOURCE = "endpoint-notification-source"

log = structlog.get_logger("datalayer")


class EndpointEventType(enum.Enum):
    ADD_OR_UPDATE = "add-or-update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class EndpointEvent:
    """An endpoint was added or changed (``ADD_OR_UPDATE``), or removed (``DELETE``, with its last spec)."""

    kind: EndpointEventType
    endpoint: EndpointSpec


@runtime_checkable
class EndpointExtractor(Protocol):
    """A plugin that reacts to endpoint lifecycle events. ``extract_endpoint`` runs on the event loop:
    keep it cheap, never block; an exception is logged and does not stop the other extractors."""

    def extract_endpoint(self, event: EndpointEvent) -> None: ...


class EndpointNotificationSource:
    """Passes each event to its extractors, in order."""

    plugin_type = ENDPOINT_NOTIFICATION_SOURCE

    def __init__(self, name: str, extractors: Sequence[EndpointExtractor]) -> None:
        self.name = name
        self.extractors = tuple(extractors)

    def notify(self, event: EndpointEvent) -> None:
        for extractor in self.extractors:
            try:
                extractor.extract_endpoint(event)
            except Exception:
                log.exception(
                    "endpoint extractor failed",
                    source=self.name,
                    extractor=getattr(extractor, "name", repr(extractor)),
                    endpoint=event.endpoint.address,
                    kind=event.kind.value,
                )
