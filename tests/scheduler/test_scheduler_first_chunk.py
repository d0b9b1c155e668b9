"""Scheduler.first_chunk_only: true only when every chunk hook needs just a response's first chunk."""

from __future__ import annotations

from pathlib import Path

from scheduler.config import load_config_text
from scheduler.plugins.latency.producer import PredictedLatencyProducer
from scheduler.plugins.scorers.token_load import TokenLoadScorer
from scheduler.scheduler import Scheduler

PREDICTED = (
    Path(__file__).resolve().parents[2] / "deploy" / "configs" / "predicted-latency.yaml"
).read_text()


def _scheduler(text: str) -> Scheduler:
    return load_config_text(text).build_scheduler()


def test_the_predicted_latency_producer_needs_only_the_first_chunk() -> None:
    assert PredictedLatencyProducer.first_chunk_only is True
    scheduler = _scheduler(PREDICTED)
    assert scheduler.has_chunk_hooks and scheduler.first_chunk_only


def test_a_plugin_that_counts_every_chunk_keeps_every_chunk() -> None:
    assert getattr(TokenLoadScorer, "first_chunk_only", False) is False
    text = PREDICTED.replace(
        "- type: max-score-picker\n", "- type: max-score-picker\n- type: token-load-scorer\n"
    )
    text = text.replace(
        "  - pluginRef: max-score-picker", "  - pluginRef: token-load-scorer\n  - pluginRef: max-score-picker"
    )
    scheduler = _scheduler(text)
    assert scheduler.has_chunk_hooks and not scheduler.first_chunk_only
