"""A vLLM model-server simulator for routing tests, demos and benchmarks (``epp-sim``).

The engine (:mod:`simulator.engine`) is sans-I/O and driven by an injected clock; the HTTP layer
(:mod:`simulator.server`, :mod:`simulator.api`) serves vLLM's API shapes and metrics on top of it.
"""

from simulator.config import PROFILES, ConfigError, LoraModule, SimConfig
from simulator.engine import Engine
from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer, load_tokenizer

__all__ = [
    "PROFILES",
    "ConfigError",
    "Engine",
    "LoraModule",
    "OfflineTokenizer",
    "SimConfig",
    "SimServer",
    "load_tokenizer",
]
