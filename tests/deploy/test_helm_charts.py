"""The Helm charts, rendered by the real Helm library (helm-sdkpy, see conftest.py).

Every ``ci/*-values.yaml`` of both charts is rendered; every object is validated (``_deploy_manifests``),
the picker's rendered command line is parsed by the picker's own option parser, the plugin ConfigMap's
files are loaded by the picker's configuration loader (``epp check-config``), and the standalone
chart's Envoy config is checked by ``envoy --mode validate``. Then each values file's specific
promises are checked (probes, RBAC, leader election, InferencePool wiring), and bad values must fail
with a message naming the value.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import NAMESPACE, HelmRenderError, Renderer
from _deploy_manifests import by_kind, one, validate_object

from epp.admission.objectives_file import load_objectives_file
from epp.admission.rewrites_file import load_rewrites_file
from epp.cli import main as epp_main
from epp.config.options import parse_options

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "deploy" / "helm"
POOL = CHARTS / "inferencepool"
STANDALONE = CHARTS / "standalone"
EXT_PROC = "envoy.service.ext_proc.v3.ExternalProcessor"
ENVOY = Path(sys.executable).with_name("envoy")
VALUES = sorted((POOL / "ci").glob("*-values.yaml")) + sorted((STANDALONE / "ci").glob("*-values.yaml"))
LABELS = {"app": "vllm-llama3-8b-instruct"}


def load(values_file: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(values_file.read_text()) or {}
    return loaded


def container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (found,) = [c for c in pod["containers"] if c["name"] == name]
    return found


def role_rules(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """``"group/resource"`` -> verbs."""
    rules: dict[str, set[str]] = {}
    for rule in one(objects, "Role")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault(f"{group}/{resource}", set()).update(rule["verbs"])
    return rules


def check_plugin_config(text: str, path: Path) -> int:
    """Load one EndpointPickerConfig file with the picker's own loader: ``epp check-config FILE``."""
    path.write_text(text)
    return epp_main(["check-config", str(path)])


def test_check_config_rejects_a_bad_plugin_config(tmp_path: Path) -> None:
    bad = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
    bad += "plugins:\n- type: no-such-plugin\n"
    assert check_plugin_config(bad, tmp_path / "bad.yaml") != 0


@pytest.mark.parametrize("chart", [POOL, STANDALONE], ids=lambda p: p.name)
def test_helm_lint_is_clean(chart: Path, helm_lint: Any) -> None:
    result = helm_lint(chart)
    assert not result["Errors"], result
    assert all(m["Severity"] < 2 for m in result["Messages"]), result  # 2 warning, 3 error


