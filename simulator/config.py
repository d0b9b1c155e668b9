"""Configuration of one simulated vLLM server, and the named latency profiles.

:class:`SimConfig` is a frozen value; :func:`validate` checks every field and raises
:class:`ConfigError` naming the field and the expectation. Units: times are in *simulated* seconds
(the CLI takes milliseconds/microseconds and converts), sizes in tokens or blocks. ``time_scale``
divides every real wait: 10.0 runs the same model ten times faster (metrics still report simulated
seconds, so a picker sees vLLM-like numbers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

HASH_ALGOS = ("", "builtin", "sha256", "sha256_cbor", "xxhash", "xxhash_cbor")

__all__ = ["FAILURE_TYPES", "PROFILES", "ConfigError", "LoraModule", "SimConfig", "apply_profile", "validate"]

# failure type -> (HTTP status, OpenAI error type, message), as llm-d-inference-sim names them.
FAILURE_TYPES: Mapping[str, tuple[int, str, str]] = {
    "rate_limit": (429, "RateLimitError", "Rate limit reached"),
    "invalid_api_key": (401, "AuthenticationError", "Incorrect API key provided"),
    "context_length": (400, "BadRequestError", "This model's maximum context length is exceeded"),
    "server_error": (500, "InternalServerError", "The server had an error while processing your request"),
    "invalid_request": (400, "BadRequestError", "Invalid request: injected failure"),
    "model_not_found": (404, "NotFoundError", "The model does not exist"),
}


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what was expected."""


@dataclass(frozen=True, slots=True)
class LoraModule:
    """A LoRA adapter known to the server at start (``--lora-modules``)."""

    name: str
    path: str = ""
    base_model_name: str = ""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything that defines one simulated server. See ``epp-sim --help`` for the meaning of each."""

    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    served_model_names: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    max_num_seqs: int = 5
    max_waiting_queue_length: int = 1000
    max_model_len: int = 0  # 0 -> kv_cache_size x block_size
    block_size: int = 16
    kv_cache_size: int = 1024
    max_loras: int = 1
    lora_modules: tuple[LoraModule, ...] = ()
    time_to_first_token: float = 0.0  # seconds; > 0 replaces the prefill formula
    time_to_first_token_std_dev: float = 0.0
    prefill_overhead: float = 0.0
    prefill_time_per_token: float = 0.0
    inter_token_latency: float = 0.0
    inter_token_latency_std_dev: float = 0.0
    time_factor_under_load: float = 1.0
    prefill_slots: int = 0  # prefills running at once; 0 = unlimited (llm-d-inference-sim's model)
    lora_load_time: float = 0.0
    time_scale: float = 1.0
    seed: int = 0
    failure_injection_rate: float = 0.0  # percent, 0-100
    failure_types: tuple[str, ...] = ()
    startup_duration: float = 0.0  # real seconds
    default_max_tokens: int = 128
    pod_name: str = ""
    kv_events_endpoint: str = ""  # ZMQ endpoint for KV events ("" = off); may contain {port} / {port+N}
    kv_events_mode: str = "auto"  # auto (vLLM's rule) | bind | connect
    # block hashing: "" = vLLM's default (sha256) with KV events on, the fast built-in xxh64 chain otherwise
    prefix_caching_hash_algo: str = ""

    @property
    def served_names(self) -> tuple[str, ...]:
        """The names clients may use for the base model (``--served-model-name`` or ``--model``)."""
        return self.served_model_names or (self.model,)

    @property
    def metric_model_name(self) -> str:
        """The ``model_name`` label value: the first served name, as vLLM does."""
        return self.served_names[0]

    @property
    def effective_max_model_len(self) -> int:
        return self.max_model_len or self.kv_cache_size * self.block_size


# Named latency profiles; explicit flags override their fields.
PROFILES: Mapping[str, Mapping[str, Any]] = {
    "8b-h100": {
        "max_num_seqs": 16,
        "inter_token_latency": 0.012,
        "prefill_overhead": 0.030,
        "prefill_time_per_token": 0.000250,
        "time_factor_under_load": 2.0,
        "kv_cache_size": 1024,
        "block_size": 16,
    },
}


def apply_profile(config: SimConfig, profile: str, overridden: set[str]) -> SimConfig:
    """Return ``config`` with the profile's fields set, except those in ``overridden``."""
    if profile not in PROFILES:
        raise ConfigError(f"--profile: unknown profile {profile!r}; expected one of {sorted(PROFILES)}")
    values = {k: v for k, v in PROFILES[profile].items() if k not in overridden}
    return replace(config, **values)


