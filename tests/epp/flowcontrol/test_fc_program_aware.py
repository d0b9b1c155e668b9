"""``program-aware-fairness`` in the flow-control core: upstream's sample configuration loads and
resolves, the real queues dispatch by least attained service under a fake clock (properties), the
controller hands the policy each request's enqueue time, and the gauges reach a Prometheus scrape."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epp.config.sections import check_config, load_picker_config
from epp.flowcontrol.config import parse_flow_control, resolve_flow_control
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.queues import FlowQueues, Item
from epp.server.metric_catalog import Naming
from epp.server.metrics import SchedulerMetrics
from epp.server.server import plugin_states
from scheduler.plugins.flowcontrol.ordering import FcfsOrdering
from scheduler.plugins.flowcontrol.program_aware import ProgramAwareFairness, ProgramAwareParams
from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult, Usage
from tests.epp.flowcontrol.fc_fakes import Detector, request

CORPUS = Path(__file__).resolve().parents[2] / "compat" / "corpus" / "llm-d-router"
SAMPLE = CORPUS / "deploy.config.sim-program-aware-config.yaml"
RESULT = SchedulingResult("default", (), {})
FLOWS = st.sampled_from(["a", "b", "c", "d"])
TOKENS = st.integers(0, 200)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def policy(clock: Clock, **kw: float) -> ProgramAwareFairness:
    return ProgramAwareFairness("paf", ProgramAwareParams(**kw), clock)  # type: ignore[arg-type]


def queues_with(plugin: ProgramAwareFairness) -> FlowQueues:
    section = parse_flow_control({"defaultPriorityBand": {"fairnessPolicyRef": "paf"}})
    plugins = {"paf": plugin, "fcfs": FcfsOrdering("fcfs")}
    return FlowQueues(resolve_flow_control(section, "llm-d.ai/v1alpha1", plugins.__getitem__, ("paf",)))


def usage(prompt: int, completion: int) -> Completion:
    return Completion(Outcome.OK, 200, usage=Usage(prompt, completion, prompt + completion))


# ---------------------------------------------------------------- configuration


def test_upstreams_sample_configuration_loads_with_the_policy_on_the_default_band() -> None:
    loaded = load_picker_config(None, SAMPLE.read_text(), source=str(SAMPLE))
    flow = loaded.flow_control
    assert flow is not None
    fairness = flow.band(0).fairness
    assert isinstance(fairness, ProgramAwareFairness)
    assert fairness is loaded.config.plugin("program-aware-fairness")  # one instance: policy and hooks
    assert fairness.params == ProgramAwareParams()


def test_check_config_renders_the_parameters_and_the_reference() -> None:
    text = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n"
        "plugins:\n- type: max-score-picker\n- type: queue-scorer\n"
        "- {type: program-aware-fairness, name: paf,\n"
        "   parameters: {lasHalfLifeSeconds: 5, lasWeightHeadWait: 0}}\n"
        "flowControl: {defaultPriorityBand: {fairnessPolicyRef: paf}}\n"
    )
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        assert check_config(["-"], stdout=out, stderr=err) == 0, err.getvalue()
    finally:
        sys.stdin = stdin
    rendered = yaml.safe_load(out.getvalue())
    (paf,) = [p for p in rendered["plugins"] if p.get("name") == "paf"]
    assert paf["parameters"] == {
        "strategy": "las",
        "lasWeightService": 0.8,
        "lasWeightHeadWait": 0.0,
        "lasHalfLifeSeconds": 5.0,
        "evictionTtlSeconds": 3600.0,
        "evictionSweepSeconds": 300.0,
    }
    assert rendered["flowControl"]["defaultPriorityBand"]["fairnessPolicyRef"] == "paf"


# ---------------------------------------------------------------- the real queues, under a fake clock


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        FLOWS, st.tuples(st.integers(1, 8), st.integers(0, 200), st.integers(0, 200)), min_size=2
    ),
    st.data(),
)
def test_backlogged_programs_stay_within_one_request_of_equal_service(
    programs: dict[str, tuple[int, int, int]], data: st.DataObject
) -> None:
    """Service-only LAS without decay: while every program has requests queued, the one with the least
    attained service goes next, so service differences stay within the largest request's cost."""
    clock = Clock()
    plugin = policy(clock, las_weight_service=1.0, las_weight_head_wait=0.0, las_half_life_seconds=0.0)
    queues = queues_with(plugin)
    cost = {p: prompt + 2 * out for p, (_, prompt, out) in programs.items()}
    remaining = {p: count for p, (count, _, _) in programs.items()}
    for program, count in remaining.items():
        for i in range(count):
            queues.push(0, program, 1, clock.t, float("inf"), None, f"{program}{i}")
            clock.t += data.draw(st.floats(0, 0.1))
    served = dict.fromkeys(programs, 0.0)
    while all(remaining.values()):
        item = queues.pop_next(lambda _: True)
        assert item is not None
        assert served[item.fairness_id] == min(served.values())  # the least served program went
        remaining[item.fairness_id] -= 1
        req = LLMRequest(
            request_id=item.request_id, model="m", target_model="m", fairness_id=item.fairness_id
        )
        plugin.on_dispatched(req, RESULT)
        plugin.on_completed(req, RESULT, usage(*programs[item.fairness_id][1:]))
        served[item.fairness_id] += cost[item.fairness_id]
        assert max(served.values()) - min(served.values()) <= max(cost.values())
        clock.t += data.draw(st.floats(0, 0.5))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(FLOWS, st.floats(0, 2)), min_size=1, max_size=40))
