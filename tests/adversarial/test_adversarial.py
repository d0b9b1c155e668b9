"""A real picker per engine under each attack (attacks.py): it lives, its peak resident memory stays under
the baseline (resident memory before the case; the peak is reset first) + 64 MiB (the issue's budget
for one attacking connection with default limits), and a
well-behaved client on another connection gets correct answers throughout, without one error (its p99
is printed). ``EPP_ADVERSARIAL_FULL=1`` runs the issue's full sizes.

The picker runs with shorter settings/idle timeouts than the defaults so that slowloris and idle
connections are ended within the test; every other limit is the default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from attacks import ATTACKS, FULL
from harness import MIB, GoodClient, Picker, peak_rss, reset_peak, rss, start_picker

BUDGET = 64 * MIB

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300 if FULL else 120)]


@pytest.fixture(scope="module", params=["h2", "ngh2", "grpcio"])
def picker(request: pytest.FixtureRequest) -> Iterator[Picker]:
    with start_picker(request.param, "--grpc-h2-settings-timeout=2s", "--grpc-h2-idle-timeout=3s") as p:
        yield p


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_picker_survives_attack_serving_others(picker: Picker, attack: str) -> None:
    assert picker.alive, "the picker died in an earlier case"
    before = rss(picker.proc.pid)  # the baseline of this case (earlier cases may have left memory held)
    reset_peak(picker.proc.pid)
    with GoodClient(picker.port) as good:
        good.wait_for(3)
        asyncio.run(asyncio.wait_for(ATTACKS[attack](picker.port), 60))
        served = len(good.latencies)
        good.wait_for(served + 3)  # still answering after the attack
    peak = peak_rss(picker.proc.pid)
    grown = (peak - before) / MIB
    print(
        f"\n[{picker.engine}] {attack}: alive={picker.alive} peak RSS +{grown:.1f} MiB "
        f"(+{(peak - picker.baseline) / MIB:.1f} MiB over the start), "
        f"good client {len(good.latencies)} ok / {len(good.errors)} errors, p99 {good.p99_ms:.1f} ms"
    )
    assert picker.alive, f"the picker died under {attack}"
    assert good.errors == [], good.errors[:3]
    assert len(good.latencies) >= served + 3, "the well-behaved client stopped getting answers"
    assert peak - before <= BUDGET, f"peak RSS +{grown:.0f} MiB over the baseline"
