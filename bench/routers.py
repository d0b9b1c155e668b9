"""The routers the benchmark compares, and how each is started in front of a fresh simulated fleet.

A :class:`RouterSpec` names one router: ``envoy`` with a load-balancing policy (``ROUND_ROBIN``,
``LEAST_REQUEST``; Envoy's config is the repository's ``round-robin`` variant with ``lb_policy``
replaced), ``vllm-router`` with a ``--policy``, or ``picker`` (our EPP behind Envoy's GIE fail-closed
config) with an ``EndpointPickerConfig`` text (``""`` = the built-in default), ``replicas`` picker
processes (2: active-active, Envoy's ``endpoint_picker`` cluster round-robins the ext_proc streams over
both; with KV events each replica binds its own socket and every server publishes to both, as in
llm-d's central mode with several replicas; with ``sync`` the replicas also share prefix ownership and
in-flight counts over ``--replica-sync-port``, the ``-sync-x2`` routers). :func:`running_router`
starts the fleet (:class:`devtools.stack.Stack`, every server a fresh ``epp-sim`` process with cold caches),
then the router, waits until a request gets through, yields a :class:`RunningRouter` and stops
everything on exit (also on errors and interrupts).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import string
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import yaml

from devtools.envoy_config import envoy_binary, render
from devtools.stack import ManagedProcess, Stack, StackError, StackSpec, free_ports
from scheduler.config.defaults import DEFAULT_CONFIG_TEXT

__all__ = [
    "GIE_DEFAULT_CONFIG",
    "LOAD_ONLY_CONFIG",
    "PRECISE_CONFIG",
    "PREDICTED_CONFIG",
    "PREDICTED_PRECISE_CONFIG",
    "PREFIX_ONLY_CONFIG",
    "ROUTERS",
    "TUNED_CONFIG",
    "RouterSpec",
    "RunningRouter",
    "bench_kv_events",
    "precise_profile",
    "running_router",
    "vllm_router_binary",
]

CONFIG_DIR = Path(__file__).resolve().parents[1] / "deploy" / "configs"

# The picker profiles compared in the report, shipped as ready-to-use files in deploy/configs/:
# load-only and prefix-only baselines, and the tuned profile measured against GIE's default there.
LOAD_ONLY_CONFIG = (CONFIG_DIR / "load-only.yaml").read_text()
PREFIX_ONLY_CONFIG = (CONFIG_DIR / "prefix-only.yaml").read_text()
TUNED_CONFIG = (CONFIG_DIR / "tuned.yaml").read_text()
GIE_DEFAULT_CONFIG = (CONFIG_DIR / "gie-default.yaml").read_text()
# The placeholders a KV-event profile's text carries; running_router fills them in.
_PLACEHOLDERS = ("model", "render_url", "hash_seed", "kv_events_port", "tokenizer")


def precise_profile(default_text: str = DEFAULT_CONFIG_TEXT, local: bool = False) -> str:
    """``default_text`` (the built-in default profile) with the exact prefix scorer in place of the
    approximate one, same weight and place, every other plugin and weight as they are there. The servers
    publish vLLM KV events to the picker's bound socket (``{kv_events_port}``); a sidecar epp-sim renders
    prompts (``{render_url}``) for the ``token-producer`` put first, as llm-d runs ``vllm launch render``
    beside its picker. No ``speculativeIndexing``: the affinity scorer already keeps a prefix on its owner
    between dispatch and the owner's events. With ``local``, no token-producer and no sidecar: the precise
    scorer tokenises in process (``indexerConfig.tokenizersPoolConfig``, local backend) from the fleet's
    ``tokenizer.json`` (``{tokenizer}``). Returns a ``str.format`` template of those placeholders."""
    doc = yaml.safe_load(default_text)
    doc["apiVersion"] = "llm-d.ai/v1alpha1"  # token-producer and the precise scorer are llm-d's types
    mark = {name: f"@@{name}@@" for name in _PLACEHOLDERS}
    precise: dict[str, Any] = {
        "type": "precise-prefix-cache-scorer",
        "parameters": {
            "tokenProcessorConfig": {"blockSize": 16, "hashSeed": mark["hash_seed"]},
            "kvEventsConfig": {"zmqEndpoint": f"tcp://127.0.0.1:{mark['kv_events_port']}"},
        },
    }
    if local:
        pool = {
            "modelName": mark["model"],
            "local": {"modelTokenizerMap": {mark["model"]: mark["tokenizer"]}},
        }
        precise["parameters"]["indexerConfig"] = {"tokenizersPoolConfig": pool}
    refs = [p.get("name", p["type"]) for p in doc["plugins"] if p["type"] == "prefix-cache-scorer"]
    if len(refs) != 1:
        raise ValueError(f"expected one prefix-cache-scorer in the default profile, found {len(refs)}")
    producer = {
        "type": "token-producer",
        "parameters": {"modelName": mark["model"], "vllm": {"url": mark["render_url"]}},
    }
    doc["plugins"] = [
        *([] if local else [producer]),
        *(precise if p["type"] == "prefix-cache-scorer" else p for p in doc["plugins"]),
    ]
    for profile in doc["schedulingProfiles"]:
        for ref in profile["plugins"]:
            if ref["pluginRef"] == refs[0]:
                ref["pluginRef"] = "precise-prefix-cache-scorer"
    text = yaml.safe_dump(doc, sort_keys=False).replace("{", "{{").replace("}", "}}")
    for name, marker in mark.items():
        text = text.replace(marker, "{" + name + "}")
    return text


PRECISE_CONFIG = precise_profile()
PRECISE_LOCAL_CONFIG = precise_profile(local=True)


def write_bench_tokenizer(directory: Path) -> Path:
    """The ``tokenizer.json`` of the fleets started with ``--tokenizer`` (``picker-precise-local``,
    ``picker-default-tokenizer``), written to ``directory``: a WordLevel vocabulary built from code, not
    trained and never downloaded, so every run writes the same file: ``[UNK]``, then the workloads'
    synthetic words (:data:`simulator.workloads.VOCAB`, one word one token, as for ``epp-sim``'s offline
    tokenizer, so prompts keep their token counts), the pieces of the simulator's chat markers (``<|``,
    role names, ``|>``), ASCII letters, digits and punctuation; whitespace pre-tokenisation (``\\w+`` and
    runs of punctuation); no special tokens added to prompts. Returns the file."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from simulator.workloads import VOCAB

    pieces = ["<|", "|>", "system", "user", "assistant", "tool", *string.ascii_letters, *string.digits]
    vocab: dict[str, int] = {"[UNK]": 0}
    for piece in (*VOCAB, *pieces, *string.punctuation):
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


