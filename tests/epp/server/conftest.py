"""Fixtures shared by the server tests: a fake scheduler, a metrics registry, and an in-process
:class:`~epp.server.server.EppServer` on each gRPC engine with a plaintext channel to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry
from srv_helpers import FakeScheduler, make_server

from epp.server.server import EppServer


@pytest.fixture
def sched() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture(params=["grpcio", "h2", "ngh2"])
def engine(request: pytest.FixtureRequest) -> str:
    """Every test using the server runs on both gRPC engines."""
    return str(request.param)


@pytest.fixture
async def server(sched: FakeScheduler, registry: CollectorRegistry, engine: str) -> AsyncIterator[EppServer]:
    srv = make_server(sched, registry=registry, engine=engine)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.shutdown(grace=0)


@pytest.fixture
async def channel(server: EppServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        yield ch
