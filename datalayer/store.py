"""The endpoint store: address -> current :class:`EndpointRecord`, and the cached snapshot.

Single-writer (the event loop that runs discovery and pollers). Records are immutable and replaced
whole, so a reader holding a snapshot never sees a half-updated endpoint. Membership changes copy the
dict (copy-on-write), so a reader on another thread iterating it never sees it change size.
``snapshot()`` returns the same tuple object until something changes; the next call after a change
builds one new tuple (O(endpoints)).

``ready_on_add``: a new endpoint's record starts ready (the data layer without a metrics source);
otherwise it starts not ready until its first good scrape.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from datalayer.records import DiscoveryEvent, EndpointRecord, EndpointSpec, EventKind

__all__ = ["EndpointStore"]


class EndpointStore:
    def __init__(self, *, ready_on_add: bool = False) -> None:
        self._ready_on_add = ready_on_add
        self._records: dict[str, EndpointRecord] = {}
        self._snapshot: tuple[EndpointRecord, ...] | None = ()

    def snapshot(self) -> tuple[EndpointRecord, ...]:
        snap = self._snapshot
        if snap is None:
            snap = tuple(self._records.values())
            self._snapshot = snap
        return snap

    def get(self, address: str) -> EndpointRecord | None:
        return self._records.get(address)

    def replace(self, record: EndpointRecord) -> bool:
        """Swap in ``record`` if its endpoint is still present (a scrape may outlive a removal)."""
        if record.address not in self._records:
            return False
        self._records[record.address] = record
        self._snapshot = None
        return True

    def apply(
        self, events: Sequence[DiscoveryEvent]
    ) -> tuple[list[EndpointSpec], list[EndpointSpec], list[str]]:
        """Apply a batch; return (added specs, updated specs, removed addresses) as actually applied."""
        records = dict(self._records)
        added: list[EndpointSpec] = []
        updated: list[EndpointSpec] = []
        removed: list[str] = []
        for event in events:
            spec = event.spec
            current = records.get(spec.address)
            if event.kind is EventKind.REMOVED:
                if current is not None:
                    del records[spec.address]
                    removed.append(spec.address)
            elif current is None:
                record = EndpointRecord.from_spec(spec)
                records[spec.address] = replace(record, ready=True) if self._ready_on_add else record
                added.append(spec)
            else:
                changed = _respec(current, spec)
                if changed is not current:
                    records[spec.address] = changed
                    updated.append(spec)
        if added or updated or removed:
            self._records = records
            self._snapshot = None
        return added, updated, removed

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[EndpointRecord]:
        return iter(self.snapshot())


def _respec(record: EndpointRecord, spec: EndpointSpec) -> EndpointRecord:
    if (record.name, record.labels, record.engine) == (spec.name, spec.labels, spec.engine):
        return record
    return EndpointRecord(
        address=record.address,
        name=spec.name,
        labels=spec.labels,
        ready=record.ready,
        metrics=record.metrics,
        attributes=record.attributes,
        engine=spec.engine,
        health=record.health,
        last_error=record.last_error,
    )
