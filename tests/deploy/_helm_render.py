"""Renders a Helm chart with the real Helm library (helm-sdkpy) and prints the manifest as JSON.

Runs under CPython 3.12 in ``.venv-helm`` (helm-sdkpy needs Python >= 3.12), as a subprocess of the
pytest side::

    .venv-helm/bin/python tests/deploy/_helm_render.py render CHART RELEASE NAMESPACE VALUES_JSON_FILE
    .venv-helm/bin/python tests/deploy/_helm_render.py render-many JOBS_JSON_FILE
    .venv-helm/bin/python tests/deploy/_helm_render.py lint CHART

helm-sdkpy has no template/dry-run call, so this installs the chart with ``wait=False`` into a fake
Kubernetes API server on 127.0.0.1 (a thread of this process) with ``HELM_DRIVER=memory``: the server
answers ``/version``, the discovery documents ``/api``, ``/apis`` and ``/api(s)/GROUP/VERSION`` for every
kind the charts emit, 404 to every GET of an object and echoes every POST (201). Helm returns the
fully rendered manifest (hooks and NOTES excluded), or the template error with its full text. Output
on stdout, one JSON object:
``{"manifest": "..."}`` or ``{"error": "..."}``; exit status 0 either way (1 only for bad usage).
``render-many`` reads a JSON list of ``{chart, release, namespace, values}`` and renders them
concurrently (each install spends most of its second waiting inside Helm), printing the list of results.

``lint`` runs Helm's linter (offline; it takes no values and its messages carry no text in
helm-sdkpy, only a severity) and prints ``{"lint": <helm's result>}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# group/version -> [(plural, kind, namespaced)]
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("secrets", "Secret", True),
        ("pods", "Pod", True),
        ("events", "Event", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "rbac.authorization.k8s.io/v1": [
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
    ],
    "coordination.k8s.io/v1": [("leases", "Lease", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "inference.networking.k8s.io/v1": [("inferencepools", "InferencePool", True)],
    "inference.networking.x-k8s.io/v1alpha2": [("inferenceobjectives", "InferenceObjective", True)],
    "monitoring.coreos.com/v1": [("servicemonitors", "ServiceMonitor", True)],
    "networking.istio.io/v1": [("destinationrules", "DestinationRule", True)],
    "gateway.networking.k8s.io/v1": [("gateways", "Gateway", True), ("httproutes", "HTTPRoute", True)],
    "networking.gke.io/v1": [
        ("healthcheckpolicies", "HealthCheckPolicy", True),
        ("gcpbackendpolicies", "GCPBackendPolicy", True),
    ],
    "monitoring.googleapis.com/v1": [("podmonitorings", "PodMonitoring", True)],
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}


def _resource_list(group_version: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": plural, "singularName": kind.lower(), "namespaced": ns, "kind": kind, "verbs": VERBS}
            for plural, kind, ns in RESOURCES[group_version]
        ],
    }


def _group_list() -> dict[str, Any]:
    groups = []
    for group_version in RESOURCES:
        if "/" not in group_version:
            continue
        group, version = group_version.split("/")
        entry = {"groupVersion": group_version, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class FakeApi(BaseHTTPRequestHandler):
    # Keep-alive, and every response out at once: with HTTP/1.0 Helm's discovery (eleven group versions)
    # stalls a second on new connections, and with keep-alive but Nagle on each request waits for the
    # peer's delayed ACK (about 45 ms): one render took 1.6 s, now about 0.2 s.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path == "/version":
            self._reply(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0"})
        elif path == "/api":
            self._reply(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        elif path == "/apis":
            self._reply(200, _group_list())
        elif path == "/api/v1":
            self._reply(200, _resource_list("v1"))
        elif path.startswith("/apis/") and path.count("/") == 3 and path[6:] in RESOURCES:
            self._reply(200, _resource_list(path[6:]))
        else:
            self._reply(404, NOT_FOUND)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(201)
        self.send_header("Content-Type", self.headers.get("Content-Type") or "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


async def _install(kubeconfig: str, job: dict[str, Any]) -> dict[str, str]:
    import helm_sdkpy

    try:
        config = helm_sdkpy.Configuration(namespace=job["namespace"], kubeconfig=kubeconfig)
        install = helm_sdkpy.Install(config)
        result = await install.run(job["release"], job["chart"], values=job["values"], wait=False, timeout=60)
    except helm_sdkpy.HelmError as exc:
        return {"error": str(exc)}
    return {"manifest": str(result.get("manifest", ""))}


def render_many(jobs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Render every job ``{chart, release, namespace, values}`` concurrently (one release store each)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig_text = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
    )
    fd, kubeconfig = tempfile.mkstemp(suffix=".kubeconfig")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(kubeconfig_text)  # JSON is YAML

        async def all_jobs() -> list[dict[str, str]]:
            return list(await asyncio.gather(*(_install(kubeconfig, job) for job in jobs)))

        return asyncio.run(all_jobs())
    finally:
        server.shutdown()
        os.unlink(kubeconfig)


def lint(chart: str) -> dict[str, Any]:
    import helm_sdkpy

    config = helm_sdkpy.Configuration(namespace="default")
    return {"lint": asyncio.run(helm_sdkpy.Lint(config).run(chart))}


def main(argv: list[str]) -> int:
    if os.environ.get("HELM_DRIVER") != "memory":
        # Helm's Go runtime reads the environment the process started with, not later os.environ
        # changes: restart with the memory storage driver so no release Secret is written.
        os.execve(sys.executable, [sys.executable, __file__, *argv], {**os.environ, "HELM_DRIVER": "memory"})
    if len(argv) == 5 and argv[0] == "render":
        _, chart, release, namespace, values_file = argv
        with open(values_file, encoding="utf-8") as fh:
            values = json.load(fh)
        job = {"chart": chart, "release": release, "namespace": namespace, "values": values}
        print(json.dumps(render_many([job])[0]))
        return 0
    if len(argv) == 2 and argv[0] == "render-many":
        with open(argv[1], encoding="utf-8") as fh:
            print(json.dumps(render_many(json.load(fh))))
        return 0
    if len(argv) == 2 and argv[0] == "lint":
        print(json.dumps(lint(argv[1])))
        return 0
    print(__doc__, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
