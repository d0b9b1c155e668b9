"""GIE's conformance and hermetic EPP scenarios, end to end through the real Envoy.

Ported from GIE (last commit with ``pkg/epp``): the table of ``test/integration/epp/hermetic_test.go``
(request -> expected status / routing / metrics), and the conformance suite's EPP config
(``conformance/resources/base.yaml``: ``header-based-testing-filter`` + ``destination-endpoint-served-
verifier``) with its checks (``gateway_following_epp_routing*.go``, ``gateway_destination_endpoint_
served.go``): a request pinned with ``test-epp-endpoint-selection`` lands there, and response header
``x-conformance-test-served-endpoint`` names the endpoint that served it.

Two stacks, each shared by its tests: ``stack`` (the picker's default config, two simulated servers,
GIE's fail-closed Envoy with a subset-hint header and served-endpoint reporting) and ``conformance``
(GIE's conformance config). Envoy reports the served endpoint as GKE's gateway does
(``EnvoyParams.report_served_endpoint``): ``envoy.lb`` / ``x-gateway-destination-endpoint-served``.

Where we deliberately differ from GIE (README, "Where we chose differently") the assertions are ours:
errors carry a JSON body ``{"error": {"type", "message"}}`` instead of GIE's plain-text ``inference
error: BadRequest - ...``. GIE's "rewrite request model" case uses an InferenceModelRewrite object:
it is ported with that object in ``test_e2e_model_rewrite.py``; here the same rewrite path is driven by
the ``x-gateway-model-name-rewrite`` header (as in GIE's "split body across chunks" case).

Covered elsewhere, not repeated here: subset routing through ``envoy.lb.subset_hint`` (GIE's
"subsetting: select best from subset" / "partial match") in
``test_e2e_routing.py::test_subset_hint_restricts_the_choice``; other malformed bodies and a body over
the limit in ``test_e2e_routing.py::test_bad_requests_get_json_errors_through_envoy`` (here: GIE's
exact request bodies); SSE frames arriving token by token in
``test_e2e_routing.py::test_sse_streams_token_by_token``; usage counted from a second, observer ext_proc
stream in ``test_e2e_observability.py``; GIE's conformance ``EppUnavailableFailOpen`` in
``test_e2e_failure_modes.py``; the table's scheduling cases (queue, KV cache, LoRA affinity, subset
winner) in ``tests/epp/admission/test_hermetic_table.py``; its response-buffering cases byte for byte in
``tests/epp/protocol/test_protocol_response_path.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from e2e_lib import MODEL, decisions, eventually, running, served_by
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

SUBSET_HEADER = "x-test-subset"
SELECT = "test-epp-endpoint-selection"
SERVED = "x-conformance-test-served-endpoint"
REWRITE = "x-gateway-model-name-rewrite"
OBJECTIVE = "x-gateway-inference-objective"
ALIAS = "sql-lora-sheddable"  # GIE's modelSheddable: a name the simulated servers do not serve
SIM_ARGS = ("--time-scale", "50")
NOWHERE = "192.168.1.99:8000"

# GIE's conformance/resources/base.yaml, ConfigMap plugins-config
CONFORMANCE_CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-based-testing-filter
- type: destination-endpoint-served-verifier
schedulingProfiles:
- name: conformance-profile
  plugins:
  - pluginRef: header-based-testing-filter
"""


class _FileStack(Stack):
    """The picker reads its endpoints from a file (``--endpoints-file``), so a test can empty the pool."""

    @property
    def endpoints_file(self) -> str:
        return str(self.workdir / "endpoints.yaml")

    def write_endpoints(self, endpoints: list[str]) -> None:
        with open(self.endpoints_file, "w", encoding="utf-8") as f:
            f.write(json.dumps({"endpoints": endpoints}))

    def picker_argv(self) -> list[str]:
        argv = super().picker_argv()
        i = argv.index("--endpoints")
        self.write_endpoints(self.endpoints)  # for the ports chosen at this start
        argv[i : i + 2] = ["--endpoints-file", self.endpoints_file]
        return argv


def _ready_count(stack: Stack) -> int:
    rows = httpx.get(f"{stack.metrics_url}/debug/endpoints", timeout=5.0).json()
    return sum(1 for row in rows if row["ready"])


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    spec = StackSpec(
        servers=2,
        sim_args=SIM_ARGS,
        single_sim_process=True,
        subset_hint_header=SUBSET_HEADER,
        report_served_endpoint=True,
    )
    s = _FileStack(spec)
    try:
        s.start()
        assert eventually(lambda: _ready_count(s) == 2), s.logs()
        yield s
    except BaseException as exc:
        exc.add_note(s.logs())
        raise
    finally:
        s.close()