def test_every_queued_request_is_dispatched_once_in_flow_order(arrivals: list[tuple[str, float]]) -> None:
    """Whatever the weights pick, each flow stays FCFS and nothing is lost or served twice."""
    clock = Clock()
    plugin = policy(clock)
    queues = queues_with(plugin)
    pushed: list[Item] = []
    for i, (program, gap) in enumerate(arrivals):
        clock.t += gap
        pushed.append(queues.push(0, program, 1, clock.t, float("inf"), None, str(i)))
    clock.t += 1
    out: list[Item] = []
    while (item := queues.pop_next(lambda _: True)) is not None:
        out.append(item)
        req = LLMRequest(
            request_id=item.request_id, model="m", target_model="m", fairness_id=item.fairness_id
        )
        plugin.on_dispatched(req, RESULT)
        plugin.on_completed(req, RESULT, usage(10, 10))
        clock.t += 0.01
    assert sorted(i.seq for i in out) == [i.seq for i in pushed]
    for program in {p for p, _ in arrivals}:
        seqs = [i.seq for i in out if i.fairness_id == program]
        assert seqs == sorted(seqs)
    assert sum(p.dispatched for p in plugin.programs.values()) == len(arrivals)
    assert all(p.wait_count == p.dispatched for p in plugin.programs.values())


def test_a_returning_idle_program_competes_again_after_decay() -> None:
    for half_life, first in ((1.0, "heavy"), (0.0, "light")):
        clock = Clock()
        plugin = policy(
            clock, las_weight_service=1.0, las_weight_head_wait=0.0, las_half_life_seconds=half_life
        )
        queues = queues_with(plugin)
        heavy, light = request("h", fairness="heavy"), request("l", fairness="light")
        plugin.on_dispatched(heavy, RESULT)
        plugin.on_completed(heavy, RESULT, usage(1000, 0))
        clock.t += 10  # heavy idles ten half-lives (its 1000 decays to ~1), then light completes 10
        plugin.on_dispatched(light, RESULT)
        plugin.on_completed(light, RESULT, usage(10, 0))
        queues.push(0, "light", 1, clock.t, float("inf"), None, "l2")
        queues.push(0, "heavy", 1, clock.t, float("inf"), None, "h2")
        item = queues.pop_next(lambda _: True)
        assert item is not None and item.fairness_id == first, half_life


