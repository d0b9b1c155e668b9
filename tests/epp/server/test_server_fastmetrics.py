"""The fast collectors expose exactly what prometheus_client's Histogram, Counter and Gauge expose."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from epp.server.fastmetrics import FastCounter, FastGauge, FastHistogram

BUCKETS = (0.0, 0.001, 0.5, 1, 8, 1024)


def _pair(labels: tuple[str, ...]) -> tuple[CollectorRegistry, Histogram, CollectorRegistry, FastHistogram]:
    ref_registry, fast_registry = CollectorRegistry(), CollectorRegistry()
    ref = Histogram("h_seconds", "doc", labels, buckets=BUCKETS, registry=ref_registry)
    fast = FastHistogram("h_seconds", "doc", labels, buckets=BUCKETS, registry=fast_registry)
    return ref_registry, ref, fast_registry, fast


def _without_created(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if "_created" not in line]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=30))
def test_unlabelled_exposition_matches_prometheus_client(values: list[float]) -> None:
    ref_registry, ref, fast_registry, fast = _pair(())
    for v in values:
        ref.observe(v)
        fast.observe(v)
    assert _without_created(generate_latest(fast_registry)) == _without_created(generate_latest(ref_registry))


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(-1, 2000)), max_size=30))
def test_labelled_exposition_matches_prometheus_client(values: list[tuple[str, float]]) -> None:
    ref_registry, ref, fast_registry, fast = _pair(("model", "target"))
    for label, v in values:
        ref.labels(label, "t").observe(v)
        fast.labels(label, "t").observe(v)
    assert _without_created(generate_latest(fast_registry)) == _without_created(generate_latest(ref_registry))


def test_bucket_edges_and_sample_values() -> None:
    registry = CollectorRegistry()
    h = FastHistogram("x", "doc", buckets=(1, 2), registry=registry)
    for v in (1.0, 1.5, 2.0, 3.0, math.nan):
        h.observe(v)
    assert registry.get_sample_value("x_bucket", {"le": "1.0"}) == 1
    assert registry.get_sample_value("x_bucket", {"le": "2.0"}) == 3
    assert registry.get_sample_value("x_bucket", {"le": "+Inf"}) == 4
    assert registry.get_sample_value("x_count") == 4
    assert math.isnan(registry.get_sample_value("x_sum") or 0.0)


def test_created_samples_follow_prometheus_client_setting() -> None:
    registry = CollectorRegistry()
    FastHistogram("y", "doc", ("l",), buckets=(1,), registry=registry).labels("v").observe(0.5)
    from prometheus_client import metrics

    expected = getattr(metrics, "_use_created", False)
    assert (registry.get_sample_value("y_created", {"l": "v"}) is not None) == expected


def test_registration_conflicts_and_bad_arguments() -> None:
    registry = CollectorRegistry()
    FastHistogram("z", "doc", buckets=(1,), registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Histogram("z", "doc", registry=registry)
    with pytest.raises(ValueError, match="sorted"):
        FastHistogram("w", "doc", buckets=(2, 1))
    with pytest.raises(ValueError, match="reserved"):
        FastHistogram("w", "doc", ("le",), buckets=(1,))
    labelled = FastHistogram("w", "doc", ("a",), buckets=(1,))
    with pytest.raises(ValueError, match="label values"):
        labelled.labels("1", "2")
    with pytest.raises(ValueError, match="has labels"):
        labelled.observe(1.0)


def _ops() -> st.SearchStrategy[list[tuple[str, str, float]]]:
    op = st.sampled_from(["inc", "dec", "set"])
    return st.lists(st.tuples(op, st.sampled_from(["a", "b"]), st.floats(0, 1e6)), max_size=30)


@given(_ops())
def test_counter_and_gauge_exposition_match_prometheus_client(ops: list[tuple[str, str, float]]) -> None:
    ref_registry, fast_registry = CollectorRegistry(), CollectorRegistry()
    ref_c = Counter("c_requests", "doc", ("model",), registry=ref_registry)
    fast_c = FastCounter("c_requests", "doc", ("model",), registry=fast_registry)
    ref_g = Gauge("g_running", "doc", ("model",), registry=ref_registry)
    fast_g = FastGauge("g_running", "doc", ("model",), registry=fast_registry)
    ref_u, fast_u = (
        Counter("u_total", "doc", registry=ref_registry),
        FastCounter("u_total", "doc", registry=fast_registry),
    )
    for op, label, value in ops:
        if op == "inc":
            ref_c.labels(label).inc(value)
            fast_c.labels(label).inc(value)
            ref_u.inc(value)
            fast_u.inc(value)
        getattr(ref_g.labels(label), op)(value)
        getattr(fast_g.labels(label), op)(value)
    assert _without_created(generate_latest(fast_registry)) == _without_created(generate_latest(ref_registry))
    created = [
        line.split(" ")[0]
        for line in generate_latest(ref_registry).decode().splitlines()
        if "_created" in line
    ]
    fast_created = [
        line.split(" ")[0]
        for line in generate_latest(fast_registry).decode().splitlines()
        if "_created" in line
    ]
    assert fast_created == created


def test_counter_refuses_negative_and_unlabelled_use_of_labelled_collectors() -> None:
    counter = FastCounter("n", "doc")
    with pytest.raises(ValueError, match="non-negative"):
        counter.inc(-1)
    gauge = FastGauge("g", "doc", ("m",))
    with pytest.raises(ValueError, match="has labels"):
        gauge.inc()
    with pytest.raises(ValueError, match="label values"):
        gauge.labels("a", "b")
    registry = CollectorRegistry()
    FastCounter("dup", "doc", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("dup", "doc", registry=registry)


def test_twin_histogram_pair_records_what_two_observes_would() -> None:
    """A histogram family under both names is bound to one recorder that finds the bucket once; every
    bucket, count and sum equals that of a lone child observing the same values (NaN and +Inf included)."""
    from epp.server.metric_catalog import Naming, by_key
    from epp.server.metric_twin import Twin

    registry = CollectorRegistry()
    twin = Twin(by_key("plugin_duration"), Naming.BOTH, registry)
    labels = {"extension_point": "Scorer", "plugin_type": "queue-scorer", "plugin_name": "q"}
    recorder = twin.bind(labels)
    (a, _), (b, _) = twin.parts
    lone = FastHistogram("lone", "d", buckets=a.labels("Scorer", "queue-scorer", "q").bounds[:-1])
    values = [0.0, 1e-7, 0.0001, 0.00025, 0.003, 0.5, 7.0, math.inf, math.nan, 0.0001]
    for v in values:
        recorder.observe(v)
        lone.observe(v)
    reference = lone.labels()
    for collector in (a, b):
        child = collector.labels("Scorer", "queue-scorer", "q")
        assert child.counts == reference.counts and sum(child.counts) == len(values) - 1  # NaN: no bucket
        assert math.isnan(child.total) and math.isnan(reference.total)
    samples = {s.name: s.value for m in registry.collect() for s in m.samples if s.name.endswith("_count")}
    assert set(samples.values()) == {len(values) - 1} and len(samples) == 2


def test_twin_with_the_same_labels_records_one_child_under_both_names() -> None:
    """Both names of a family with the same label names share one child: one update shows under both,
    in the exposition too; binding the label set again gives that same child."""
    from epp.server.metric_catalog import Naming, by_key
    from epp.server.metric_twin import Twin

    registry = CollectorRegistry()
    twin = Twin(by_key("plugin_duration"), Naming.BOTH, registry)
    labels = {"extension_point": "score", "plugin_type": "queue-scorer", "plugin_name": "q"}
    recorder = twin.bind(labels)
    assert twin.bind(labels) is recorder
    (a, _), (b, _) = twin.parts
    assert a.labels("score", "queue-scorer", "q") is b.labels("score", "queue-scorer", "q") is recorder
    recorder.observe(0.002)
    recorder.observe(0.5)
    counts = {s.name: s.value for m in registry.collect() for s in m.samples if s.name.endswith("_count")}
    assert counts == {"llm_d_epp_plugin_duration_seconds_count": 2.0,
                      "inference_extension_plugin_duration_seconds_count": 2.0}  # fmt: skip


def test_twin_with_fewer_labels_under_one_name_keeps_its_own_children() -> None:
    """The deprecated disagg counter lacks the plugin labels: two plugins' series are one series there,
    so the names cannot share a child (each plugin's count stays its own, the old name sums them)."""
    from epp.server.metric_catalog import Naming, by_key
    from epp.server.metric_twin import Twin

    registry = CollectorRegistry()
    twin = Twin(by_key("disagg_decision"), Naming.BOTH, registry)
    common = {"plugin_type": "disagg-profile-handler", "model_name": "m", "decision_type": "decode-only"}
    twin.bind({**common, "plugin_name": "a"}).inc()
    twin.bind({**common, "plugin_name": "b"}).inc()
    new = "llm_d_epp_disagg_decision_total"
    assert registry.get_sample_value(new, {**common, "plugin_name": "a"}) == 1
    assert registry.get_sample_value(new, {**common, "plugin_name": "b"}) == 1
    old = "llm_d_inference_scheduler_disagg_decision_total"
    assert registry.get_sample_value(old, {"model_name": "m", "decision_type": "decode-only"}) == 2


def test_sharing_a_label_set_already_recorded_is_refused() -> None:
    a = FastCounter("a", "d", ["x"])
    b = FastCounter("b", "d", ["x"])
    b.labels("1").inc()
    with pytest.raises(ValueError, match="already recorded"):
        b.share(["1"], a.labels("1"))
