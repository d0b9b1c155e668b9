"""Flow control in the running server (both gRPC engines): a queued stream waits, is routed when
capacity frees, and every other outcome reaches the client (or the metrics) on its own path."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import grpc
import orjson
import pytest
from prometheus_client import CollectorRegistry

from epp.admission import Admitter
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.metrics import FlowMetrics
from epp.protocol import SessionConfig
from epp.server.metric_catalog import Naming, by_key
from epp.server.metric_twin import Twin
from epp.server.metrics import RequestMetrics
from epp.server.server import EppServer, ServerSettings
from scheduler.types import Completion, LLMRequest, SchedulingResult
from tests.epp.flowcontrol.fc_fakes import FC_KEYS, Detector, fc_config
from tests.epp.server.srv_helpers import (
    BODY_JSON,
    FakeScheduler,
    StaticSource,
    destination,
    request_body,
    request_headers,
    response_body,
    response_headers,
    stub,
)

ENGINES = ["grpcio", "h2", "ngh2"]
PRIORITIES = {"critical": 10, "batch": -1}


class CountingScheduler(FakeScheduler):
    """Feeds the fake detector's in-flight count from the dispatch / completion hooks."""

    def __init__(self, detector: Detector) -> None:
        super().__init__()
        self.detector = detector

    def dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        super().dispatched(request, result)
        self.detector.inflight += 1

    def completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        super().completed(request, result, completion)
        self.detector.inflight -= 1


class Harness:
    def __init__(self, engine: str, section: Mapping[str, object] | None = None, limit: int = 1) -> None:
        self.registry = CollectorRegistry()
        self.detector = Detector(limit=limit)
        self.scheduler = CountingScheduler(self.detector)
        twins = {k: Twin(by_key(k), Naming.BOTH, self.registry) for k in FC_KEYS}
        source = StaticSource()
        self.flow = FlowController(
            fc_config(dict(section or {})),
            self.detector,
            source.snapshot,
            recorder=FlowMetrics(twins, "pool"),
        )
        self.server = EppServer(
            ServerSettings(host="127.0.0.1", grpc_port=0, grpc_health_port=0, metrics_port=0, engine=engine),
            source=source,
            admitter=Admitter(None, lambda: 1.0),
            scheduler=self.scheduler,
            session_config=SessionConfig(priority_of=lambda name: PRIORITIES.get(name or "", 0)),
            registry=self.registry,
            request_metrics=RequestMetrics(self.registry),
            flow=self.flow,
        )

    def outcomes(self, outcome: str, priority: str = "0") -> float:
        labels = {"outcome": outcome, "priority": priority, "inference_pool": "pool"}
        return self.registry.get_sample_value("llm_d_epp_flow_control_requests_total", labels) or 0.0


async def send(
    ch: grpc.aio.Channel, rid: str, objective: str = "", tenant: str = ""
) -> grpc.aio.StreamStreamCall:
    headers = {"x-request-id": rid}
    if objective:
        headers["x-gateway-inference-objective"] = objective
    if tenant:
        headers["x-gateway-inference-fairness-id"] = tenant
    call = stub(ch).Process()
    await call.write(request_headers(headers))
    await call.write(request_body(BODY_JSON))
    return call


async def finish(call: grpc.aio.StreamStreamCall) -> None:
    """Play the upstream's response, so the dispatch completes."""
    await call.write(response_headers(200))
    await call.write(response_body(b'{"usage": {"completion_tokens": 1}}'))
    while (await call.read()) is not grpc.aio.EOF:
        pass


async def routed(call: grpc.aio.StreamStreamCall, timeout: float = 3.0) -> str:
    return destination(await asyncio.wait_for(call.read(), timeout))[0]