async def test_the_controller_hands_the_policy_each_requests_queue_wait() -> None:
    clock = Clock()
    plugin = policy(clock)
    section = parse_flow_control({"defaultPriorityBand": {"fairnessPolicyRef": "paf"}})
    plugins = {"paf": plugin}
    config = resolve_flow_control(section, "llm-d.ai/v1alpha1", plugins.__getitem__, ("paf",))
    detector = Detector(level=1.0)
    controller = FlowController(config, detector, lambda: (), clock)
    req = request("r1", fairness="tenant")
    ticket = controller.offer(req, lambda: plugin.on_dispatched(req, RESULT))
    assert ticket is not None
    clock.t += 0.25
    detector.level = 0.0
    controller.kick()
    assert await asyncio.wait_for(controller.wait(ticket), 1) is None
    program = plugin.programs["tenant"]
    assert (program.dispatched, program.wait_count, program.avg_wait_ms) == (1, 1, 250.0)
    controller.close()


# ---------------------------------------------------------------- metrics


def scrape(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(registry).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
        if f.name.startswith("llm_d_epp_program_aware")
    }


def test_gauges_are_exported_with_upstreams_names_and_labels() -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    assert scrape(registry) == {
        "llm_d_epp_program_aware_attained_service_tokens": [],
        "llm_d_epp_program_aware_avg_wait_time_milliseconds": [],
        "llm_d_epp_program_aware_jains_fairness_index": [],
    }
    clock = Clock()
    plugin = policy(clock, las_half_life_seconds=0.0)
    plugin.bind_metrics(metrics)
    queues = queues_with(plugin)
    queues.push(0, "t1", 1, clock.t - 0.0105, float("inf"), None, "r1")
    queues.push(0, "t2", 1, clock.t - 0.0305, float("inf"), None, "r2")
    for _ in range(2):
        item = queues.pop_next(lambda _: True)
        assert item is not None
        plugin.on_dispatched(request(item.request_id, fairness=item.fairness_id), RESULT)
    plugin.on_completed(request("r1", fairness="t1"), RESULT, usage(100, 50))
    queues.push(0, "t1", 1, clock.t, float("inf"), None, "r3")
    queues.pop_next(lambda _: True)  # a pick after both waits: the index covers them
    got = scrape(registry)
    assert got["llm_d_epp_program_aware_attained_service_tokens"] == [({"program_id": "t1"}, 200.0)]
    waits = {
        labels["program_id"]: v for labels, v in got["llm_d_epp_program_aware_avg_wait_time_milliseconds"]
    }
    assert waits == {"t1": 10.0, "t2": 30.0}
    assert got["llm_d_epp_program_aware_jains_fairness_index"] == [({}, 40.0**2 / (2 * (10.0**2 + 30.0**2)))]
    clean = CollectorRegistry()
    policy(clock).bind_metrics(SchedulerMetrics(clean, naming=Naming.INFERENCE))
    assert scrape(clean) == {}  # llm-d names only: nothing under --metrics-naming inference


def test_the_picker_wires_the_declared_policy_into_its_hooks_and_metrics() -> None:
    """As epp/app.py builds it: the scheduler's dispatch and completion hooks reach the same instance
    the band uses, and the scheduler metrics export it."""
    loaded = load_picker_config(None, SAMPLE.read_text(), source=str(SAMPLE))
    registry = CollectorRegistry()
    scheduler = loaded.config.build_scheduler(observer=SchedulerMetrics(registry))
    assert loaded.flow_control is not None
    fairness = loaded.flow_control.band(0).fairness
    assert isinstance(fairness, ProgramAwareFairness)
    req = request("r1", fairness="tenant-a")
    scheduler.dispatched(req, RESULT)
    scheduler.completed(req, RESULT, usage(30, 10))
    assert fairness.programs["tenant-a"].dispatched == 1
    got = scrape(registry)
    assert got["llm_d_epp_program_aware_attained_service_tokens"] == [({"program_id": "tenant-a"}, 50.0)]
    assert got["llm_d_epp_program_aware_avg_wait_time_milliseconds"] == [({"program_id": "tenant-a"}, 0.0)]
    states = plugin_states(scheduler.plugins)  # /debug/plugins/state
    assert states["program-aware-fairness"] == {"totalPrograms": 1, "totalInFlight": 0, "fairnessIndex": 1.0}
