"""A slower server through the real Envoy: the default profile learns its speed and holds it to its share.

Three simulated servers, the first at half the others' speed (its engine's clock runs at half the
rate), the picker with no configuration file (the built-in default profile), Envoy with GIE's
configuration. Streamed completions of six prompt groups: ``prefix-affinity-scorer`` measures each
server's decode time per token from the response chunks Envoy streams through the picker, judges the
first server slow, and keeps prefixes off it once it holds more than its capacity share
(docs/scheduler.md, "Slower servers").
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from e2e_lib import completion, long_prefix, running, served_by

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SPEC = StackSpec(
    servers=3,
    sim_args=("--profile", "8b-h100", "--time-scale", "4"),  # ITL 3 ms
    server_args=(("--time-scale", "2"),),  # the first server: ITL 6 ms, prefill twice as long
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running(SPEC) as s:
        yield s


def _affinity_state(stack: Stack) -> dict[str, Any]:
    state = httpx.get(f"{stack.metrics_url}/debug/plugins/state", timeout=5.0).json()
    (found,) = [p for p in state.values() if isinstance(p, dict) and "speeds" in p]
    return found


def test_the_slow_server_is_learnt_and_held_to_its_share(stack: Stack) -> None:
    groups = [long_prefix(f"group{g}", 120) for g in range(6)]
    prompts = [f"{groups[i % 6]} question {i}" for i in range(72)]

    def send(i: int) -> int:
        r = completion(
            stack,
            prompts[i],
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
            request_id=f"slow-{i}",
        )
        assert r.status_code == 200, r.text
        return served_by(r)

    with ThreadPoolExecutor(4) as pool:
        served = list(pool.map(send, range(len(prompts))))
    slow = f"127.0.0.1:{stack.ports.servers[0]}"
    state = _affinity_state(stack)
    speeds = state["speeds"]
    assert speeds["slow"] == [slow], speeds
    assert speeds["relative_speed"][slow] <= 0.65, speeds
    assert all(v > 0.65 for a, v in speeds["relative_speed"].items() if a != slow), speeds
    assert state["diversions"] >= 1, state  # it owned more than its share: a prefix was kept off it
    late = served[len(served) // 2 :]
    share = late.count(stack.ports.servers[0]) / len(late)
    assert share < 1 / 3, (share, state)  # below an even split once it is known to be slow
