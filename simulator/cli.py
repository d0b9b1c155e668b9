"""``epp-sim``: run one or many simulated vLLM servers in one process.

Durations accept a unit suffix (``250us``, ``12ms``, ``1.5s``); a bare number means milliseconds for the
latency flags (as in llm-d-inference-sim) and seconds for ``--startup-duration``. A ``--profile`` sets
a group of fields; flags given explicitly win over the profile. With ``--ports A-B`` every port gets its
own engine; server ``i`` uses seed ``--seed + i``. Invalid flags print a message and exit with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import structlog

from scheduler.duration import go_duration
from simulator.config import (
    FAILURE_TYPES,
    PROFILES,
    ConfigError,
    LoraModule,
    SimConfig,
    apply_profile,
    validate,
)
from simulator.config_file import apply_config_file
from simulator.server import SimServer
from simulator.tokenizer import Tokenizer, TokenizerError, load_tokenizer

__all__ = [
    "build_configs",
    "main",
    "parse_args",
    "parse_duration",
    "parse_lora_modules",
    "parse_ports",
    "serve",
]

_NUMBER = re.compile(r"[0-9]*\.?[0-9]+")
_UNITS = {"ms": 1e-3, "s": 1.0}
_D = SimConfig()


def parse_duration(text: str, default_unit: str = "ms") -> float:
    """Seconds from a Go duration (``"12ms"`` -> 0.012; the picker's grammar, :mod:`scheduler.duration`)
    or a bare non-negative number in ``default_unit`` (``ms`` or ``s``); negative durations are refused."""
    try:
        seconds = float(text) * _UNITS[default_unit] if _NUMBER.fullmatch(text) else go_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 12ms, 250us or 1.5s, got {text!r}"
        ) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"expected a duration that is not negative, got {text!r}")
    return seconds


def _seconds(text: str) -> float:
    return parse_duration(text, "s")


def parse_ports(text: str) -> list[int]:
    """``"8000-8003"`` or ``"8000,8002"`` -> list of ports."""
    ports: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise argparse.ArgumentTypeError(f"expected ports like 8000-8007 or 8000,8001, got {text!r}")
        start, end = int(lo), int(hi) if sep else int(lo)
        if end < start or end > 65535:
            raise argparse.ArgumentTypeError(f"bad port range {part!r}")
        ports.extend(range(start, end + 1))
    if len(set(ports)) != len(ports):
        raise argparse.ArgumentTypeError(f"duplicate ports in {text!r}")
    return ports


def parse_lora_modules(items: Sequence[str]) -> tuple[LoraModule, ...]:
    """Each item is ``name=path`` or a JSON object ``{"name", "path", "base_model_name"}``."""
    out: list[LoraModule] = []
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                obj = json.loads(item)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"--lora-modules: invalid JSON {item!r}: {exc}") from exc
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                raise ConfigError(f"--lora-modules: expected an object with a string 'name', got {item!r}")
            out.append(LoraModule(obj["name"], str(obj.get("path", "")), str(obj.get("base_model_name", ""))))
        else:
            name, _, path = item.partition("=")
            if not name:
                raise ConfigError(f"--lora-modules: expected name=path or a JSON object, got {item!r}")
            out.append(LoraModule(name, path or name))
    return tuple(out)


def _parser() -> argparse.ArgumentParser:
    profiles = "; ".join(f"{k}: " + ", ".join(f"{f}={v}" for f, v in d.items()) for k, d in PROFILES.items())
    p = argparse.ArgumentParser(
        prog="epp-sim",
        description="Simulated vLLM model servers (OpenAI API, /metrics, KV cache, LoRA, queueing).",
        epilog="DURATION takes a unit suffix (us, ms, s). Profiles (seconds): " + profiles,
    )
    a = p.add_argument
    a("--model", help=f"base model name (default {_D.model})")
    a(
        "--served-model-name",
        nargs="+",
        dest="served_model_names",
        metavar="NAME",
        help="names clients use for the base model (default: --model)",
    )
    a("--host", help="bind address (default 127.0.0.1)")
    a("--port", type=int, help="one server on this port (default 8000; 0 picks a free port)")
    a("--ports", type=parse_ports, help="many servers, e.g. 8000-8007 or 8000,8002")
    a("--profile", choices=sorted(PROFILES), help="named latency profile (explicit flags override it)")
    a("--max-num-seqs", type=int, help=f"max running requests per server (default {_D.max_num_seqs})")
    a(
        "--max-waiting-queue-length",
        type=int,
        help=f"max queued requests; beyond it 429 (default {_D.max_waiting_queue_length})",
    )
    a("--max-model-len", type=int, help="max prompt+output tokens (default: kv-cache-size x block-size)")
    a("--block-size", type=int, help=f"tokens per KV block (default {_D.block_size})")
    a("--kv-cache-size", type=int, help=f"KV cache size in blocks (default {_D.kv_cache_size})")
    a("--max-loras", type=int, help=f"LoRA adapters resident at once (default {_D.max_loras})")
    a(
        "--lora-modules",
        nargs="+",
        metavar="MODULE",
        help="adapters: name=path or JSON {name,path,base_model_name}",
    )
    for flag, what in (
        ("--time-to-first-token", "fixed TTFT replacing the prefill formula (default 0 = off)"),
        ("--time-to-first-token-std-dev", "TTFT jitter std-dev (default 0)"),
        ("--prefill-overhead", "fixed prefill cost per request (default 0; 8b-h100: 30ms)"),
        ("--prefill-time-per-token", "prefill cost per uncached prompt token (default 0; 8b-h100: 250us)"),
        ("--inter-token-latency", "decode time per output token (default 0; 8b-h100: 12ms)"),
        ("--inter-token-latency-std-dev", "inter-token jitter std-dev (default 0)"),
        ("--lora-load-time", "time to load an adapter into a free or idle slot (default 0)"),
    ):
        a(flag, type=parse_duration, metavar="DURATION", help=what + "; a bare number is milliseconds")
    a(
        "--time-factor-under-load",
        type=float,
        help="latency multiplier with max-num-seqs running, linear in between (>= 1; default 1.0)",
    )
    a(
        "--prefill-slots",
        type=int,
        help="prefills running at once, later ones wait for a slot (default 0 = unlimited; 1 = serial GPU)",
    )
    a("--time-scale", type=float, help="run simulated time this many times faster (default 1.0)")
    a("--seed", type=int, help=f"random seed for output lengths and jitter (default {_D.seed})")
    a(
        "--failure-injection-rate",
        type=float,
        metavar="PERCENT",
        help="percent of inference requests failing with an injected error (0-100; default 0)",
    )
    a(
        "--failure-types",
        nargs="+",
        metavar="TYPE",
        help=f"failure kinds to inject: {', '.join(FAILURE_TYPES)} (default all)",
    )
    a(
        "--startup-duration",
        type=_seconds,
        metavar="DURATION",
        help="time before /health/ready turns 200; a bare number is seconds (default 0)",
    )
    a(
        "--default-max-tokens",
        type=int,
        help=f"output limit when a request sets none (default {_D.default_max_tokens})",
    )
    a(
        "--kv-events-endpoint",
        metavar="ENDPOINT",
        help="publish KV cache events on ZMQ: tcp://*:PORT binds, tcp://HOST:PORT connects; {port} and "
        "{port+N} expand to the server's HTTP port (+N), e.g. tcp://*:{port+1000}; several comma-separated "
        "endpoints publish to each (e.g. every picker replica's bound socket) (default off)",
    )
    a(
        "--kv-events-mode",
        choices=("auto", "bind", "connect"),
        help="bind or connect the KV events socket; auto: bind wildcard/ipc endpoints, else connect (vLLM)",
    )
    a(
        "--prefix-caching-hash-algo",
        choices=("builtin", "sha256", "sha256_cbor", "xxhash", "xxhash_cbor"),
        help="block hashing: vLLM's algorithms (seeded by $PYTHONHASHSEED as vLLM) or the fast built-in "
        "xxh64 chain; default sha256 (vLLM's) with --kv-events-endpoint, else builtin",
    )
    a("--pod-name", help="x-inference-pod header value (default $POD_NAME or epp-sim-<port>)")
    a(
        "--tokenizer",
        metavar="DIR",
        help="load DIR/tokenizer.json with the 'tokenizers' package (default: offline tokenizer)",
    )
    a("--config", metavar="FILE", help="YAML file of flag: value pairs; command-line flags win")
    a("--log-format", choices=("json", "console"), default="console", help="log format (default console)")
    a(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="log level; debug also logs every request (default info)",
    )
    return p  # fmt: skip


_CONFIG_FIELDS = {f.name for f in fields(SimConfig)}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line, then fill unset flags from ``--config`` (raises :class:`ConfigError`)."""
    parser = _parser()
    ns = parser.parse_args(argv)
    if ns.config:
        apply_config_file(parser, ns, ns.config)
    return ns


def build_configs(ns: argparse.Namespace) -> list[SimConfig]:
    """One validated config per port; raises :class:`ConfigError`."""
    given: dict[str, Any] = {k: v for k, v in vars(ns).items() if k in _CONFIG_FIELDS and v is not None}
    if "served_model_names" in given:
        given["served_model_names"] = tuple(given["served_model_names"])
    if "failure_types" in given:
        given["failure_types"] = tuple(given["failure_types"])
    if ns.lora_modules is not None:
        given["lora_modules"] = parse_lora_modules(ns.lora_modules)
    if "pod_name" not in given and os.environ.get("POD_NAME"):
        given["pod_name"] = os.environ["POD_NAME"]
    base = SimConfig()
    if ns.profile:
        base = apply_profile(base, ns.profile, set(given))
    base = replace(base, **given)
    if ns.ports is not None and ns.port is not None:
        raise ConfigError("--port and --ports are mutually exclusive")
    ports = ns.ports if ns.ports is not None else [base.port]
    return [validate(replace(base, port=port, seed=base.seed + i)) for i, port in enumerate(ports)]


def _configure_logging(fmt: str, level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), format="%(message)s", stream=sys.stderr)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())  # no ANSI codes in log files
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
    )


async def serve(
    configs: Sequence[SimConfig],
    tokenizer: Tokenizer,
    stop: asyncio.Event | None = None,
    access_log: bool = False,
) -> None:
    """Start every server, wait for ``stop`` (or SIGINT/SIGTERM), stop them all."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    servers = [SimServer(c, tokenizer, access_log=access_log) for c in configs]
    try:
        for s in servers:
            await s.start()
        await stop.wait()
    finally:
        for s in servers:
            await s.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    ns = parser.parse_args(argv)
    try:
        if ns.config:
            apply_config_file(parser, ns, ns.config)
        configs = build_configs(ns)
        tokenizer = load_tokenizer(ns.tokenizer)
    except (ConfigError, TokenizerError) as exc:
        parser.error(str(exc))  # exits with status 2
    _configure_logging(ns.log_format, ns.log_level)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(serve(configs, tokenizer, access_log=ns.log_level == "debug"))
    except OSError as exc:
        print(f"epp-sim: cannot serve: {exc}", file=sys.stderr)
        return 1
    return 0