def with_placement(text: str, placement: str, spill: str = "") -> str:
    """``text`` (a profile without placeholders) with ``newPrefixPlacement: <placement>`` on its
    prefix-affinity-scorer (``hash``: new prefixes placed by rendezvous hashing, the same on every
    replica; ``load``: by the load scorers alone; ``balanced``: by them among the endpoints holding at
    most the mean footprint of placed prefixes)."""
    doc = yaml.safe_load(text)
    found = [p for p in doc["plugins"] if p["type"] == "prefix-affinity-scorer"]
    if len(found) != 1:
        raise ValueError(f"expected one prefix-affinity-scorer in the profile, found {len(found)}")
    extra = {"spillPlacement": spill} if spill else {}
    found[0]["parameters"] = {**(found[0].get("parameters") or {}), "newPrefixPlacement": placement, **extra}
    return yaml.safe_dump(doc, sort_keys=False)


def hash_placement(text: str) -> str:
    """``text`` with ``newPrefixPlacement: hash`` (:func:`with_placement`)."""
    return with_placement(text, "hash")


DEFAULT_HASH_CONFIG = hash_placement(DEFAULT_CONFIG_TEXT)
DEFAULT_LOAD_CONFIG = with_placement(DEFAULT_CONFIG_TEXT, "load")
DEFAULT_BALANCED_CONFIG = with_placement(DEFAULT_CONFIG_TEXT, "balanced")
DEFAULT_LOAD_SPILLS_CONFIG = with_placement(DEFAULT_CONFIG_TEXT, "load", "load")
PRECISE_HASH_CONFIG = precise_profile(DEFAULT_HASH_CONFIG)
PREDICTED_CONFIG = (CONFIG_DIR / "predicted-latency.yaml").read_text()


