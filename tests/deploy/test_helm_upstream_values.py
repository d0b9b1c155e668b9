"""The inferencepool chart's values from GIE's chart (its last commit with the EPP), rendered by real Helm:
each renders what GIE's templates render, and ``values.schema.json`` rejects unknown keys and wrong types.

``ci/gie-values.yaml`` sets every GIE section at once (gke provider, HTTPRoute, sidecar, volumes, metrics
data source, parser, targetPortNumber); ``ci/gie-standalone-values.yaml`` is GIE's endpointsServer mode.
Both are also rendered and validated by test_helm_charts.py (objects, picker flags, plugin configs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import NAMESPACE, HelmRenderError, Renderer
from _deploy_manifests import by_kind, one, validate_object

from epp.config.options import parse_options

POOL = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "inferencepool"
STANDALONE = POOL.parent / "standalone"
GIE_DEFAULTS = Path(__file__).with_name("upstream") / "gie-inferencepool-values.yaml"


def gie_defaults() -> dict[str, Any]:
    """GIE's own default values plus the one value it requires."""
    values: dict[str, Any] = yaml.safe_load(GIE_DEFAULTS.read_text())
    values["inferencePool"]["modelServers"] = {"matchLabels": LABELS}
    return values


def key_paths(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict) and value:
        return [p for key, sub in value.items() for p in key_paths(sub, f"{path}.{key}" if path else key)]
    return [path]


LABELS = {"app": "vllm-llama3-8b-instruct"}


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((POOL / "ci" / name).read_text())
    return loaded


def base(**values: Any) -> dict[str, Any]:
    pool = {"modelServers": {"matchLabels": LABELS}, **values.pop("inferencePool", {})}
    return {"inferencePool": pool, **values}


def epp_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (epp,) = [c for c in pod["containers"] if c["name"] == "epp"]
    return epp