@pytest.mark.parametrize("values_file", VALUES, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_every_rendered_object_is_valid(values_file: Path, render: Renderer, tmp_path: Path) -> None:
    chart = values_file.parent.parent
    objects = render(chart, load(values_file))
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"} <= kinds
    for obj in objects:
        validate_object(obj)
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE
    # The picker's command line as rendered must parse with the picker's own flags.
    epp = container(objects, "epp")
    parse_options(epp["args"], env={"NAMESPACE": NAMESPACE})
    # Every plugin config file loads; --config-file names one of them.
    config_map = next(c for c in by_kind(objects, "ConfigMap") if "default-plugins.yaml" in c["data"])
    for name, text in config_map["data"].items():
        if name in ("objectives.yaml", "model-rewrites.yaml"):
            continue  # checked in test_standalone_multi_label_selector_and_objectives
        assert check_plugin_config(text, tmp_path / name) == 0, f"{name} does not load:\n{text}"
    config_file = next(a for a in epp["args"] if a.startswith("--config-file="))
    assert config_file.removeprefix("--config-file=/config/") in config_map["data"]
    if chart == STANDALONE:
        envoy_cm = next(c for c in by_kind(objects, "ConfigMap") if "envoy.yaml" in c["data"])
        (tmp_path / "envoy.yaml").write_text(envoy_cm["data"]["envoy.yaml"])
        proc = subprocess.run(
            [str(ENVOY), "--mode", "validate", "-c", str(tmp_path / "envoy.yaml"), "--log-level", "warn"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_pool_defaults(render: Renderer) -> None:
    objects = render(POOL, load(POOL / "ci" / "default-values.yaml"))
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    epp = container(objects, "epp")
    assert deployment["spec"]["replicas"] == 1
    assert pod["terminationGracePeriodSeconds"] == 130
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert epp["securityContext"]["readOnlyRootFilesystem"] is True
    assert epp["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in epp["volumeMounts"]
    assert "--pool-name=pool" in epp["args"] and f"--pool-namespace={NAMESPACE}" in epp["args"]
    assert "--ha-enable-leader-election" not in epp["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert epp[probe]["grpc"] == {"port": 9003, "service": EXT_PROC}
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in epp["env"]}
    assert env["NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"
    assert {p["containerPort"] for p in epp["ports"]} == {9002, 9003, 9090}
    service = one(objects, "Service")
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("grpc-ext-proc", 9002),
        ("grpc-health", 9003),
        ("http-metrics", 9090),
    }
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert role_rules(objects) == {
        "/pods": {"get", "list", "watch"},
        "inference.networking.k8s.io/inferencepools": {"get", "list", "watch"},
        "inference.networking.x-k8s.io/inferenceobjectives": {"get", "list", "watch"},
        "inference.networking.x-k8s.io/inferencemodelrewrites": {"get", "list", "watch"},
        "llm-d.ai/inferenceobjectives": {"get", "list", "watch"},  # llm-d-router's group, preferred
        "llm-d.ai/inferencemodelrewrites": {"get", "list", "watch"},
    }
    pool = one(objects, "InferencePool")
    assert pool["metadata"]["name"] == "pool"
    assert pool["spec"]["selector"]["matchLabels"] == LABELS
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    ref = pool["spec"]["endpointPickerRef"]
    assert ref["name"] == service["metadata"]["name"] and ref["port"] == {"number": 9002}
    assert ref["failureMode"] == "FailOpen"
    assert not by_kind(objects, "ServiceMonitor") and not by_kind(objects, "DestinationRule")
    default = yaml.safe_load(one(objects, "ConfigMap")["data"]["default-plugins.yaml"])
    weights = {p["pluginRef"]: p.get("weight") for p in default["schedulingProfiles"][0]["plugins"]}
    assert weights == {
        "queue-scorer": 2,
        "kv-cache-utilization-scorer": 2,
        "prefix-cache-scorer": 3,
        "max-score-picker": None,
    }


PRECISE_CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {modelName: m, vllm: {url: "http://127.0.0.1:8000"}}
- type: precise-prefix-cache-scorer
  parameters: {kvEventsConfig: {podDiscoveryConfig: {socketPort: 5557}}}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: precise-prefix-cache-scorer
  - pluginRef: max-score-picker
"""


PRECISE_AFFINITY_CONFIG = PRECISE_CONFIG.replace(
    "- type: max-score-picker\n",
    "- type: prefix-affinity-scorer\n  parameters: {}\n- type: max-score-picker\n",
    1,
)
PRECISE_AFFINITY_HASH_CONFIG = PRECISE_AFFINITY_CONFIG.replace("{}", '{"newPrefixPlacement": "hash"}')


def active_active(config: str, **extension: Any) -> dict[str, Any]:
    extension = {"replicas": 2, "activeActive": True, "pluginsConfigFile": "p.yaml", **extension}
    return with_pool(inferenceExtension={**extension, "pluginsCustomConfig": {"p.yaml": config}})


AFFINITY_CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
- type: prefix-affinity-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: prefix-affinity-scorer, weight: 10}
  - {pluginRef: max-score-picker}
"""


def test_pool_active_active_syncs_the_replicas(render: Renderer, tmp_path: Path) -> None:
    """With replicaSync (the default under activeActive) an approximate config with a
    prefix-affinity-scorer (load placement) is accepted: the replicas share its state over UDP."""
    assert check_plugin_config(AFFINITY_CONFIG, tmp_path / "affinity.yaml") == 0
    objects = render(POOL, active_active(AFFINITY_CONFIG))
    epp = container(objects, "epp")
    name = one(objects, "Deployment")["metadata"]["name"]
    assert "--replica-sync-port=9005" in epp["args"]
    assert f"--replica-peers={name}-peers.{NAMESPACE}.svc:9005" in epp["args"]
    assert "--replica-sync-key-file=/var/run/epp-replica-sync/key" in epp["args"]
    assert "--replica-sync-interval=50ms" in epp["args"]
    assert {"name": "replica-sync", "containerPort": 9005, "protocol": "UDP"} in epp["ports"]
    assert any(e["name"] == "POD_IP" for e in epp["env"])
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    peers = services[f"{name}-peers"]["spec"]
    assert peers["clusterIP"] == "None" and peers["publishNotReadyAddresses"] is True
    assert peers["ports"] == [
        {"name": "replica-sync", "protocol": "UDP", "port": 9005, "targetPort": "replica-sync"}
    ]
    secret = one(objects, "Secret")
    assert secret["metadata"]["name"] == f"{name}-replica-sync"
    assert len(base64.b64decode(secret["data"]["key"])) >= 16
    volume = next(v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "replica-sync-key")  # fmt: skip
    assert volume["secret"]["secretName"] == f"{name}-replica-sync"
    policy = one(objects, "NetworkPolicy")["spec"]["ingress"]
    assert any(rule["ports"] == [{"port": "replica-sync", "protocol": "UDP"}] for rule in policy)
    # the flags parse (the key file is the Secret's, mounted at run time)
    key = tmp_path / "key"
    key.write_text(base64.b64decode(secret["data"]["key"]).decode())
    args = [
        a if not a.startswith("--replica-sync-key-file=") else f"--replica-sync-key-file={key}"
        for a in epp["args"]
    ]
    options = parse_options(args, env={})
    assert options.replica_sync_port == 9005 and options.replica_sync_interval == 0.05
    assert options.replica_peers == (f"{name}-peers.{NAMESPACE}.svc:9005",)


def test_pool_replica_sync_takes_a_named_secret_and_can_be_off(render: Renderer) -> None:
    objects = render(
        POOL, active_active(AFFINITY_CONFIG, replicaSync={"keySecretName": "mine", "port": 7000})
    )
    assert not [o for o in objects if o["kind"] == "Secret"]
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "replica-sync-key")["secret"]["secretName"] == "mine"
    assert "--replica-sync-port=7000" in container(objects, "epp")["args"]
    objects = render(POOL, active_active(PRECISE_AFFINITY_HASH_CONFIG, replicaSync={"enabled": False}))
    assert not any(a.startswith("--replica-") for a in container(objects, "epp")["args"])
    assert not [o for o in objects if o["kind"] == "Secret" or o["metadata"]["name"].endswith("-peers")]
    objects = render(POOL, with_pool(inferenceExtension={"replicas": 2}))  # active-passive: no sync
    assert not any(a.startswith("--replica-") for a in container(objects, "epp")["args"])


def test_pool_active_active_takes_an_affinity_scorer_with_hash_placement(render: Renderer) -> None:
    assert "prefix-affinity-scorer" in PRECISE_AFFINITY_HASH_CONFIG
    assert "newPrefixPlacement" in PRECISE_AFFINITY_HASH_CONFIG
    objects = render(POOL, active_active(PRECISE_AFFINITY_HASH_CONFIG))
    assert one(objects, "Deployment")["spec"]["replicas"] == 2


def test_pool_active_active_replicas_all_serve(render: Renderer) -> None:
    extension = {
        "replicas": 3,
        "activeActive": True,
        "pluginsConfigFile": "precise.yaml",
        "pluginsCustomConfig": {"precise.yaml": PRECISE_CONFIG},
    }
    objects = render(POOL, with_pool(inferenceExtension=extension))
    deployment = one(objects, "Deployment")
    epp = container(objects, "epp")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "--ha-enable-leader-election" not in epp["args"]
    assert parse_options(epp["args"], env={}).ha_enable_leader_election is False
    # every replica is ready as soon as it serves ext_proc (no leader-only readiness), no Lease RBAC
    assert epp["readinessProbe"]["grpc"]["service"] == "envoy.service.ext_proc.v3.ExternalProcessor"
    assert "coordination.k8s.io/leases" not in role_rules(objects)


def test_pool_ha_enables_leader_election(render: Renderer) -> None:
    objects = render(POOL, load(POOL / "ci" / "ha-values.yaml"))
    epp = container(objects, "epp")
    assert one(objects, "Deployment")["spec"]["replicas"] == 3
    assert one(objects, "Deployment")["spec"]["strategy"]["type"] == "Recreate"
    assert "--ha-enable-leader-election" in epp["args"]
    assert {"name": "EXAMPLE_MAP_SETTING", "value": "1"} in epp["env"]
    assert parse_options(epp["args"], env={}).ha_enable_leader_election is True
    assert epp["livenessProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert epp["readinessProbe"]["grpc"] == {"port": 9003, "service": "readiness"}
    rules = role_rules(objects)
    assert {"get", "create", "update"} <= rules["coordination.k8s.io/leases"]
    assert {"create", "patch"} <= rules["/events"]


def test_pool_custom_plugins_flags_and_ports(render: Renderer) -> None:
    objects = render(POOL, load(POOL / "ci" / "custom-plugins-values.yaml"))
    epp = container(objects, "epp")
    data = one(objects, "ConfigMap")["data"]
    assert set(data) == {"default-plugins.yaml", "custom-plugins.yaml"}
    assert "--config-file=/config/custom-plugins.yaml" in epp["args"]
    options = parse_options(epp["args"], env={})
    assert options.verbosity == 3 and options.refresh_metrics_interval == pytest.approx(0.1)
    assert {"name": "EXAMPLE_SETTING", "value": "on"} in epp["env"]
    assert one(objects, "InferencePool")["spec"]["targetPorts"] == [{"number": 8000}, {"number": 8001}]


def test_pool_istio_monitoring_tls_triton(render: Renderer) -> None:
    objects = render(POOL, load(POOL / "ci" / "istio-monitoring-values.yaml"), release="triton-pool")
    epp = container(objects, "epp")
    rule = one(objects, "DestinationRule")
    assert rule["apiVersion"] == "networking.istio.io/v1"
    assert rule["spec"]["host"] == f"triton-pool-epp.{NAMESPACE}.svc.cluster.local"
    assert rule["spec"]["trafficPolicy"]["tls"] == {"mode": "SIMPLE", "insecureSkipVerify": True}
    assert rule["spec"]["trafficPolicy"]["connectionPool"]["http"]["maxRequestsPerConnection"] == 256000
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["interval"] == "15s"
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert endpoint["authorization"]["credentials"]["name"] == secret["metadata"]["name"]
    options = parse_options(epp["args"], env={})
    assert options.metrics_bearer_token_file == "/var/run/epp-metrics-auth/token"
    assert options.cert_path == "/etc/epp/tls" and options.enable_cert_reload
    assert dict(options.metric_overrides)["waiting"].startswith("nv_trt_llm_request_metrics")
    assert one(objects, "InferencePool")["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
    pool_ref = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "triton-pool"}
    objectives = {o["metadata"]["name"]: o["spec"] for o in by_kind(objects, "InferenceObjective")}
    assert objectives == {
        "interactive": {"priority": 10, "poolRef": pool_ref},
        "batch": {"priority": -1, "poolRef": pool_ref},
    }
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"


def test_standalone_defaults(render: Renderer) -> None:
    objects = render(STANDALONE, load(STANDALONE / "ci" / "default-values.yaml"))
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"InferencePool", "InferenceObjective", "Lease"}
    options = parse_options(container(objects, "epp")["args"], env={})
    assert options.discovery_mode == "selector"
    assert options.endpoint_selector == "app=vllm-llama3-8b-instruct"
    assert options.endpoint_target_ports == (8000,)
    assert role_rules(objects) == {"/pods": {"get", "list", "watch"}}
    envoy = container(objects, "envoy")
    assert envoy["image"].startswith("envoyproxy/envoy:")
    assert envoy["securityContext"]["readOnlyRootFilesystem"] is True
    config = envoy_config(objects)
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    original = clusters["original_destination_cluster"]
    assert original["type"] == "ORIGINAL_DST" and original["lb_policy"] == "CLUSTER_PROVIDED"
    assert original["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-gateway-destination-endpoint",
    }
    picker = clusters["endpoint_picker"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    assert picker["endpoint"]["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 9002}
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    ext_proc = next(f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")
    assert ext_proc["typed_config"]["failure_mode_allow"] is False
    assert ext_proc["typed_config"]["processing_mode"]["request_body_mode"] == "FULL_DUPLEX_STREAMED"
    service = one(objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def envoy_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    config_map = next(c for c in by_kind(objects, "ConfigMap") if "envoy.yaml" in c["data"])
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"]["envoy.yaml"])
    return loaded


def test_standalone_multi_label_selector_and_objectives(render: Renderer, tmp_path: Path) -> None:
    custom = render(STANDALONE, load(STANDALONE / "ci" / "custom-plugins-values.yaml"))
    options = parse_options(container(custom, "epp")["args"], env={})
    assert options.endpoint_selector == "app=vllm-llama3-8b-instruct,tier=gpu"
    assert options.endpoint_target_ports == (8000, 8001)
    assert options.verbosity == 2
    assert options.objectives_file == "/config/objectives.yaml"
    config_map = next(c for c in by_kind(custom, "ConfigMap") if "objectives.yaml" in c["data"])
    (tmp_path / "objectives.yaml").write_text(config_map["data"]["objectives.yaml"])
    objectives = load_objectives_file(tmp_path / "objectives.yaml")
    assert {(o.name, o.priority) for o in objectives} == {("interactive", 10), ("batch", -1)}
    assert options.model_rewrites_file == "/config/model-rewrites.yaml"
    (tmp_path / "model-rewrites.yaml").write_text(config_map["data"]["model-rewrites.yaml"])
    (canary,) = load_rewrites_file(tmp_path / "model-rewrites.yaml")
    assert canary.name == "food-review-canary" and canary.created > 0
    assert [(t.model, t.weight) for t in canary.rules[0].targets] == [
        ("food-review-v1", 90),
        ("food-review-v2", 10),
    ]
    default = render(STANDALONE, load(STANDALONE / "ci" / "default-values.yaml"))
    default_options = parse_options(container(default, "epp")["args"], env={})
    assert default_options.objectives_file is None and default_options.model_rewrites_file is None


def test_standalone_pool_mode_may_watch_objectives_and_model_rewrites(render: Renderer) -> None:
    values = load(STANDALONE / "ci" / "default-values.yaml")
    server = values.setdefault("inferenceExtension", {}).setdefault("endpointsServer", {})
    server["createInferencePool"] = True
    objects = render(STANDALONE, values)
    assert parse_options(container(objects, "epp")["args"], env={}).discovery_mode == "pool"
    rules = role_rules(objects)
    assert rules["inference.networking.x-k8s.io/inferenceobjectives"] == {"get", "list", "watch"}
    assert rules["inference.networking.x-k8s.io/inferencemodelrewrites"] == {"get", "list", "watch"}
    assert (
        rules["llm-d.ai/inferenceobjectives"]
        == rules["llm-d.ai/inferencemodelrewrites"]
        == {"get", "list", "watch"}
    )


def test_standalone_ha_is_active_active(render: Renderer) -> None:
    objects = render(STANDALONE, load(STANDALONE / "ci" / "ha-values.yaml"))
    assert one(objects, "Deployment")["spec"]["replicas"] == 3
    assert "--ha-enable-leader-election" not in container(objects, "epp")["args"]
    assert role_rules(objects) == {"/pods": {"get", "list", "watch"}}


def test_standalone_fail_open_routes_to_the_fallback_service(render: Renderer) -> None:
    config = envoy_config(render(STANDALONE, load(STANDALONE / "ci" / "fail-open-values.yaml")))
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    (endpoint,) = clusters["fallback"]["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoint["endpoint"]["address"]["socket_address"] == {
        "address": "vllm-llama3-8b-instruct.default.svc.cluster.local",
        "port_value": 8000,
    }
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    ext_proc = next(f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")
    assert ext_proc["typed_config"]["failure_mode_allow"] is True
    assert ext_proc["typed_config"]["processing_mode"]["request_body_mode"] == "BUFFERED"
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    assert [r["route"]["cluster"] for r in routes] == ["original_destination_cluster", "fallback"]


def with_pool(pool: dict[str, Any] | None = None, **others: Any) -> dict[str, Any]:
    return {"inferencePool": {"modelServers": {"matchLabels": LABELS}, **(pool or {})}, **others}


EIGHT_PLUS_ONE = [{"number": p} for p in range(8000, 8009)]
BAD_VALUES = [
    (
        STANDALONE,
        with_pool(
            inferenceExtension={"endpointsServer": {"createInferencePool": True}},
            inferenceModelRewrites=[{"name": "x", "rules": []}],
        ),
        "inferenceModelRewrites is for selector mode",
    ),
    (STANDALONE, with_pool(inferenceModelRewrites=[{"rules": []}]), "inferenceModelRewrites/0"),
    (POOL, {}, "inferencePool.modelServers.matchLabels is required"),
    (POOL, with_pool({"targetPorts": EIGHT_PLUS_ONE}), "/inferencePool/targetPorts': maxItems"),
    (POOL, with_pool({"targetPorts": [{"number": 70000}]}), "inferencePool.targetPorts"),
    (POOL, with_pool(inferenceExtension={"failureMode": "Open"}), "inferenceExtension.failureMode"),
    (POOL, with_pool({"modelServerType": "tgi"}), "inferencePool.modelServerType"),
    (POOL, with_pool(provider={"name": "aws"}), "/provider/name"),
    (POOL, with_pool(inferenceExtension={"pluginsConfigFile": "x"}), "Extension.pluginsConfigFile: .x."),
    (POOL, with_pool(inferenceExtension={"replicas": 0}), "inferenceExtension.replicas"),
    (POOL, with_pool(inferenceExtension={"replicas": 2, "activeActive": True}), "activeActive: the selected"),
    (
        POOL,
        active_active(PRECISE_AFFINITY_CONFIG, replicaSync={"enabled": False}),
        "without newPrefixPlacement: hash",
    ),
    (
        POOL,
        active_active(PRECISE_CONFIG.replace("precise-prefix-cache-scorer", "prefix-cache-scorer")),
        "has neither",
    ),
    (POOL, active_active(AFFINITY_CONFIG, replicaSync={"interval": "fast"}), "replicaSync/interval"),
    (POOL, with_pool({"targetPortNumber": 70000}), "/inferencePool/targetPortNumber"),
    (POOL, with_pool(inferenceExtension={"image": {"hub": "r.example"}}), "image.hub/name"),
    (STANDALONE, {}, "inferencePool.modelServers.matchLabels is required"),
    (STANDALONE, with_pool(inferenceExtension={"failureMode": "FailOpen"}), "envoy.fallbackService"),
]


@pytest.fixture(scope="module", autouse=True)
def _render_everything_up_front(render: Renderer) -> None:
    """One concurrent Helm run for all the renders of this module (the tests then hit the cache)."""
    jobs = [(values_file.parent.parent, load(values_file), "pool") for values_file in VALUES]
    jobs.append((POOL, load(POOL / "ci" / "istio-monitoring-values.yaml"), "triton-pool"))
    jobs += [(chart, values, "pool") for chart, values, _ in BAD_VALUES]
    render.prefetch(jobs)


@pytest.mark.parametrize(("chart", "values", "message"), BAD_VALUES)
def test_bad_values_fail_with_a_message_naming_the_value(
    chart: Path, values: dict[str, Any], message: str, render: Renderer
) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(chart, values)