def bench_kv_events(text: str) -> str:
    """``text`` (a shipped profile with a ``token-producer`` and one ``precise-prefix-cache-producer``
    or ``-scorer``) wired to the benchmark's fleet as :func:`precise_profile` wires the default: the
    token-producer renders on the epp-sim sidecar (``{render_url}``, ``{model}``), the precise index uses
    the servers' hash seed (``{hash_seed}``) and binds the socket they publish their KV events to
    (``{kv_events_port}``, llm-d's central mode); every other plugin and parameter as shipped. Returns
    a ``str.format`` template of those placeholders."""
    doc = yaml.safe_load(text)
    mark = {name: f"@@{name}@@" for name in _PLACEHOLDERS}
    tokens = [p for p in doc["plugins"] if p["type"] == "token-producer"]
    precise = [p for p in doc["plugins"] if p["type"].startswith("precise-prefix-cache-")]
    if len(tokens) != 1 or len(precise) != 1:
        raise ValueError(
            f"expected one token-producer and one precise-prefix-cache-producer/-scorer in the profile, "
            f"found {len(tokens)} and {len(precise)}"
        )
    tokens[0]["parameters"] = {"modelName": mark["model"], "vllm": {"url": mark["render_url"]}}
    params = dict(precise[0].get("parameters") or {})
    params["tokenProcessorConfig"] = {
        **(params.get("tokenProcessorConfig") or {}),
        "hashSeed": mark["hash_seed"],
    }
    params["kvEventsConfig"] = {"zmqEndpoint": f"tcp://127.0.0.1:{mark['kv_events_port']}"}
    precise[0]["parameters"] = params
    out = yaml.safe_dump(doc, sort_keys=False).replace("{", "{{").replace("}", "}}")
    for name, marker in mark.items():
        out = out.replace(marker, "{" + name + "}")
    return out


PREDICTED_PRECISE_CONFIG = bench_kv_events((CONFIG_DIR / "predicted-latency-precise.yaml").read_text())


def with_speculative(template: str, speculative: bool) -> str:
    """``template`` (a :func:`bench_kv_events` template) with ``speculativeIndexing: <speculative>`` on its
    precise producer: a dispatched request's blocks count as held by its endpoint until the server's
    events arrive (``speculativeTTL``, 2s)."""
    marker = "    kvEventsConfig:\n"
    if template.count(marker) != 1:
        raise ValueError("expected one kvEventsConfig in the template")
    return template.replace(marker, f"    speculativeIndexing: {str(speculative).lower()}\n" + marker)


PREDICTED_PRECISE_SPECULATIVE_CONFIG = with_speculative(PREDICTED_PRECISE_CONFIG, True)


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """One router line of the report. ``option`` is the Envoy lb_policy or the vllm-router policy;
    ``config`` the picker's EndpointPickerConfig text (``""``: built-in default)."""

    name: str
    kind: str  # envoy | vllm-router | picker
    option: str = ""
    config: str = ""
    extra_args: tuple[str, ...] = ()
    replicas: int = 1  # picker processes behind the one Envoy (active-active; ext_proc load-balanced)
    sync: bool = False  # with replicas > 1: the pickers share ownership and load (--replica-sync-port)
    tokenizer: bool = (
        False  # the servers run `--tokenizer DIR` (write_bench_tokenizer; {tokenizer} in config)
    )


