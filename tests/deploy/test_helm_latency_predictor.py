"""``inferenceExtension.latencyPredictor.enabled`` in both charts, rendered by real Helm: what GIE's chart
renders (GIE commit 1748e829d1161147aaf35e76699ec86fd88406d2, ``config/charts/epplib/templates/
_latency-predictor.tpl`` and ``_config.yaml``) — the training and prediction server containers, their
volumes and ConfigMaps, the picker's environment (which the picker's sidecar client accepts) and GIE's
predicted-latency plugins configuration (which the picker loads) — and the values refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import HelmRenderError, Renderer
from _deploy_manifests import by_kind, one, validate_object

from epp.config.sections import load_picker_config
from epp.server.latency_sidecar import sidecar_config_from_env

HELM = Path(__file__).resolve().parents[2] / "deploy" / "helm"
POOL, STANDALONE = HELM / "inferencepool", HELM / "standalone"
UPSTREAM = Path(__file__).with_name("upstream")
GIE_VALUES = {
    POOL: UPSTREAM / "gie-inferencepool-values.yaml",
    STANDALONE: UPSTREAM / "gie-standalone-values.yaml",
}
LABELS = {"app": "vllm-llama3-8b-instruct"}
CHARTS = [POOL, STANDALONE]
REGISTRY = "us-central1-docker.pkg.dev/k8s-staging-images/gateway-api-inference-extension"
TRAINING_IMAGE = f"{REGISTRY}/latency-training-server:main"
PREDICTION_IMAGE = f"{REGISTRY}/latency-prediction-server:main"
GIE_PLUGINS = {  # GIE's _config.yaml with latencyPredictor.enabled (its default configuration)
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "predicted-latency-producer"},
        {
            "name": "strict-affinity-filter",
            "type": "prefix-cache-affinity-filter",
            "parameters": {"affinityThreshold": 0.99},
        },
        {
            "name": "loose-affinity-filter",
            "type": "prefix-cache-affinity-filter",
            "parameters": {"affinityThreshold": 0.8},
        },
        {"type": "slo-headroom-tier-filter"},
        {"type": "latency-scorer"},
        {"type": "weighted-random-picker"},
        {"type": "latency-slo-admitter"},
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "predicted-latency-producer"},
                {"pluginRef": "strict-affinity-filter"},
                {"pluginRef": "slo-headroom-tier-filter"},
                {"pluginRef": "loose-affinity-filter"},
                {"pluginRef": "latency-scorer"},
                {"pluginRef": "weighted-random-picker"},
            ],
        }
    ],
}


def merged(values: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for key, value in override.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def enabled(**latency: Any) -> dict[str, Any]:
    """The chart's own defaults with the predictor on (and ``latency`` merged into it)."""
    return {
        "inferencePool": {"modelServers": {"matchLabels": LABELS}},
        "inferenceExtension": {"latencyPredictor": merged({"enabled": True}, latency)},
    }


def gie_enabled(chart: Path) -> dict[str, Any]:
    """GIE's own default values for the chart, with the predictor on."""
    values: dict[str, Any] = yaml.safe_load(GIE_VALUES[chart].read_text())
    values["inferencePool"]["modelServers"] = {"matchLabels": LABELS}
    values["inferenceExtension"]["latencyPredictor"]["enabled"] = True
    return values


def pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod(objects)["containers"]}