@pytest.fixture(scope="module")
def conformance() -> Iterator[Stack]:
    spec = StackSpec(
        servers=2,
        sim_args=SIM_ARGS,
        single_sim_process=True,
        picker_args=("--config-text", CONFORMANCE_CONFIG),
        report_served_endpoint=True,
    )
    with running(spec) as s:
        assert eventually(lambda: _ready_count(s) == 2), s.logs()
        yield s


def _post(
    stack: Stack, content: bytes | Iterator[bytes], headers: dict[str, str] | None = None
) -> httpx.Response:
    rid = str(uuid.uuid4())
    return httpx.post(
        f"{stack.base_url}/v1/completions",
        content=content,
        headers={"x-request-id": rid, "content-type": "application/json", **(headers or {})},
        timeout=30.0,
    )


def _body(**fields: object) -> bytes:
    return json.dumps({"model": MODEL, "prompt": "test", "max_tokens": 3, **fields}).encode()


def _json_error(r: httpx.Response, status: int) -> dict[str, str]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error: dict[str, str] = r.json()["error"]
    return error


def _metric(stack: Stack, name: str, **labels: str) -> float:
    """Sum of the samples ``name`` whose labels include ``labels``."""
    text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def _routed_as_decided(stack: Stack, r: httpx.Response) -> None:
    assert r.status_code == 200, r.text
    chosen = decisions(stack)[r.request.headers["x-request-id"]]
    assert chosen[0] == f"127.0.0.1:{served_by(r)}"


# ---------------------------------------------------------------------------------- hermetic table


@pytest.mark.parametrize(
    ("case", "body", "headers", "status", "error_type"),
    [
        # GIE: 400 "inference error: BadRequest - error unmarshaling request bodyMap: invalid character ..."
        ("invalid json body", b"no healthy upstream", {"hi": "mom"}, 400, "invalid_request_error"),
        # GIE: 400 "inference error: BadRequest - model not found in request body"
        ("request missing model field", b'{"prompt":"hello world"}', {}, 400, "invalid_request_error"),
        # GIE: 503 "inference error: ServiceUnavailable - failed to find endpoint candidates ..."
        (
            "subsetting: no pods match",
            _body(),
            {SUBSET_HEADER: "192.168.1.99:8000"},
            503,
            "service_unavailable",
        ),
    ],
)
def test_rejections(
    stack: Stack, case: str, body: bytes, headers: dict[str, str], status: int, error_type: str
) -> None:
    error = _json_error(_post(stack, body, headers), status)
    assert error["type"] == error_type, case
    if "model" in case:
        assert "model" in error["message"]


def test_split_body_across_chunks_with_a_rewrite_header(stack: Stack) -> None:
    """GIE's "split body across chunks" / "passthrough: model not in objectives": the JSON body
    arrives in two chunks; the rewrite header names the model the server serves, the client's model
    name comes back in the response."""

    def chunks() -> Iterator[bytes]:
        yield b'{"max_tokens":3,"model":"sql-lo'
        time.sleep(0.05)  # Envoy forwards what it has: the picker gets the body in several messages
        yield b'ra-sheddable","prompt":"test6","temperature":0}'

    before = _metric(stack, "inference_objective_request_total", model_name=ALIAS, target_model_name=MODEL)
    r = _post(stack, chunks(), {OBJECTIVE: ALIAS, REWRITE: MODEL})
    _routed_as_decided(stack, r)
    assert r.json()["model"] == ALIAS
    after = _metric(stack, "inference_objective_request_total", model_name=ALIAS, target_model_name=MODEL)
    assert after == before + 1