ROUTERS: dict[str, RouterSpec] = {
    r.name: r
    for r in (
        RouterSpec("envoy-round-robin", "envoy", "ROUND_ROBIN"),
        RouterSpec("envoy-least-request", "envoy", "LEAST_REQUEST"),
        RouterSpec("vllm-router-round-robin", "vllm-router", "round_robin"),
        RouterSpec("vllm-router-cache-aware", "vllm-router", "cache_aware"),
        RouterSpec("vllm-router-power-of-two", "vllm-router", "power_of_two"),
        RouterSpec("picker-default", "picker"),
        RouterSpec("picker-load-only", "picker", config=LOAD_ONLY_CONFIG),
        RouterSpec("picker-prefix-only", "picker", config=PREFIX_ONLY_CONFIG),
        RouterSpec("picker-tuned", "picker", config=TUNED_CONFIG),
        RouterSpec("picker-gie-default", "picker", config=GIE_DEFAULT_CONFIG),
        RouterSpec("picker-precise", "picker", config=PRECISE_CONFIG),
        RouterSpec("picker-precise-local", "picker", config=PRECISE_LOCAL_CONFIG, tokenizer=True),
        RouterSpec("picker-default-tokenizer", "picker", tokenizer=True),
        RouterSpec("picker-predicted", "picker", config=PREDICTED_CONFIG),
        RouterSpec("picker-predicted-precise", "picker", config=PREDICTED_PRECISE_CONFIG),
        RouterSpec("picker-predicted-precise-spec", "picker", config=PREDICTED_PRECISE_SPECULATIVE_CONFIG),
        RouterSpec("picker-default-x2", "picker", replicas=2),
        RouterSpec("picker-precise-x2", "picker", config=PRECISE_CONFIG, replicas=2),
        RouterSpec("picker-default-hash", "picker", config=DEFAULT_HASH_CONFIG),
        RouterSpec("picker-default-load", "picker", config=DEFAULT_LOAD_CONFIG),
        RouterSpec("picker-default-balanced", "picker", config=DEFAULT_BALANCED_CONFIG),
        RouterSpec("picker-default-load-spills", "picker", config=DEFAULT_LOAD_SPILLS_CONFIG),
        RouterSpec("picker-default-hash-x2", "picker", config=DEFAULT_HASH_CONFIG, replicas=2),
        RouterSpec("picker-precise-hash", "picker", config=PRECISE_HASH_CONFIG),
        RouterSpec("picker-precise-hash-x2", "picker", config=PRECISE_HASH_CONFIG, replicas=2),
        RouterSpec("picker-default-sync-x2", "picker", replicas=2, sync=True),
        RouterSpec("picker-precise-sync-x2", "picker", config=PRECISE_CONFIG, replicas=2, sync=True),
    )
}


@dataclass(slots=True)
class RunningRouter:
    """Addresses of a started router and its fleet."""

    spec: RouterSpec
    base_url: str
    server_urls: list[str]
    server_labels: list[str]  # the x-inference-port value each server answers with
    picker_pid: int | None = None
    picker_metrics_url: str = ""
    processes: list[ManagedProcess] = field(default_factory=list)
    replica_metrics_urls: list[str] = field(default_factory=list)  # every picker's, the first one's first


def vllm_router_binary(python: str) -> Path:
    return Path(python).with_name("vllm-router")