def config_map(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    (found,) = [c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith(suffix)]
    return found


REJECTED = [
    (enabled(trainingServer={"port": 9003}), "port 9003 is"),
    (enabled(predictionServers={"startPort": 9089, "count": 2}), "port 9090 is"),
    (enabled(trainingServer={"port": 8002}, predictionServers={"count": 2}), "port 8002 is used twice"),
    (
        enabled(trainingServer={"image": {"registry": ""}}),
        "trainingServer.image: registry, repository and tag",
    ),
    (enabled(predictionServers={"count": 0}), "/predictionServers/count"),
    (enabled(predictionServers={"startPort": 65535, "count": 2}), "goes past port 65535"),
    (enabled(predictionServers={"readinessProbe": {"httpGet": {"path": ""}}}), "readinessProbe.httpGet.path"),
    (enabled(trainingServer={"imag": {}}), "imag"),
]


@pytest.fixture(scope="module", autouse=True)
def _render_up_front(render: Renderer) -> None:
    jobs = [(chart, values, "pool") for chart in CHARTS for values in (enabled(), gie_enabled(chart))]
    jobs += [(chart, enabled(predictionServers={"count": 3}), "pool") for chart in CHARTS]
    jobs.append((POOL, merged(enabled(), {"inferencePool": {"parser": "passthrough-parser"}}), "pool"))
    jobs += [(chart, values, "pool") for chart in CHARTS for values, _ in REJECTED]
    render.prefetch(jobs)


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
@pytest.mark.parametrize("source", ["chart-defaults", "gie-defaults"])
def test_enabled_renders_the_sidecars_env_and_plugins_as_gie(
    chart: Path, source: str, render: Renderer, tmp_path: Path
) -> None:
    objects = render(chart, enabled() if source == "chart-defaults" else gie_enabled(chart))
    for obj in objects:
        validate_object(obj)
    found = containers(objects)
    training, prediction, epp = found["training-server"], found["prediction-server-1"], found["epp"]
    assert "prediction-server-2" not in found
    assert training["image"] == TRAINING_IMAGE and training["imagePullPolicy"] == "Always"
    assert training["ports"] == [{"name": "training-port", "containerPort": 8000}]
    assert training["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8000}
    assert training["resources"]["limits"] == {"cpu": "4000m", "memory": "8Gi"}
    assert training["volumeMounts"] == [{"name": "training-server-storage", "mountPath": "/models"}]
    assert {"name": "SERVER_TYPE", "value": "training"} in training["env"]
    assert prediction["image"] == PREDICTION_IMAGE
    assert prediction["command"] == ["uvicorn"]
    assert prediction["args"] == ["prediction_server:app", "--host", "0.0.0.0", "--port", "8001"]
    assert prediction["ports"] == [{"name": "predict-port-1", "containerPort": 8001}]
    assert prediction["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": 8001},
        "initialDelaySeconds": 15,
        "periodSeconds": 15,
        "timeoutSeconds": 5,
        "failureThreshold": 5,
    }
    assert {"name": "TRAINING_SERVER_URL", "value": "http://localhost:8000"} in prediction["env"]
    assert {"name": "PREDICT_PORT", "value": "8001"} in prediction["env"]
    volumes = {v["name"]: v for v in pod(objects)["volumes"]}
    assert volumes["training-server-storage"] == {
        "name": "training-server-storage",
        "emptyDir": {"sizeLimit": "20Gi"},
    }
    assert volumes["prediction-server-1-storage"]["emptyDir"] == {"sizeLimit": "10Gi"}
    # the ConfigMaps the containers load (envFrom)
    train_cm, predict_cm = (
        config_map(objects, "-latency-predictor-training"),
        config_map(objects, "-latency-predictor-prediction"),
    )
    assert training["envFrom"] == [{"configMapRef": {"name": train_cm["metadata"]["name"]}}]
    assert prediction["envFrom"] == [{"configMapRef": {"name": predict_cm["metadata"]["name"]}}]
    assert (
        train_cm["data"]["LATENCY_MODEL_TYPE"] == "xgboost"
        and train_cm["data"]["LATENCY_RETRAINING_INTERVAL_SEC"] == "10"
    )
    assert predict_cm["data"]["LOCAL_TTFT_MODEL_PATH"] == "/server_models/ttft.joblib"
    # the picker's environment: accepted by its sidecar client as the chart means it
    env = {e["name"]: e.get("value") for e in epp["env"]}
    assert env["PREDICTION_SERVER_URL"] == "http://localhost:8001"
    assert env["TRAINING_SERVER_URL"] == "http://localhost:8000"
    assert env["LATENCY_MAX_SAMPLE_SIZE"] == "10000" and env["LATENCY_COALESCE_WINDOW_MS"] == "1"
    config = sidecar_config_from_env({k: v for k, v in env.items() if v is not None})
    assert config is not None and config.prediction_urls == ("http://localhost:8001",)
    assert config.training_url == "http://localhost:8000" and config.max_sample_size == 10000
    # GIE's predicted-latency plugins, loaded by the picker
    text = next(c for c in by_kind(objects, "ConfigMap") if "default-plugins.yaml" in c.get("data", {}))
    plugins = text["data"]["default-plugins.yaml"]
    assert yaml.safe_load(plugins) == GIE_PLUGINS
    path = tmp_path / "default-plugins.yaml"
    path.write_text(plugins)
    loaded = load_picker_config(str(path), None)
    assert "predicted-latency-producer" in loaded.config.render()


def test_the_parser_joins_the_latency_configuration_as_in_gie(render: Renderer) -> None:
    values = merged(enabled(), {"inferencePool": {"parser": "passthrough-parser"}})
    objects = render(POOL, values)
    text = next(c for c in by_kind(objects, "ConfigMap") if "default-plugins.yaml" in c.get("data", {}))
    config = yaml.safe_load(text["data"]["default-plugins.yaml"])
    assert config == {**GIE_PLUGINS, "parser": {"pluginRef": "passthrough-parser"}}


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
def test_several_prediction_servers_on_consecutive_ports(chart: Path, render: Renderer) -> None:
    objects = render(chart, enabled(predictionServers={"count": 3}))
    found = containers(objects)
    ports = [found[f"prediction-server-{i}"]["ports"][0]["containerPort"] for i in (1, 2, 3)]
    assert ports == [8001, 8002, 8003]
    assert [found[f"prediction-server-{i}"]["readinessProbe"]["httpGet"]["port"] for i in (1, 2, 3)] == ports
    env = {e["name"]: e.get("value") for e in found["epp"]["env"]}
    assert env["PREDICTION_SERVER_URL"] == "http://localhost:8001,http://localhost:8002,http://localhost:8003"
    volumes = {v["name"] for v in pod(objects)["volumes"]}
    assert {f"prediction-server-{i}-storage" for i in (1, 2, 3)} <= volumes


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
def test_disabled_renders_no_sidecar(chart: Path, render: Renderer) -> None:
    objects = render(chart, {"inferencePool": {"modelServers": {"matchLabels": LABELS}}})
    assert not {"training-server", "prediction-server-1"} & set(containers(objects))
    env = {e["name"] for e in containers(objects)["epp"]["env"]}
    assert "PREDICTION_SERVER_URL" not in env and "TRAINING_SERVER_URL" not in env
    assert not [c for c in by_kind(objects, "ConfigMap") if "latency-predictor" in c["metadata"]["name"]]


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
@pytest.mark.parametrize(("values", "message"), REJECTED)
def test_bad_latency_predictor_values_fail(
    chart: Path, values: dict[str, Any], message: str, render: Renderer
) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(chart, values)
