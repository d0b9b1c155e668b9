"""Replica sync between real picker processes (``--replica-sync-port``; docs/deploy.md, "Replica sync").

* Two pickers behind one Envoy (ext_proc round-robined over both, as ``epp-bench``'s
  ``picker-default-sync-x2``): every group of prompts stays on one server whichever replica routes it,
  and both replicas hold the same ownership table (the digest ``/debug/plugins/state`` reports).
* One picker attacked on its sync port from a peer's address without the key: forged, replayed, stale,
  garbage, oversized and flooding datagrams are rejected and counted, requests keep being routed, and
  the process's memory stays bounded.
"""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path

import httpx
import pytest
from e2e_lib import MODEL, completion, eventually, long_prefix, metric_sum, running

from bench.routers import ROUTERS, running_router
from devtools.stack import StackSpec, free_ports
from epp.sync.wire import KIND_OWNERS, claim_bytes, encode_owners, seal
from scheduler.replica_sync import OwnershipClaim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _state(metrics_url: str) -> dict[str, object]:
    state = httpx.get(f"{metrics_url}/debug/plugins/state", timeout=5.0).json()
    return dict(state["prefix-affinity-scorer"])


def _metric(metrics_url: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{metrics_url}/metrics", timeout=5.0).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_two_synced_replicas_agree_on_owners(tmp_path: Path) -> None:
    spec = ROUTERS["picker-default-sync-x2"]
    with running_router(spec, servers=4, sim_args=("--profile", "8b-h100", "--time-scale", "20"),
                        model=MODEL, workdir=tmp_path) as router:  # fmt: skip
        assert len(router.replica_metrics_urls) == 2
        served: dict[int, set[str]] = {}
        for k in range(4):
            for g in range(8):
                body = {"model": MODEL, "prompt": f"{long_prefix(f'grp{g}x')} question {k}", "max_tokens": 2}
                response = httpx.post(f"{router.base_url}/v1/completions", json=body, timeout=30.0)
                assert response.status_code == 200, response.text
                served.setdefault(g, set()).add(response.headers["x-inference-port"])
            time.sleep(0.1)
        decided = [
            len(httpx.get(f"{url}/debug/decisions", params={"n": 200}, timeout=5.0).json())
            for url in router.replica_metrics_urls
        ]
        assert all(n >= 8 for n in decided), decided  # both replicas routed a share
        assert all(len(ports) == 1 for ports in served.values()), served  # one server per group
        a, b = router.replica_metrics_urls
        assert eventually(lambda: _state(a)["owners_digest"] == _state(b)["owners_digest"], 5.0)
        assert _state(a)["ownership_entries"] == _state(b)["ownership_entries"] > 0
        for url in (a, b):
            assert _metric(url, "pyepp_replica_sync_claims_applied_total") > 0
            assert _metric(url, "pyepp_replica_sync_datagrams_received_total") > 0
            assert _metric(url, "pyepp_replica_sync_datagrams_rejected_total") == 0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_an_attacked_picker_keeps_routing_with_bounded_memory(tmp_path: Path) -> None:
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    (sync_port,) = free_ports(1)
    key_file = tmp_path / "key"
    key_file.write_text(secrets.token_hex(32))
    peer = f"127.0.0.1:{attacker.getsockname()[1]}"
    args = (
        "--replica-sync-port",
        str(sync_port),
        "--replica-peers",
        peer,
        "--replica-sync-key-file",
        str(key_file),
    )
    target = ("127.0.0.1", sync_port)
    try:
        with running(StackSpec(servers=2, picker_args=args)) as stack:
            assert stack.picker is not None
            assert completion(stack, long_prefix("warm")).status_code == 200
            rss_before = _rss_kib(stack.picker.pid)
            wall = int(time.time() * 1000)
            claim = claim_bytes(OwnershipClaim("127.0.0.1:1", 1, ((1, True),)))
            assert claim is not None
            (payload,) = list(encode_owners("prefix-affinity-scorer", [claim]))
            forged = seal(b"not-the-key-0123456789", KIND_OWNERS, 5, 1, wall, payload)
            attacks = [forged, b"", b"PYRS\x01", b"\xff" * 1400, b"\x00" * 9000, secrets.token_bytes(700)]
            sent = 0
            for round_ in range(20):  # 40,000 datagrams over a few seconds, requests in between
                for chunk in range(10):
                    for i in range(200):
                        attacker.sendto(attacks[(chunk + i) % len(attacks)], target)
                    sent += 200
                    time.sleep(0.001)
                if round_ % 5 == 0:
                    assert completion(stack, long_prefix(f"during{round_}")).status_code == 200
            assert completion(stack, long_prefix("after")).status_code == 200
            rejected = metric_sum(stack, "pyepp_replica_sync_datagrams_rejected_total")
            assert rejected > 1000
            assert metric_sum(stack, "pyepp_replica_sync_datagrams_received_total") == 0
            assert metric_sum(stack, "pyepp_replica_sync_claims_applied_total") == 0
            text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text
            for reason in ("auth", "size", "rate"):
                assert f'pyepp_replica_sync_datagrams_rejected_total{{reason="{reason}"}}' in text, reason
            assert _rss_kib(stack.picker.pid) - rss_before < 32 * 1024  # no growth with the flood
            assert stack.picker.running()
    finally:
        attacker.close()