def _envoy_config(stack: Stack, policy: str, path: Path) -> Path:
    doc = render("round-robin", stack.envoy_params())
    for cluster in doc["static_resources"]["clusters"]:
        if cluster["name"] == "model_servers":
            cluster["lb_policy"] = policy
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _wait_ready(proc: ManagedProcess, probe: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.running():
            raise proc.fail("exited before it was ready")
        if probe():
            return
        time.sleep(0.1)
    raise proc.fail(f"not ready after {timeout_s:.0f}s")


def _probe(url: str, model: str) -> Callable[[], bool]:
    body = {"model": model, "prompt": "ready", "max_tokens": 1}

    def ok() -> bool:
        try:
            return httpx.post(url + "/v1/completions", json=body, timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    return ok


def _start_replicas(
    stack: Stack, texts: Sequence[str], workdir: Path, timeout_s: float, sync_ports: Sequence[int] = ()
) -> list[tuple[ManagedProcess, int, str]]:
    """Further picker processes (with their gRPC ports and metrics URLs), each with its own ports and
    ``texts[i]`` as its ``--config-text`` (when the stack's picker has one), and ``sync_ports[i]`` as
    its ``--replica-sync-port`` (when the stack's picker has one)."""
    out: list[tuple[ManagedProcess, int, str]] = []
    for i, text in enumerate(texts, start=2):
        grpc, health, metrics = free_ports(3)
        argv = stack.picker_argv()
        for flag, value in (
            ("--grpc-port", grpc),
            ("--grpc-health-port", health),
            ("--metrics-port", metrics),
            *([("--replica-sync-port", sync_ports[i - 2])] if sync_ports else []),
        ):
            argv[argv.index(flag) + 1] = str(value)
        if "--config-text" in argv:
            argv[len(argv) - argv[::-1].index("--config-text")] = text  # the last --config-text's value
        proc = ManagedProcess(f"picker-{i}", argv, workdir / f"picker-{i}.log")
        proc.start()
        out.append((proc, grpc, f"http://127.0.0.1:{metrics}"))
        _wait_ready(proc, partial(_http_ok, f"http://127.0.0.1:{metrics}/metrics"), timeout_s)
    return out


def _balance_ext_proc(
    stack: Stack, replicas: Sequence[tuple[ManagedProcess, int, str]], workdir: Path
) -> None:
    """Restart the stack's Envoy with every picker in its ``endpoint_picker`` cluster (round robin)."""
    doc = render("gie-fail-closed", stack.envoy_params())
    cluster = next(c for c in doc["static_resources"]["clusters"] if c["name"] == "endpoint_picker")
    hosts = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    for _proc, port, _url in replicas:
        hosts.append(
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
        )
    path = workdir / "envoy-active-active.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    if stack.envoy is not None:
        stack.envoy.stop()
    argv = [str(envoy_binary()), "-c", str(path), "--concurrency", "1", "--log-level", "warn",
            "--disable-hot-restart"]  # fmt: skip
    stack.envoy = ManagedProcess("envoy-active-active", argv, workdir / "envoy-active-active.log")
    stack.envoy.start()
    _wait_ready(stack.envoy, lambda: _http_ok(f"{stack.admin_url}/ready"), 30.0)


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def running_router(
    spec: RouterSpec,
    *,
    servers: int,
    sim_args: Sequence[str],
    model: str,
    server_args: Sequence[Sequence[str]] = (),
    workdir: Path,
    picker_args: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _m: None,
    ready_timeout_s: float = 60.0,
) -> Iterator[RunningRouter]:
    """Start a fresh fleet and ``spec``'s router; stop both on exit."""
    if spec.kind not in ("envoy", "vllm-router", "picker"):
        raise ValueError(
            f"router {spec.name!r}: kind must be envoy, vllm-router or picker, got {spec.kind!r}"
        )
    sync_args: list[str] = []
    sync_ports: list[int] = []
    if spec.sync and spec.replicas > 1:  # every replica lists them all; each skips its own address
        workdir.mkdir(parents=True, exist_ok=True)
        sync_ports = free_ports(spec.replicas)
        key_file = workdir / "replica-sync.key"
        key_file.write_text(secrets.token_hex(32), encoding="utf-8")
        key_file.chmod(0o600)
        sync_args = ["--replica-sync-port", str(sync_ports[0]),
                     "--replica-peers", ",".join(f"127.0.0.1:{p}" for p in sync_ports),
                     "--replica-sync-key-file", str(key_file)]  # fmt: skip
    args = [*picker_args, *spec.extra_args, *sync_args]
    if spec.config:
        args += ["--config-text", spec.config]
    tokenizer = ""
    if spec.tokenizer:
        tokenizer = str(write_bench_tokenizer(workdir / "tokenizer"))
        sim_args = [*sim_args, "--tokenizer", str(Path(tokenizer).parent)]
    stack_spec = StackSpec(
        servers=servers,
        sim_args=tuple(sim_args),
        server_args=tuple(tuple(a) for a in server_args),
        picker=spec.kind == "picker",
        picker_args=tuple(args),
        envoy_variant="gie-fail-closed" if spec.kind == "picker" else None,
        ready_timeout_s=ready_timeout_s,
    )
    workdir.mkdir(parents=True, exist_ok=True)
    stack = Stack(stack_spec, workdir=workdir, progress=progress)
    sidecar: ManagedProcess | None = None
    render_port = 0
    texts = [spec.config] * spec.replicas  # each replica's config text
    if spec.kind == "picker" and "{kv_events_port}" in spec.config:  # KV events: fill in the ports
        *kv_ports, render_port = free_ports(spec.replicas + 1)
        if "{render_url}" in spec.config:  # a token-producer renders on a sidecar epp-sim
            render_argv = [stack.python, "-m", "simulator", "--host", "127.0.0.1", "--port", str(render_port),
                           "--model", model, "--profile", "8b-h100"]  # fmt: skip
            if tokenizer:
                render_argv += ["--tokenizer", str(Path(tokenizer).parent)]
            sidecar = ManagedProcess("render-sidecar", render_argv, workdir / "render-sidecar.log")
        texts = [
            spec.config.format(
                model=model,
                render_url=f"http://127.0.0.1:{render_port}",
                hash_seed=os.environ.get("PYTHONHASHSEED", ""),
                kv_events_port=kv_port,
                tokenizer=tokenizer,
            )
            for kv_port in kv_ports
        ]
        publish_to = ",".join(f"tcp://127.0.0.1:{p}" for p in kv_ports)
        stack.spec = dataclasses.replace(
            stack_spec,
            sim_args=(*stack_spec.sim_args, "--kv-events-endpoint", publish_to),
            picker_args=(*picker_args, *spec.extra_args, *sync_args, "--config-text", texts[0]),
        )
    extra: list[ManagedProcess] = []
    replica_urls: list[str] = []
    try:
        if sidecar is not None:
            progress("starting the render sidecar")
            sidecar.start()
            _wait_ready(sidecar, _probe(f"http://127.0.0.1:{render_port}", model), ready_timeout_s)
        stack.start()
        base_url = stack.base_url
        if spec.kind == "envoy":
            config = _envoy_config(stack, spec.option, workdir / f"envoy-{spec.option.lower()}.yaml")
            argv = [str(envoy_binary()), "-c", str(config), "--concurrency", "1", "--log-level", "warn",
                    "--disable-hot-restart"]  # fmt: skip
            extra.append(ManagedProcess("envoy-lb", argv, workdir / "envoy-lb.log"))
        elif spec.kind == "vllm-router":
            port, prom = free_ports(2)
            base_url = f"http://127.0.0.1:{port}"
            argv = [str(vllm_router_binary(stack.python)), "--host", "127.0.0.1", "--port", str(port),
                    "--policy", spec.option, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom),
                    "--log-level", "warning", "--worker-urls",
                    *[stack.server_url(i) for i in range(servers)]]  # fmt: skip
            extra.append(ManagedProcess(f"vllm-router-{spec.option}", argv, workdir / "vllm-router.log"))
        for proc in extra:
            progress(f"starting {proc.name}")
            proc.start()
            _wait_ready(proc, _probe(base_url, model), ready_timeout_s)
        if spec.kind == "picker":
            if stack.picker is None:
                raise StackError("the picker did not start")
            if spec.replicas > 1:
                replicas = _start_replicas(stack, texts[1:], workdir, ready_timeout_s, sync_ports[1:])
                extra.extend(proc for proc, _port, _url in replicas)
                replica_urls.extend(url for _proc, _port, url in replicas)
                _balance_ext_proc(stack, replicas, workdir)
            _wait_ready(stack.picker, _probe(base_url, model), ready_timeout_s)
        yield RunningRouter(
            spec=spec,
            base_url=base_url,
            server_urls=[stack.server_url(i) for i in range(servers)],
            server_labels=[str(p) for p in stack.ports.servers],
            picker_pid=stack.picker.pid if spec.kind == "picker" and stack.picker else None,
            picker_metrics_url=stack.metrics_url if spec.kind == "picker" else "",
            processes=[*stack.servers, *extra],
            replica_metrics_urls=[stack.metrics_url, *replica_urls] if spec.kind == "picker" else [],
        )
    finally:
        for proc in extra:
            proc.stop()
        if sidecar is not None:
            sidecar.stop()
        stack.close()