REJECTED = [
    (base(inferenceExtension={"replica": 2}), "additional properties 'replica' not allowed|'replica'"),
    (base(inferencePool={"modelServerTyp": "vllm"}), "modelServerTyp"),
    (base(experimentalHttpRoute={"enable": True}), "enable"),
    (base(provider={"gke": {"autoPilot": True}}), "autoPilot"),
    (base(inferenceExtension={"replicas": "two"}), "/inferenceExtension/replicas"),
    (base(inferenceExtension={"metricsDataSource": {"insecureSkipVerify": "yes"}}), "insecureSkipVerify"),
    (base(experimentalHttpRoute={"enabled": "true"}), "/experimentalHttpRoute/enabled"),
    (base(inferencePool={"modelServerProtocol": "tcp"}), "/inferencePool/modelServerProtocol"),
    (base(inferencePool={"modelServerProtocol": "grpc"}), "needs GIE's vllmgrpc-parser"),
    (base(inferencePool={"parser": "vllmgrpc-parser"}), "inferencePool.parser"),
    (base(inferenceExtension={"sidecar": {"enabled": True, "name": "p"}}), "sidecar: name and image"),
    (
        base(inferenceExtension={"endpointsServer": {"createInferencePool": False, "targetPorts": [8000]}}),
        "endpointSelector is required",
    ),
    (
        base(inferenceExtension={"endpointsServer": {"endpointSelector": "a=b", "targetPorts": "80x"}}),
        "endpointsServer.targetPorts",
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _render_up_front(render: Renderer) -> None:
    jobs = [(POOL, load(name), "pool") for name in ("gie-values.yaml", "gie-standalone-values.yaml")]
    jobs += [(POOL, values, "pool") for values, _ in REJECTED]
    jobs.append((POOL, gie_defaults(), "pool"))
    jobs += [(STANDALONE, values, "pool") for values, _ in STANDALONE_REJECTED]
    render.prefetch(jobs)


STANDALONE_REJECTED = [
    (base(envoy={"logLevl": "info"}), "logLevl"),
    (base(service={"port": "eighty"}), "/service/port"),
    (base(inferenceExtension={"sidecar": {"presets": {"envoy": {"imag": "e"}}}}), "imag"),
]


@pytest.mark.parametrize(("values", "message"), STANDALONE_REJECTED)
def test_standalone_schema_rejects_unknown_keys_and_wrong_types(
    values: dict[str, Any], message: str, render: Renderer
) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(STANDALONE, values)


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=lambda p: p.name)
def test_schema_is_draft_07_and_closed(chart: Path) -> None:
    schema = json.loads((chart / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["additionalProperties"] is False
    values = yaml.safe_load((chart / "values.yaml").read_text())

    def closed(node: dict[str, Any], value: Any, path: str) -> None:  # every default key is declared
        if not isinstance(value, dict) or node.get("additionalProperties") is not False:
            return
        for key, sub in value.items():
            assert key in node["properties"], f"{path}.{key} missing from values.schema.json"
            closed(node["properties"][key], sub, f"{path}.{key}")

    closed(schema, values, "")


@pytest.mark.parametrize(("values", "message"), REJECTED)
def test_misspelled_keys_wrong_types_and_unsupported_values_fail(
    values: dict[str, Any], message: str, render: Renderer
) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(POOL, values)


def test_gie_values_render_as_gie(render: Renderer) -> None:
    objects = render(POOL, load("gie-values.yaml"))
    epp = epp_container(objects)
    args = epp["args"]
    # metricsDataSource -> the scrape flags; flags.v; parsed by the picker's own parser
    assert "--model-server-metrics-scheme=https" in args
    assert "--model-server-metrics-path=/custom/metrics" in args
    assert "--model-server-metrics-https-insecure-skip-verify=false" in args
    options = parse_options(args, env={"NAMESPACE": NAMESPACE})
    assert options.model_server_metrics_scheme == "https" and options.verbosity == 3
    assert not options.model_server_metrics_https_insecure_skip_verify
    # volumes / volumeMounts
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "extra-config", "mountPath": "/extra", "readOnly": True} in epp["volumeMounts"]
    assert {"name": "extra-config", "configMap": {"name": "extra-config"}} in pod["volumes"]
    # sidecar: its container first, its volumes through tpl, its ConfigMap
    sidecar = pod["containers"][0]
    assert sidecar["name"] == "proxy" and sidecar["image"] == "envoyproxy/envoy:v1.36.0"
    assert sidecar["args"] == ["--log-level", "info"]
    assert sidecar["imagePullPolicy"] == "IfNotPresent"
    assert sidecar["volumeMounts"] == [{"name": "proxy-config", "mountPath": "/etc/proxy"}]
    assert {"name": "proxy-config", "configMap": {"name": "pool-proxy"}} in pod["volumes"]
    proxy_cm = next(c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"] == "pool-proxy")
    assert proxy_cm["data"] == {"proxy.yaml": "admin: {}"}
    # metricsPort: the Service's http-metrics port
    ports = {p["name"]: p["port"] for p in one(objects, "Service")["spec"]["ports"]}
    assert ports["http-metrics"] == 9091
    # inferencePool: targetPortNumber, appProtocol; parser in the default configuration
    pool = one(objects, "InferencePool")
    assert pool["spec"]["targetPorts"] == [{"number": 8001}] and pool["spec"]["appProtocol"] == "http"
    config = next(c for c in by_kind(objects, "ConfigMap") if "default-plugins.yaml" in c["data"])
    assert yaml.safe_load(config["data"]["default-plugins.yaml"])["parser"] == {
        "pluginRef": "passthrough-parser"
    }
    # experimentalHttpRoute (gke: no timeouts, as GIE)
    route = one(objects, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference-gateway",
            "namespace": "gateways",
        }
    ]
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "pool"}
    ]
    assert rule["matches"] == [
        {
            "path": {"type": "PathPrefix", "value": "/"},
            "headers": [
                {
                    "type": "Exact",
                    "name": "X-Gateway-Base-Model-Name",
                    "value": "meta-llama/Llama-3.1-8B-Instruct",
                },
                {"type": "Exact", "name": "x-route", "value": "pool"},
            ],
        }
    ]
    assert "timeouts" not in rule
    # provider gke + autopilot: health check on the first target port, backend policy, GMP scraping
    health = one(objects, "HealthCheckPolicy")["spec"]
    assert health["default"]["config"] == {
        "type": "HTTP",
        "httpHealthCheck": {"requestPath": "/health", "port": 8001},
    }
    assert one(objects, "GCPBackendPolicy")["spec"]["default"] == {
        "timeoutSec": 300,
        "logging": {"enabled": True},
    }
    monitoring = one(objects, "PodMonitoring")["spec"]["endpoints"][0]
    assert monitoring["authorization"]["credentials"]["secret"]["name"] == "pool-metrics-reader-secret"
    assert not by_kind(objects, "ServiceMonitor")  # gke scrapes with GMP instead, as GIE
    bindings = [
        b for b in by_kind(objects, "RoleBinding") if b["metadata"]["name"].startswith("gke-gmp-system:")
    ]
    assert bindings and bindings[0]["subjects"] == [
        {"name": "collector", "namespace": "gke-gmp-system", "kind": "ServiceAccount"}
    ]
    # the picker checks the token GMP presents
    assert "--metrics-bearer-token-file=/var/run/epp-metrics-auth/token" in args
    (auth,) = [v for v in pod["volumes"] if v["name"] == "metrics-auth"]
    assert auth["secret"]["secretName"] == "pool-metrics-reader-secret"