def _require(ok: bool, name: str, expectation: str, value: object) -> None:
    if not ok:
        raise ConfigError(f"{name}: expected {expectation}, got {value!r}")


def validate(c: SimConfig) -> SimConfig:
    """Check every field; return ``c`` unchanged or raise :class:`ConfigError`."""
    _require(bool(c.model), "--model", "a non-empty model name", c.model)
    _require(0 <= c.port <= 65535, "--port", "a port number 0-65535", c.port)
    _require(c.max_num_seqs >= 1, "--max-num-seqs", "an integer >= 1", c.max_num_seqs)
    _require(c.max_waiting_queue_length >= 0, "--max-waiting-queue-length", "an integer >= 0",
             c.max_waiting_queue_length)  # fmt: skip
    _require(c.block_size >= 1, "--block-size", "an integer >= 1 (tokens per block)", c.block_size)
    _require(c.kv_cache_size >= 1, "--kv-cache-size", "an integer >= 1 (blocks)", c.kv_cache_size)
    _require(c.max_model_len >= 0, "--max-model-len", "an integer >= 0", c.max_model_len)
    _require(c.prefill_slots >= 0, "--prefill-slots", "an integer >= 0 (0 = unlimited)", c.prefill_slots)
    _require(c.max_loras >= 1, "--max-loras", "an integer >= 1", c.max_loras)
    for name in ("time_to_first_token", "time_to_first_token_std_dev", "prefill_overhead",
                 "prefill_time_per_token", "inter_token_latency", "inter_token_latency_std_dev",
                 "lora_load_time", "startup_duration"):  # fmt: skip
        value = getattr(c, name)
        _require(value >= 0, "--" + name.replace("_", "-"), "a number >= 0", value)
    _require(c.time_factor_under_load >= 1.0, "--time-factor-under-load", "a number >= 1.0",
             c.time_factor_under_load)  # fmt: skip
    _require(c.time_scale > 0, "--time-scale", "a number > 0", c.time_scale)
    _require(0 <= c.failure_injection_rate <= 100, "--failure-injection-rate", "a percentage 0-100",
             c.failure_injection_rate)  # fmt: skip
    for ft in c.failure_types:
        _require(ft in FAILURE_TYPES, "--failure-types", f"names from {sorted(FAILURE_TYPES)}", ft)
    _require(c.default_max_tokens >= 1, "--default-max-tokens", "an integer >= 1", c.default_max_tokens)
    _require(c.kv_events_endpoint == "" or all(e.startswith(("tcp://", "ipc://", "inproc://"))
                                               for e in c.kv_events_endpoint.split(",")),
             "--kv-events-endpoint", "a ZMQ endpoint like tcp://*:{port+1000} or tcp://picker:5557",
             c.kv_events_endpoint)  # fmt: skip
    _require(c.kv_events_mode in ("auto", "bind", "connect"), "--kv-events-mode", "auto, bind or connect",
             c.kv_events_mode)  # fmt: skip
    _require(c.prefix_caching_hash_algo in HASH_ALGOS, "--prefix-caching-hash-algo",
             "one of " + ", ".join(a for a in HASH_ALGOS if a), c.prefix_caching_hash_algo)  # fmt: skip
    names = [m.name for m in c.lora_modules]
    _require(len(names) == len(set(names)), "--lora-modules", "unique adapter names", names)
    for m in c.lora_modules:
        _require(bool(m.name) and m.name not in c.served_names, "--lora-modules",
                 "adapter names that are non-empty and differ from the base model", m.name)  # fmt: skip
    return c
