"""The online latency model: learns a known function, stays bounded, predicts nothing while cold."""

from __future__ import annotations

import random

from scheduler.plugins.latency.model import (
    BUFFER_LIMIT,
    ENDPOINT_LIMIT,
    MIN_ENDPOINT_SAMPLES,
    MIN_SAMPLES,
    RIDGE,
    TTFT_FEATURES,
    Features,
    LatencyModel,
    RidgeStats,
)

SPEED = {"fast:1": 1.0, "slow:1": 3.0}


def truth(endpoint: str, f: Features) -> tuple[float, float]:
    """A heterogeneous fleet: prefill cost per uncached token, queueing, decode slowing with batch."""
    s = SPEED[endpoint]
    ttft = s * (20.0 + 0.4 * f.uncached_tokens + 0.1 * f.prefill_tokens_in_flight + 15.0 * f.waiting)
    tpot = s * (8.0 + 1.5 * f.running + 10.0 * f.kv_usage)
    return ttft, tpot


def sample(rng: random.Random) -> Features:
    prompt = rng.randint(100, 4000)
    return Features(
        input_tokens=prompt,
        uncached_tokens=int(prompt * rng.random()),
        prefill_tokens_in_flight=rng.randint(0, 8000),
        waiting=rng.randint(0, 6),
        running=rng.randint(0, 30),
        kv_usage=rng.random(),
    )


def test_solves_ridge_exactly_on_noiseless_data() -> None:
    stats = RidgeStats(3)
    for x1 in range(10):
        for x2 in range(10):
            stats.add((1.0, float(x1), float(x2)), 2.0 + 3.0 * x1 - 1.0 * x2)
    w = stats.solve(1e-9)
    assert [round(v, 4) for v in w] == [2.0, 3.0, -1.0]


def test_learns_a_heterogeneous_fleet_within_ten_percent_after_2000_samples() -> None:
    rng = random.Random(5)
    model = LatencyModel()
    for i in range(2000):
        endpoint = "fast:1" if i % 2 else "slow:1"
        f = sample(rng)
        ttft, tpot = truth(endpoint, f)
        model.observe(endpoint, f, ttft * rng.uniform(0.95, 1.05), tpot * rng.uniform(0.95, 1.05))
        if i % 100 == 99:
            model.refit()
    errors_ttft, errors_tpot = [], []
    for i in range(400):
        endpoint = "fast:1" if i % 2 else "slow:1"
        f = sample(rng)
        predicted = model.predict(endpoint, f)
        assert predicted is not None
        ttft, tpot = truth(endpoint, f)
        errors_ttft.append(abs(predicted[0] - ttft) / ttft)
        errors_tpot.append(abs(predicted[1] - tpot) / tpot)
    assert sorted(errors_ttft)[200] < 0.10
    assert sorted(errors_tpot)[200] < 0.10
    mape = model.median_ape()
    assert mape is not None and mape < 0.10
    assert model.state()["ttftMedianAbsPctError"] == round(mape, 4)
    assert model.state()["ttftErrorSamples"] == 256  # the bounded window, full after 1000 samples
    # the slow endpoint is predicted about 3x the fast one for the same request
    f = sample(rng)
    fast, slow = model.predict("fast:1", f), model.predict("slow:1", f)
    assert fast is not None and slow is not None
    assert 2.4 < slow[0] / fast[0] < 3.6


def test_cold_start_predicts_nothing_until_min_samples() -> None:
    rng = random.Random(1)
    model = LatencyModel()
    for _ in range(MIN_SAMPLES - 1):
        model.observe("fast:1", sample(rng), 10.0, None)
    model.refit()
    assert not model.ready and model.predict("fast:1", sample(rng)) is None
    model.observe("fast:1", sample(rng), 10.0, None)
    assert model.predict("fast:1", sample(rng)) is None  # not refit yet: observe never trains
    model.refit()
    assert model.ready
    predicted = model.predict("fast:1", sample(rng))
    assert predicted is not None and predicted[1] == 0.0  # no TPOT samples yet


def test_buffer_and_endpoint_models_are_bounded() -> None:
    rng = random.Random(2)
    model = LatencyModel()
    f = sample(rng)
    for _ in range(BUFFER_LIMIT + 10):
        model.observe("fast:1", f, 1.0, 1.0)
    assert model.pending == BUFFER_LIMIT and model.dropped == 10
    model.refit()
    for i in range(ENDPOINT_LIMIT + 50):
        for _ in range(MIN_ENDPOINT_SAMPLES):
            model.observe(f"10.0.{i // 250}.{i % 250}:8000", f, 1.0, None)
        if i % 200 == 0:
            model.refit()
    model.refit()
    assert len(model._endpoints) == ENDPOINT_LIMIT
    assert len(model._weights.endpoint_ttft) == ENDPOINT_LIMIT  # evicted endpoints' weights go too
    first = "10.0.4.10:8000"
    assert first in model._weights.endpoint_ttft
    model.forget_endpoints(frozenset({first}))
    model.observe("fast:1", f, 1.0, None)
    model.refit()
    assert first not in model._endpoints and first not in model._weights.endpoint_ttft
    state = model.state()
    assert state["ready"] and state["droppedSamples"] == 10 and state["pendingSamples"] == 0


def test_relative_weighting_keeps_cache_hits_within_their_own_scale() -> None:
    """TTFT convex in the uncached tokens (no linear model fits it all): the relative-error fit keeps
    the short, cached requests' error a fraction of what plain least squares leaves them (which serves
    the long prefills and predicts the short ones near 0)."""
    rng = random.Random(3)
    model, plain = LatencyModel(), RidgeStats(len(TTFT_FEATURES))

    def ttft(uncached: int) -> float:
        return 20.0 + 0.02 * uncached + 0.00002 * uncached * uncached

    for i in range(600):
        f = Features(7000, rng.randint(50, 400) if i % 2 else rng.randint(3000, 7000), 0, 0, 0, 0.2)
        model.observe("a:1", f, ttft(f.uncached_tokens), None)
        plain.add(f.ttft_vector(), ttft(f.uncached_tokens))
        if i % 50 == 49:
            model.refit()
    w_plain = plain.solve(RIDGE)
    weighted, unweighted = [], []
    for uncached in range(50, 400, 10):
        f = Features(7000, uncached, 0, 0, 0, 0.2)
        predicted = model.predict("a:1", f)
        assert predicted is not None
        truth_ms = ttft(uncached)
        weighted.append(abs(predicted[0] - truth_ms) / truth_ms)
        plain_ms = max(0.0, sum(a * b for a, b in zip(w_plain, f.ttft_vector(), strict=True)))
        unweighted.append(abs(plain_ms - truth_ms) / truth_ms)
    median = len(weighted) // 2
    assert sorted(weighted)[median] < 0.35
    assert sorted(weighted)[median] < sorted(unweighted)[median] / 3


def test_prefill_prior_predicts_queueing_before_any_queued_sample() -> None:
    """Trained only on requests with nothing ahead of them, the model still charges work queued ahead
    at the per-token cost it learnt from the requests' own uncached tokens."""
    rng = random.Random(4)
    model = LatencyModel()
    for _ in range(MIN_SAMPLES):
        uncached = rng.randint(100, 7000)
        model.observe("a:1", Features(7000, uncached, 0, 0, 0, 0.2), 30.0 + 0.06 * uncached, None)
    model.refit()
    predicted = model.predict("a:1", Features(7000, 300, 6800, 0, 1, 0.2))
    assert predicted is not None
    assert 0.8 < predicted[0] / (30.0 + 0.06 * 7100) < 1.2
