"""The standalone chart's values from GIE's standalone chart (its last commit with the EPP), rendered by
real Helm: GIE's own defaults (``upstream/gie-standalone-values.yaml``) render what GIE's templates
render, mapped onto the picker's flags; every object is valid, the picker's command line parses, the
plugin config loads, Envoy accepts the proxy config; ``values.schema.json`` rejects unknown keys and
wrong types, and values this chart cannot honour fail with a message naming the key.

``upstream/gie-standalone-rendered-{envoy,agentgateway}.yaml`` are GIE's own chart rendered by Helm with
the same values: the proxy container, its ConfigMap, the InferencePool, the Service ports and the
picker's discovery, TLS and tracing settings must be the same as ours.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import NAMESPACE, HelmRenderError, Renderer
from _deploy_manifests import by_kind, one, validate_object

from epp.cli import main as epp_main
from epp.config.options import parse_options

STANDALONE = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "standalone"
GIE_DEFAULTS = Path(__file__).with_name("upstream") / "gie-standalone-values.yaml"
ENVOY = Path(sys.executable).with_name("envoy")
LABELS = {"app": "vllm-llama3-8b-instruct"}


def gie_defaults() -> dict[str, Any]:
    """GIE's own default standalone values plus the one value GIE's chart requires with them."""
    values: dict[str, Any] = yaml.safe_load(GIE_DEFAULTS.read_text())
    values["inferencePool"]["modelServers"] = {"matchLabels": LABELS}
    return values


def merged(values: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for key, value in override.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def base(**values: Any) -> dict[str, Any]:
    pool = {"modelServers": {"matchLabels": LABELS}, **values.pop("inferencePool", {})}
    return {"inferencePool": pool, **values}


def key_paths(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict) and value:
        return [p for key, sub in value.items() for p in key_paths(sub, f"{path}.{key}" if path else key)]
    return [path]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod_spec(objects)["containers"] if c["name"] == name]
    return found


def config_map(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"] == name]
    return found


SELECTOR_MODE = base(
    inferenceExtension={
        "endpointsServer": {
            "createInferencePool": False,
            "endpointSelector": "app=vllm,tier in (gpu)",
            "targetPorts": "8000,8001",
            "modelServerType": "triton-tensorrt-llm",
        },
        "metricsDataSource": {"scheme": "https", "path": "/custom/metrics", "insecureSkipVerify": False},
        "tracing": {"enabled": True},
        "monitoring": {"prometheus": {"enabled": True}},
        "extraServicePorts": [{"name": "admin", "port": 19000, "targetPort": 19000}],
        "metricsPort": 9091,
        "volumes": [{"name": "extra", "emptyDir": {}}],
        "volumeMounts": [{"name": "extra", "mountPath": "/extra"}],
    }
)
SCENARIOS = {
    "envoy": gie_defaults(),
    "agentgateway": merged(
        gie_defaults(),
        {
            "inferenceExtension": {
                "endpointsServer": {
                    "createInferencePool": False,
                    "endpointSelector": "app=vllm-llama3-8b-instruct",
                    "targetPorts": [8000, 8001],
                    "modelServerType": "vllm",
                },
                "sidecar": {"proxyType": "agentgateway"},
            }
        },
    ),
}
GKE = merged(
    gie_defaults(),
    {
        "provider": {"name": "gke", "gke": {"autopilot": True}},
        "inferenceExtension": {"monitoring": {"prometheus": {"enabled": True}}},
    },
)
HTTP_PORT = [{"name": "http", "port": 8081, "targetPort": 8081}]
OVERRIDDEN_PRESET = gie_defaults()
OVERRIDDEN_PRESET["inferenceExtension"]["sidecar"]["image"] = "envoyproxy/envoy:v1.40.0"

REJECTED = [
    (base(inferenceExtension={"endpointsServer": {"createInferencPool": True}}), "createInferencPool'"),
    (base(inferenceExtension={"sidecar": {"presets": {"envoy": {"imag": "x"}}}}), "imag"),
    (base(inferenceExtension={"sidecar": {"enabled": "yes"}}), "/inferenceExtension/sidecar/enabled"),
    (base(inferenceExtension={"monitoring": {"interval": 10}}), "/inferenceExtension/monitoring/interval"),
    (base(provider={"gke": {"autoPilot": True}}), "autoPilot"),
    (base(inferencePool={"apiVersion": "v1"}), "/inferencePool/apiVersion"),
    (base(inferenceExtension={"sidecar": {"proxyType": "agentgateway"}}), "exactly one port named .http."),
    (
        merged(
            SCENARIOS["agentgateway"],
            {"inferenceExtension": {"endpointsServer": {"createInferencePool": True}}},
        ),
        "createInferencePool=false is required",
    ),
    (
        merged(SCENARIOS["agentgateway"], {"inferenceExtension": {"flags": {"secure-serving": True}}}),
        "flags.secure-serving must be false",
    ),
    (
        merged(SCENARIOS["agentgateway"], {"inferenceExtension": {"sidecar": {"agentgateway": {}}}}),
        "sidecar.agentgateway is not read",
    ),
    (
        merged(
            SCENARIOS["agentgateway"],
            {"inferenceExtension": {"extraServicePorts": [HTTP_PORT[0] | {"port": "x"}]}},
        ),
        "port must be a port 1-65535",
    ),
    (base(inferenceExtension={"sidecar": {"image": "envoy:1"}}), "an image needs a name"),
    (
        base(inferenceExtension={"endpointsServer": {"targetPorts": "80x"}}),
        "inferenceExtension.endpointsServer.targetPorts",
    ),
    (
        {"inferenceExtension": {"endpointsServer": {"createInferencePool": True, "endpointSelector": "a=b"}}},
        "inferencePool.modelServers.matchLabels is required",
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _render_up_front(render: Renderer) -> None:
    jobs = [(STANDALONE, values, "pool") for values in (gie_defaults(), SELECTOR_MODE, OVERRIDDEN_PRESET)]
    jobs += [(STANDALONE, values, "pool") for values in (*SCENARIOS.values(), GKE, NO_SIDECAR)]
    jobs += [(STANDALONE, values, "pool") for values, _ in REJECTED]
    render.prefetch(jobs)


def test_every_key_of_gie_standalone_chart_is_declared(render: Renderer) -> None:
    schema = json.loads((STANDALONE / "values.schema.json").read_text())
    for path in key_paths(gie_defaults()):
        node = schema
        for key in path.split("."):
            if node.get("additionalProperties") is not False:
                break  # a free-form object (resources, probes, config maps)
            assert key in node["properties"], f"GIE's {path} is not a value of this chart"
            node = node["properties"][key]


def test_gie_standalone_defaults_render_as_gie(render: Renderer, tmp_path: Path) -> None:
    values = gie_defaults()
    objects = render(STANDALONE, values)
    for obj in objects:
        validate_object(obj)
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE
    # endpointsServer.createInferencePool: an InferencePool the picker serves by --pool-name
    pool = one(objects, "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["selector"] == {"matchLabels": LABELS}
    assert pool["spec"]["endpointPickerRef"] == {"name": "pool-epp", "port": {"number": 9002}}
    epp = container(objects, "epp")
    assert epp["image"] == (
        "us-central1-docker.pkg.dev/k8s-staging-images/gateway-api-inference-extension/epp:main"
    )
    assert epp["imagePullPolicy"] == "Always"
    options = parse_options(epp["args"], env={"NAMESPACE": NAMESPACE})
    assert options.discovery_mode == "pool" and options.pool_name == "pool"
    assert options.pool_group == "inference.networking.k8s.io" and options.pool_namespace == NAMESPACE
    assert "--tracing=false" in epp["args"] and "--metrics-endpoint-auth=false" in epp["args"]
    role = one(objects, "Role")["rules"]
    rules = {(g, r) for rule in role for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("", "pods"), ("inference.networking.k8s.io", "inferencepools")} <= rules
    # the default plugin config loads with the picker's loader
    plugins = config_map(objects, "pool-epp")["data"]["default-plugins.yaml"]
    (tmp_path / "default-plugins.yaml").write_text(plugins)
    assert epp_main(["check-config", str(tmp_path / "default-plugins.yaml")]) == 0
    # sidecar.presets.envoy: GIE's Envoy container, ConfigMap and volume, as GIE renders them
    preset = values["inferenceExtension"]["sidecar"]["presets"]["envoy"]
    proxy = container(objects, "envoy-sidecar")
    assert proxy["image"] == preset["image"] == "docker.io/envoyproxy/envoy:distroless-v1.33.2"
    assert proxy["command"] == ["envoy"] and proxy["args"] == preset["args"]
    for field in ("env", "ports", "readinessProbe", "resources", "volumeMounts"):
        assert proxy[field] == preset[field], field
    assert not any(c["name"] == "envoy" for c in pod_spec(objects)["containers"])  # no built-in Envoy
    assert preset["volumes"][0] in pod_spec(objects)["volumes"]
    envoy_yaml = config_map(objects, "envoy")["data"]["envoy.yaml"]
    assert envoy_yaml == preset["configMap"]["data"]["envoy.yaml"]
    assert not [c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"] == "pool-epp-envoy"]
    # Envoy accepts GIE's proxy config; it reaches the picker on 127.0.0.1:extProcPort over TLS
    (tmp_path / "envoy.yaml").write_text(envoy_yaml)
    proc = subprocess.run(
        [str(ENVOY), "--mode", "validate", "-c", str(tmp_path / "envoy.yaml"), "--log-level", "warn"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    clusters = {c["name"]: c for c in yaml.safe_load(envoy_yaml)["static_resources"]["clusters"]}
    endpoint = clusters["ext_proc"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": options.grpc_port}
    assert options.secure_serving
    # extraServicePorts: GIE's http port replaces the chart's; the pool's ext_proc port is exposed
    ports = {p["name"]: p for p in one(objects, "Service")["spec"]["ports"]}
    assert ports["http"] == {"name": "http", "port": 8081, "protocol": "TCP", "targetPort": 8081}
    assert ports["grpc-ext-proc"]["port"] == 9002 and ports["http-metrics"]["port"] == 9090
    assert not by_kind(objects, "ServiceMonitor")


def gie_rendered(scenario: str) -> list[dict[str, Any]]:
    path = GIE_DEFAULTS.with_name(f"gie-standalone-rendered-{scenario}.yaml")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


PICKER_SETTINGS = (
    "discovery_mode",
    "pool_name",
    "pool_namespace",
    "pool_group",
    "endpoint_selector",
    "endpoint_target_ports",
    "secure_serving",
    "tracing",
    "config_file",
    "grpc_port",
)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_renders_what_gie_chart_renders(scenario: str, render: Renderer, tmp_path: Path) -> None:
    ours, gie = render(STANDALONE, SCENARIOS[scenario]), gie_rendered(scenario)
    for obj in ours:
        validate_object(obj)
    # the proxy sidecar: the same container and the same ConfigMap data
    (gie_proxy,) = [c for c in pod_spec(gie)["containers"] if c["name"] != "epp"]
    assert container(ours, gie_proxy["name"]) == gie_proxy
    name = gie_proxy["name"].removesuffix("-sidecar")
    assert config_map(ours, name)["data"] == config_map(gie, name)["data"]
    for volume in pod_spec(gie)["volumes"]:
        if volume["name"] != "plugins-config-volume":
            assert volume in pod_spec(ours)["volumes"]
    # the InferencePool (pool mode only)
    assert [p["spec"] for p in by_kind(ours, "InferencePool")] == [
        p["spec"] for p in by_kind(gie, "InferencePool")
    ]
    # every Service port of GIE's, by name and port
    our_ports = {p["name"]: p["port"] for p in one(ours, "Service")["spec"]["ports"]}
    assert {p["name"]: p["port"] for p in one(gie, "Service")["spec"]["ports"]}.items() <= our_ports.items()
    # the picker: discovery, TLS, tracing and config file as GIE's command line sets them
    env = {"NAMESPACE": NAMESPACE}
    our_options = parse_options(container(ours, "epp")["args"], env=env)
    gie_options = parse_options(container(gie, "epp")["args"], env=env)
    for setting in PICKER_SETTINGS:
        assert getattr(our_options, setting) == getattr(gie_options, setting), setting
    # both default plugin configs load with the picker's loader
    for objects, label in ((ours, "ours"), (gie, "gie")):
        (tmp_path / f"{label}.yaml").write_text(
            config_map(objects, "pool-epp")["data"]["default-plugins.yaml"]
        )
        assert epp_main(["check-config", str(tmp_path / f"{label}.yaml")]) == 0, label


GMP_FIELDS = ("spec", "rules", "subjects", "roleRef", "type")


def test_gke_monitoring_renders_gie_gmp_objects(render: Renderer) -> None:
    ours = {(o["kind"], o["metadata"]["name"]): o for o in render(STANDALONE, GKE)}
    for obj in validate_all(ours.values()):
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE or obj["kind"].startswith("Cluster")
    gie = {(o["kind"], o["metadata"]["name"]): o for o in gie_rendered("gke")}
    gmp = [key for key in gie if "metrics-reader" in key[1] or key[0] == "PodMonitoring"]
    assert len(gmp) == 7, gmp
    for key in gmp:
        assert key in ours, key
        for field in GMP_FIELDS:
            if field == "spec":  # the pod selector labels are the chart's own
                assert ours[key].get(field, {}).get("endpoints") == gie[key].get(field, {}).get("endpoints")
            else:
                assert ours[key].get(field) == gie[key].get(field), (key, field)
        assert ours[key]["metadata"].get("annotations") == gie[key]["metadata"].get("annotations"), key
    # the picker requires the reader's token on /metrics (GIE's EPP checks it by TokenReview)
    epp = container(list(ours.values()), "epp")
    assert "--metrics-bearer-token-file=/var/run/epp-metrics-auth/token" in epp["args"]
    (auth,) = [v for v in pod_spec(list(ours.values()))["volumes"] if v["name"] == "metrics-auth"]
    assert auth["secret"]["secretName"] == "pool-metrics-reader-secret"
    assert ("ServiceMonitor", "pool-epp") not in ours  # gke scrapes with GMP, as GIE
    selector = ours[("PodMonitoring", "pool")]["spec"]["selector"]["matchLabels"]
    assert (
        selector.items()
        <= one(list(ours.values()), "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )


def validate_all(objects: Any) -> list[dict[str, Any]]:
    out = list(objects)
    for obj in out:
        validate_object(obj)
    return out


NO_SIDECAR = base(inferenceExtension={"sidecar": {"enabled": False}})


def test_sidecar_disabled_runs_the_picker_alone(render: Renderer) -> None:
    objects = validate_all(render(STANDALONE, NO_SIDECAR))
    assert [c["name"] for c in pod_spec(objects)["containers"]] == ["epp"]
    assert [c["metadata"]["name"] for c in by_kind(objects, "ConfigMap")] == ["pool-epp"]
    assert {p["name"] for p in one(objects, "Service")["spec"]["ports"]} == {"http-metrics", "grpc-ext-proc"}
    assert "--secure-serving=false" not in container(objects, "epp")["args"]


def test_sidecar_overrides_win_over_the_preset(render: Renderer) -> None:
    proxy = container(render(STANDALONE, OVERRIDDEN_PRESET), "envoy-sidecar")
    assert proxy["image"] == "envoyproxy/envoy:v1.40.0"
    assert proxy["args"][-2:] == ["-c", "/etc/envoy/envoy.yaml"]


def test_selector_mode_metrics_tracing_and_monitoring(render: Renderer) -> None:
    objects = render(STANDALONE, SELECTOR_MODE)
    for obj in objects:
        validate_object(obj)
    assert not by_kind(objects, "InferencePool")
    epp = container(objects, "epp")
    args = epp["args"]
    options = parse_options(args, env={"NAMESPACE": NAMESPACE})
    assert options.discovery_mode == "selector"
    assert options.endpoint_selector == "app=vllm,tier in (gpu)"
    assert options.endpoint_target_ports == (8000, 8001)
    # metricsDataSource
    assert options.model_server_metrics_scheme == "https"
    assert options.model_server_metrics_path == "/custom/metrics"
    assert not options.model_server_metrics_https_insecure_skip_verify
    # modelServerType triton-tensorrt-llm: GIE's metric names
    assert "--total-queued-requests-metric=nv_trt_llm_request_metrics{request_type=waiting}" in args
    # tracing: --tracing and the OpenTelemetry environment
    assert "--tracing=True" in args or "--tracing=true" in args
    assert {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://localhost:4317"} in epp["env"]
    # monitoring.prometheus with auth: token Secret, ServiceMonitor presenting it, picker checking it
    assert "--metrics-bearer-token-file=/var/run/epp-metrics-auth/token" in args
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/service-account-token"
    monitor = one(objects, "ServiceMonitor")["spec"]["endpoints"][0]
    assert monitor["port"] == "http-metrics" and monitor["interval"] == "10s"
    assert monitor["authorization"]["credentials"]["name"] == secret["metadata"]["name"]
    # extraServicePorts, metricsPort, volumes / volumeMounts; the built-in Envoy sidecar stays
    ports = {p["name"]: p["port"] for p in one(objects, "Service")["spec"]["ports"]}
    assert ports == {"http": 80, "http-metrics": 9091, "grpc-ext-proc": 9002, "admin": 19000}
    assert {"name": "extra", "mountPath": "/extra"} in epp["volumeMounts"]
    assert {"name": "extra", "emptyDir": {}} in pod_spec(objects)["volumes"]
    assert container(objects, "envoy")["image"].startswith("envoyproxy/envoy:")


ENGINE_FLAGS = {
    "sglang": {
        "--total-queued-requests-metric=sglang:num_queue_reqs",
        "--total-running-requests-metric=sglang:num_running_reqs",
        "--kv-cache-usage-percentage-metric=sglang:token_usage",
        "--cache-info-metric=sglang:cache_config_info",
    },
    "trtllm-serve": {
        "--total-queued-requests-metric=trtllm_num_requests_waiting",
        "--total-running-requests-metric=trtllm_num_requests_running",
        "--kv-cache-usage-percentage-metric=trtllm_kv_cache_utilization",
        "--cache-info-metric=trtllm_cache_config_info",
        "--lora-info-metric=",
        "--model-server-metrics-path=/prometheus/metrics",
    },
}


@pytest.mark.parametrize("engine", sorted(ENGINE_FLAGS))
@pytest.mark.parametrize("mode", ["selector", "pool"])
def test_model_server_type_sets_gie_metric_flags(engine: str, mode: str, render: Renderer) -> None:
    if mode == "pool":
        values = base(
            inferencePool={"modelServerType": engine},
            inferenceExtension={"endpointsServer": {"createInferencePool": True}},
        )
    else:
        values = base(inferenceExtension={"endpointsServer": {"modelServerType": engine}})
    args = container(render(STANDALONE, values), "epp")["args"]
    assert ENGINE_FLAGS[engine] <= set(args)
    options = parse_options(args, env={"NAMESPACE": NAMESPACE})
    assert options.model_server_metrics_path == (
        "/prometheus/metrics" if engine == "trtllm-serve" else "/metrics"
    )


@pytest.mark.parametrize(("values", "message"), REJECTED)
def test_misspelled_keys_wrong_types_and_unsupported_values_fail(
    values: dict[str, Any], message: str, render: Renderer
) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(STANDALONE, values)
