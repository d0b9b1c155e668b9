"""Replica sync (pyepp): active-active picker replicas share prefix ownership and in-flight counts over
authenticated UDP datagrams (:mod:`epp.sync.service`, :mod:`epp.sync.wire`; the plugin side is
:mod:`scheduler.replica_sync`)."""

from epp.sync.service import ReplicaSyncCollector, ReplicaSyncService, read_key

__all__ = ["ReplicaSyncCollector", "ReplicaSyncService", "read_key"]
