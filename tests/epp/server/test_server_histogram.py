"""FastHistogram exposes exactly what prometheus_client's Histogram exposes for the same observations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from epp.server.histogram import FastHistogram

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