def test_gke_without_autopilot_and_default_http_route(render: Renderer) -> None:
    values = base(
        provider={"name": "gke"},
        inferenceExtension={"monitoring": {"prometheus": {"enabled": True}}},
        experimentalHttpRoute={"enabled": True, "inferenceGatewayName": ""},
    )
    objects = render(POOL, values)
    names = [b["metadata"]["name"] for b in by_kind(objects, "RoleBinding")]
    assert any(n.startswith("gmp-system:collector:") for n in names)
    rule = one(objects, "HTTPRoute")["spec"]["rules"][0]
    assert one(objects, "HTTPRoute")["spec"]["parentRefs"][0]["name"] == "pool-inference-gateway"
    assert "headers" not in rule["matches"][0] and "timeouts" not in rule
    objects = render(POOL, base(experimentalHttpRoute={"enabled": True}))
    assert one(objects, "HTTPRoute")["spec"]["rules"][0]["timeouts"] == {"request": "300s"}
    assert not by_kind(objects, "HealthCheckPolicy")


def test_gie_standalone_mode_uses_the_endpoint_selector(render: Renderer) -> None:
    objects = render(POOL, load("gie-standalone-values.yaml"))
    args = epp_container(objects)["args"]
    assert "--endpoint-selector=app=vllm-llama3-8b-instruct,tier in (gpu)" in args
    assert "--endpoint-target-ports=8000,8001" in args
    assert not any(a.startswith("--pool-name=") for a in args)
    options = parse_options(args, env={"NAMESPACE": NAMESPACE})
    assert options.discovery_mode == "selector" and options.endpoint_target_ports == (8000, 8001)
    deployment = one(objects, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["epp"] == "pool-epp" and labels["inference.networking.k8s.io/igw-mode"] == "standalone"
    assert one(objects, "Service")["spec"]["selector"] == {"epp": "pool-epp"}


def test_every_key_of_gie_chart_is_declared_and_its_defaults_render(render: Renderer) -> None:
    schema = json.loads((POOL / "values.schema.json").read_text())
    values = gie_defaults()
    for path in key_paths(values):
        node = schema
        for key in path.split("."):
            if node.get("additionalProperties") is not False:
                break  # a free-form object (resources, probes, config maps)
            assert key in node["properties"], f"GIE's {path} is not a value of this chart"
            node = node["properties"][key]
    objects = render(POOL, values)
    for obj in objects:
        validate_object(obj)
    epp = epp_container(objects)
    assert (
        epp["image"]
        == "us-central1-docker.pkg.dev/k8s-staging-images/gateway-api-inference-extension/epp:main"
    )
    assert epp["imagePullPolicy"] == "Always"
    assert epp["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "16Gi"}}
    assert one(objects, "InferencePool")["spec"]["appProtocol"] == "http"
    assert not by_kind(objects, "HTTPRoute") and not by_kind(objects, "HealthCheckPolicy")
    parse_options(epp["args"], env={"NAMESPACE": NAMESPACE})