async def eventually(check, timeout: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("engine", ENGINES)
async def test_queued_then_routed_when_capacity_frees(engine: str) -> None:
    h = Harness(engine)
    await h.server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{h.server.grpc_port}") as ch:
            first = await send(ch, "r1")
            assert await routed(first) == "10.0.0.1:8000"
            second = await send(ch, "r2")
            await eventually(lambda: len(h.flow.queues) == 1)
            assert [c for c in h.scheduler.calls if c[1] == "r2"] == []  # not scheduled while queued
            await finish(first)
            assert await routed(second) == "10.0.0.1:8000"
            assert len(h.flow.queues) == 0 and h.outcomes("Dispatched") == 2
            await finish(second)
    finally:
        await h.server.shutdown(grace=0)


@pytest.mark.parametrize("engine", ENGINES)
async def test_priority_bands_and_capacity_rejection(engine: str) -> None:
    h = Harness(engine, {"defaultNegativePriorityBand": {"maxRequests": 1}})
    await h.server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{h.server.grpc_port}") as ch:
            first = await send(ch, "r1")
            await routed(first)
            batch = await send(ch, "batch1", objective="batch")
            await eventually(lambda: len(h.flow.queues) == 1)
            crit = await send(ch, "crit", objective="critical")
            await eventually(lambda: len(h.flow.queues) == 2)
            over = await send(ch, "batch2", objective="batch")  # the sheddable band holds one
            answer = await asyncio.wait_for(over.read(), 3)
            immediate = answer.immediate_response
            assert immediate.status.code == 429
            error = orjson.loads(immediate.body)["error"]
            assert "priority band -1 is full (maxRequests 1)" in error["message"]
            assert h.outcomes("RejectedCapacity", "-1") == 1
            await finish(first)
            assert await routed(crit)  # the critical band goes first
            assert [c for c in h.scheduler.calls if c[1] == "batch1"] == []
            await finish(crit)
            assert await routed(batch)
            await finish(batch)
    finally:
        await h.server.shutdown(grace=0)


@pytest.mark.parametrize("engine", ENGINES)
async def test_client_gone_while_queued(engine: str) -> None:
    h = Harness(engine)
    await h.server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{h.server.grpc_port}") as ch:
            first = await send(ch, "r1")
            await routed(first)
            gone = await send(ch, "gone")
            await eventually(lambda: len(h.flow.queues) == 1)
            gone.cancel()
            await eventually(lambda: len(h.flow.queues) == 0)
            assert h.outcomes("EvictedContextCancelled") == 1
            await finish(first)
            await asyncio.sleep(0.1)
            assert [c for c in h.scheduler.calls if c[1] == "gone"] == []  # never scheduled
    finally:
        await h.server.shutdown(grace=0)


@pytest.mark.parametrize("engine", ENGINES)
async def test_ttl_expiry_answers_503(engine: str) -> None:
    h = Harness(engine, {"defaultRequestTTL": "200ms"})
    await h.server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{h.server.grpc_port}") as ch:
            first = await send(ch, "r1")
            await routed(first)
            late = await send(ch, "late")
            answer = await asyncio.wait_for(late.read(), 3)
            assert answer.immediate_response.status.code == 503
            assert (
                "timed out in queue after 0.2s"
                in orjson.loads(answer.immediate_response.body)["error"]["message"]
            )
            assert h.outcomes("EvictedTTL") == 1 and len(h.flow.queues) == 0
    finally:
        await h.server.shutdown(grace=0)


@pytest.mark.parametrize("engine", ENGINES)
async def test_shutdown_answers_queued_requests_503(engine: str) -> None:
    h = Harness(engine)
    await h.server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{h.server.grpc_port}") as ch:
        first = await send(ch, "r1")
        await routed(first)
        queued = await send(ch, "queued")
        await eventually(lambda: len(h.flow.queues) == 1)
        stopping = asyncio.ensure_future(h.server.shutdown(grace=1))
        answer = await asyncio.wait_for(queued.read(), 3)
        assert answer.immediate_response.status.code == 503
        assert "shutting down" in orjson.loads(answer.immediate_response.body)["error"]["message"]
        assert h.outcomes("EvictedOther") == 1
        first.cancel()
        await stopping
