"""The charts' NetworkPolicy (pyepp, on by default), rendered by real Helm: it selects exactly the picker
pods, admits the gateway's pods to the ext_proc port and the monitoring namespace to /metrics (and, in
the standalone chart, clients to the proxy sidecar's listener), names only ports the pod declares,
follows its values, and disappears with ``networkPolicy.enabled: false``; bad values are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import HelmRenderError, Renderer
from _deploy_manifests import by_kind, one, validate_object

CHARTS = Path(__file__).resolve().parents[2] / "deploy" / "helm"
POOL = CHARTS / "inferencepool"
STANDALONE = CHARTS / "standalone"
LABELS = {"app": "vllm-llama3-8b-instruct"}
GATEWAY_LABEL = "gateway.networking.k8s.io/gateway-name"
GATEWAY_PODS = {"matchExpressions": [{"key": GATEWAY_LABEL, "operator": "Exists"}]}
MONITORING = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}


def _values(chart: Path, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((chart / "ci" / "default-values.yaml").read_text())
    values.setdefault("inferencePool", {})["modelServers"] = {"matchLabels": LABELS}
    return {**values, **extra}


def _rules(policy: dict[str, Any]) -> dict[str, list[dict[str, Any]] | None]:
    """Named port -> the rule's peers (None: every source)."""
    out: dict[str, list[dict[str, Any]] | None] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            out[str(port["port"])] = rule.get("from")
    return out


def _pod_ports(objects: list[dict[str, Any]]) -> set[str]:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    return {p["name"] for c in pod["containers"] for p in c.get("ports", []) if "name" in p}


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
def test_default_policy_admits_the_gateway_and_monitoring_only(chart: Path, render: Renderer) -> None:
    objects = render(chart, _values(chart))
    policy = one(objects, "NetworkPolicy")
    validate_object(policy)
    deployment = one(objects, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = _rules(policy)
    assert rules["grpc"] == [{"namespaceSelector": {}, "podSelector": GATEWAY_PODS}]
    assert rules["metrics"] == [{"namespaceSelector": MONITORING, "podSelector": {}}]
    if chart == STANDALONE:  # the Envoy sidecar's listener is open to every client by default
        assert rules == {"http": None, "grpc": rules["grpc"], "metrics": rules["metrics"]}
    else:
        assert set(rules) == {"grpc", "metrics"}  # not the health port: kubelet probes come from the node
    assert set(rules) <= _pod_ports(objects)  # every named port exists in the pod


GATEWAYS = {"matchLabels": {"kubernetes.io/metadata.name": "gateways"}}
NAMED = {"matchExpressions": [{"key": GATEWAY_LABEL, "operator": "In", "values": ["inference-gateway"]}]}


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
@pytest.mark.parametrize(
    ("policy", "grpc", "metrics"),
    [
        (  # one Gateway's pods in one namespace; another monitoring namespace, some of its pods
            {
                "gateway": {"name": "inference-gateway", "namespaceSelector": GATEWAYS},
                "monitoring": {"namespace": "obs", "podSelector": {"matchLabels": {"app": "prometheus"}}},
            },
            {"namespaceSelector": GATEWAYS, "podSelector": NAMED},
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}},
                "podSelector": {"matchLabels": {"app": "prometheus"}},
            },
        ),
        (  # selectors given in full replace the name rules (not merged with them)
            {
                "gateway": {"name": "ignored", "podSelector": {"matchLabels": {"app": "my-proxy"}}},
                "monitoring": {"namespaceSelector": {"matchLabels": {"team": "obs"}}},
            },
            {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "my-proxy"}}},
            {"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {}},
        ),
    ],
)
def test_policy_values_are_rendered(
    chart: Path, policy: dict[str, Any], grpc: dict[str, Any], metrics: dict[str, Any], render: Renderer
) -> None:
    extra = [
        {"from": [{"ipBlock": {"cidr": "10.129.0.0/23"}}], "ports": [{"port": "grpc", "protocol": "TCP"}]}
    ]
    clients = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}}]
    values = {**policy, "extraIngress": extra, **({"clients": clients} if chart == STANDALONE else {})}
    rendered = one(render(chart, _values(chart, networkPolicy=values)), "NetworkPolicy")
    validate_object(rendered)
    ingress = rendered["spec"]["ingress"]
    assert ingress[-1] == extra[0]
    rules = _rules({"spec": {"ingress": ingress[:-1]}})
    assert rules["grpc"] == [grpc]
    assert rules["metrics"] == [metrics]
    if chart == STANDALONE:
        assert rules["http"] == clients


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
def test_the_policy_can_be_turned_off(chart: Path, render: Renderer) -> None:
    assert not by_kind(render(chart, _values(chart, networkPolicy={"enabled": False})), "NetworkPolicy")


def test_standalone_without_a_sidecar_has_no_listener_rule(render: Renderer) -> None:
    values = _values(STANDALONE)
    values.setdefault("inferenceExtension", {})["sidecar"] = {"enabled": False}
    rules = _rules(one(render(STANDALONE, values), "NetworkPolicy"))
    assert set(rules) == {"grpc", "metrics"}


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"enable": False}, "enable"),
        ({"enabled": "no"}, "/networkPolicy/enabled"),
        ({"gateway": {"podSelector": {"matchLabel": {"a": "b"}}}}, "matchLabel"),
        ({"gateway": {"name": 3}}, "/networkPolicy/gateway/name"),
        ({"monitoring": {"namespaceSelector": {"matchLabels": {"a": 1}}}}, "matchLabels"),
        ({"monitoring": {"namespace": ""}}, "/networkPolicy/monitoring/namespace"),
        ({"gateway": {"podSelector": {"matchExpressions": [{"key": "k", "operator": "Is"}]}}}, "operator"),
        ({"extraIngress": {"from": []}}, "extraIngress"),
    ],
)
def test_bad_policy_values_are_refused(
    chart: Path, policy: dict[str, Any], message: str, render: Renderer
) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(chart, _values(chart, networkPolicy=policy))


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
def test_gke_without_proxy_subnets_leaves_the_ext_proc_port_open(chart: Path, render: Renderer) -> None:
    """GKE's managed gateways are not pods: a pod rule would refuse every ext_proc call they make."""
    rules = _rules(one(render(chart, _values(chart, provider={"name": "gke"})), "NetworkPolicy"))
    assert rules["grpc"] is None  # every source
    assert rules["metrics"] == [{"namespaceSelector": MONITORING, "podSelector": {}}]  # still restricted


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
@pytest.mark.parametrize("provider", ["gke", "none"])
def test_proxy_subnets_are_admitted_to_the_ext_proc_port(
    chart: Path, provider: str, render: Renderer
) -> None:
    subnets = ["10.129.0.0/23", "fd00:1::/64"]
    values = _values(chart, provider={"name": provider}, networkPolicy={"proxySubnets": subnets})
    policy = one(render(chart, values), "NetworkPolicy")
    validate_object(policy)
    assert _rules(policy)["grpc"] == [
        {"namespaceSelector": {}, "podSelector": GATEWAY_PODS},
        {"ipBlock": {"cidr": "10.129.0.0/23"}},
        {"ipBlock": {"cidr": "fd00:1::/64"}},
    ]


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=["inferencepool", "standalone"])
def test_a_proxy_subnet_that_is_not_a_cidr_is_refused(chart: Path, render: Renderer) -> None:
    with pytest.raises(HelmRenderError, match="proxySubnets"):
        render(chart, _values(chart, networkPolicy={"proxySubnets": ["10.129.0.0"]}))