def test_model_rewrite_in_buffered_and_streamed_responses(stack: Stack) -> None:
    """GIE's "rewrite request model": without the rewrite the servers answer 404 (unknown model)."""
    assert _post(stack, _body(model=ALIAS)).status_code == 404
    r = _post(stack, _body(model=ALIAS), {REWRITE: MODEL})
    _routed_as_decided(stack, r)
    assert r.json()["model"] == ALIAS
    body = _body(model=ALIAS, stream=True, max_tokens=5)
    with httpx.stream(
        "POST", f"{stack.base_url}/v1/completions", content=body, headers={REWRITE: MODEL}, timeout=30.0
    ) as streamed:
        assert streamed.status_code == 200
        frames = [line[6:] for line in streamed.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    assert {json.loads(f)["model"] for f in frames[:-1]} == {ALIAS}


def test_header_only_get_is_routed(stack: Stack) -> None:
    """GIE's "protocol: simple GET (header only)": no body, routed at once to an endpoint."""
    r = httpx.get(f"{stack.base_url}/v1/models", headers={"x-request-id": str(uuid.uuid4())}, timeout=10.0)
    _routed_as_decided(stack, r)
    assert MODEL in [m["id"] for m in r.json()["data"]]


@pytest.mark.parametrize("stream", [False, True], ids=["buffered-json", "sse"])
def test_response_usage_is_counted_exactly(stack: Stack, stream: bool) -> None:
    """GIE's "response buffering: multi-chunk JSON" and "response streaming: SSE token counting": the
    body passes through intact and the usage it reports becomes the token histograms, once."""
    names = ("input_tokens_sum", "input_tokens_count", "output_tokens_sum")
    assert eventually(lambda: _metric(stack, "inference_objective_running_requests") == 0)
    before = [_metric(stack, f"inference_objective_{n}") for n in names]
    extra: dict[str, object] = {"stream_options": {"include_usage": True}} if stream else {}
    body = _body(prompt="count these tokens " * 5, max_tokens=9, ignore_eos=True, stream=stream, **extra)
    with httpx.stream("POST", f"{stack.base_url}/v1/completions", content=body, timeout=30.0) as r:
        assert r.status_code == 200
        raw = r.read()
    if stream:
        frames = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
        assert frames[-1] == "[DONE]"
        usage = json.loads(frames[-2])["usage"]
    else:
        usage = json.loads(raw)["usage"]
    assert usage["completion_tokens"] == 9
    want = [before[0] + usage["prompt_tokens"], before[1] + 1, before[2] + 9]
    assert eventually(lambda: [_metric(stack, f"inference_objective_{n}") for n in names] == want), (
        [_metric(stack, f"inference_objective_{n}") for n in names],
        want,
    )


def test_no_endpoints(stack: Stack) -> None:
    """GIE's "no backend pods available": a header-only request on an empty pool is 500 (GIE: Internal,
    "no pods available in datastore"); a request with a body gets 503 as in GIE's admission. Runs last
    among the ``stack`` tests: it empties the pool, then restores it."""
    assert isinstance(stack, _FileStack)
    stack.write_endpoints([])
    try:
        assert eventually(lambda: httpx.get(f"{stack.metrics_url}/debug/endpoints", timeout=5).json() == [])
        error = _json_error(httpx.get(f"{stack.base_url}/v1/models", timeout=10.0), 500)
        assert error["type"] == "internal_error"
        assert _json_error(_post(stack, _body()), 503)["type"] == "service_unavailable"
    finally:
        stack.write_endpoints(stack.endpoints)
    assert eventually(lambda: _ready_count(stack) == 2)
    _routed_as_decided(stack, _post(stack, _body()))


# ------------------------------------------------------------------------------ conformance config


def test_conformance_pins_each_endpoint_and_reports_the_served_one(conformance: Stack) -> None:
    """GatewayFollowingEPPRouting / GatewayDestinationEndpointServed: each pinned request lands on the
    pinned endpoint, and the verifier reports what Envoy says served it."""
    for endpoint, port in zip(conformance.endpoints, conformance.ports.servers, strict=True):
        for _ in range(2):
            r = _post(conformance, _body(), {SELECT: endpoint})
            assert r.status_code == 200, r.text
            assert served_by(r) == port
            assert r.headers[SERVED] == endpoint


def test_conformance_ip_only_and_lists_select_within_them(conformance: Stack) -> None:
    """GatewayFollowingEPPRoutingWithDataParallelism: a bare IP allows every port of it; a list allows
    each entry; the reported endpoint is always the one that answered."""
    served = set()
    for header in ("127.0.0.1", ",".join(conformance.endpoints)):
        for _ in range(4):
            r = _post(conformance, _body(), {SELECT: header})
            assert r.status_code == 200, r.text
            assert r.headers[SERVED] == f"127.0.0.1:{served_by(r)}"
            served.add(served_by(r))
    assert served <= set(conformance.ports.servers)


@pytest.mark.parametrize("header", [None, "", "10.9.9.9:8000"], ids=["missing", "empty", "not-in-pool"])
def test_conformance_without_a_pinned_endpoint_is_unavailable(conformance: Stack, header: str | None) -> None:
    """As in GIE the testing filter keeps nothing without the header: the profile fails (503)."""
    r = _post(conformance, _body(), {} if header is None else {SELECT: header})
    assert _json_error(r, 503)["type"] == "service_unavailable"
    assert SERVED not in r.headers


def test_conformance_verifier_reports_missing_metadata(conformance: Stack) -> None:
    """Runs last: Envoy restarted without served-endpoint reporting. The verifier reads only what the
    proxy reports (never the picker's own choice), so it says the metadata is missing."""
    conformance.spec = replace(conformance.spec, report_served_endpoint=False)
    conformance.start_envoy("gie-fail-closed")
    r = _post(conformance, _body(), {SELECT: conformance.endpoints[0]})
    assert r.status_code == 200, r.text
    assert r.headers[SERVED] == "fail: missing destination endpoint served metadata"
