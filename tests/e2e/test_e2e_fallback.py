"""End to end with the real picker returning fallbacks (maxNumOfEndpoints: 2) and the override-host config.

The picker puts a primary and a fallback endpoint in ``x-gateway-destination-endpoint``; Envoy's
override-host policy sends to the primary and retries on the fallback. Stopping a server therefore
costs no failed request, even before the picker notices the server is gone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from e2e_lib import completion, decisions, long_prefix, running, served_by

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 2}
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: max-score-picker}
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    spec = StackSpec(
        servers=3,
        sim_args=("--time-scale", "50"),
        picker_args=("--config-text", CONFIG),
        envoy_variant="override-host",
    )
    with running(spec) as s:
        yield s


def _retries(stack: Stack) -> int:
    stats = httpx.get(f"{stack.admin_url}/stats", params={"filter": "model_servers"}, timeout=5.0).text
    m = re.search(r"cluster\.model_servers\.upstream_rq_retry_success: (\d+)", stats)
    return int(m.group(1)) if m else 0


def test_primary_serves_and_fallback_is_listed(stack: Stack) -> None:
    for i in range(6):
        r = completion(stack, long_prefix(f"fb{i}", 40), request_id=f"fallback-{i}")
        assert r.status_code == 200, r.text
        chosen = decisions(stack)[f"fallback-{i}"]
        assert len(chosen) == 2 and chosen[0] != chosen[1]
        assert chosen[0] == f"127.0.0.1:{served_by(r)}"


def test_original_dst_cannot_route_a_list(stack: Stack) -> None:
    """Envoy 1.40: the GIE-style ORIGINAL_DST cluster rejects `ip:port,ip:port` (documented limitation)."""
    stack.start_envoy("gie-fail-closed")
    try:
        r = completion(stack, "two endpoints in the header")
        assert r.status_code == 503
        assert "no healthy upstream" in r.text
    finally:
        stack.start_envoy("override-host")


def test_stopping_a_server_fails_no_request(stack: Stack) -> None:
    """Runs last: stops server 0. Requests the picker still routes there are retried on the fallback."""
    stack.stop_server(0)
    dead = stack.ports.servers[0]
    before = _retries(stack)
    statuses, ports = [], []
    for i in range(20):
        r = completion(stack, long_prefix(f"gone{i}", 40))
        statuses.append(r.status_code)
        if r.status_code == 200:
            ports.append(served_by(r))
    assert statuses == [200] * 20, (statuses, stack.logs())
    assert dead not in ports
    print(f"requests retried on the fallback endpoint: {_retries(stack) - before}")
