"""KV cache events in vLLM's wire format, and a ZMQ publisher for them.

Values (:class:`BlockStored`, :class:`BlockRemoved`, :class:`AllBlocksCleared`) are produced by the
sans-I/O :class:`~simulator.kv_cache.KVCache` when event recording is on. :class:`ZmqKVEventPublisher`
sends each batch as the three-frame ZMQ message vLLM's ``ZmqEventPublisher`` sends::

    [topic, 8-byte big-endian sequence number, msgpack([timestamp, [event, ...], data_parallel_rank])]

with events encoded as tagged arrays (msgspec ``array_like``)::

    ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
     extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window]
    ["BlockRemoved", block_hashes, medium, group_idx]
    ["AllBlocksCleared"]

(the last four BlockStored fields and ``group_idx`` are None, as a single-group vLLM server sends them;
the bytes equal msgspec's encoding of vLLM's structs). Block hashes are the cache's 64-bit chained
hashes: vLLM's own (``--prefix-caching-hash-algo``, the default with events on) or the built-in chain;
``lora_id`` is ``xxh32(lora_name) & 0x7fffffff``
(None for the base model); ``medium`` is ``"GPU"``. The topic is ``kv@<host>:<port>@<model>``. As in
vLLM, a wildcard endpoint (``tcp://*:5557``) or an ``ipc://``/``inproc://`` one is bound (subscribers
connect to it); any other is connected to (e.g. a picker's bound SUB socket); ``bind=True/False``
overrides the rule (``tcp://127.0.0.1:5557`` bound for a local subscriber such as vllm-router). ``pyzmq`` and
``msgpack`` are imported only when a publisher is built.
Sending never blocks: when the subscriber is slow the high-water mark drops messages (the sequence
number then shows the gap), never the server.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "KVEvent",
    "ZmqKVEventPublisher",
    "binds",
    "encode_event",
    "expand_endpoint",
    "lora_id",
]

MEDIUM = "GPU"


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_name: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


def lora_id(name: str | None) -> int | None:
    return None if name is None else xxhash.xxh32_intdigest(name.encode()) & 0x7FFFFFFF


def encode_event(event: KVEvent) -> list[Any]:
    """The msgspec ``array_like`` tagged form vLLM publishes (every field, trailing ones None)."""
    if isinstance(event, BlockStored):
        return ["BlockStored", list(event.block_hashes), event.parent_block_hash, list(event.token_ids),
                event.block_size, lora_id(event.lora_name), MEDIUM, event.lora_name,
                None, None, None, None]  # fmt: skip
    if isinstance(event, BlockRemoved):
        return ["BlockRemoved", list(event.block_hashes), MEDIUM, None]
    return ["AllBlocksCleared"]


def binds(endpoint: str) -> bool:
    """vLLM's rule: wildcard hosts and ipc/inproc endpoints are bound, anything else is connected to."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


_PORT = re.compile(r"\{port(?:\+(\d+))?\}")


def expand_endpoint(template: str, port: int) -> str:
    """Replace ``{port}`` / ``{port+N}`` with the server's HTTP port (plus N)."""
    return _PORT.sub(lambda m: str(port + int(m.group(1) or 0)), template)


class ZmqKVEventPublisher:
    """Publishes event batches on a ZMQ PUB socket (bound for ``tcp://*:N``, else connected)."""

    def __init__(
        self,
        endpoint: str,
        topic: str,
        *,
        wall_clock: Callable[[], float] = time.time,
        data_parallel_rank: int = 0,
        bind: bool | None = None,
    ) -> None:
        import msgpack
        import zmq

        self._zmq = zmq
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._ctx: Any = zmq.Context.instance()
        self._sock: Any = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.SNDHWM, 100_000)
        self._sock.setsockopt(zmq.LINGER, 0)
        for one in endpoint.split(","):  # several: one PUB socket bound / connected to each
            if binds(one) if bind is None else bind:
                self._sock.bind(one)
            else:
                self._sock.connect(one)
        self.endpoint = endpoint
        self.topic = topic.encode()
        self._clock = wall_clock
        self._rank = data_parallel_rank
        self.seq = -1
        self.dropped = 0

    def publish(self, events: Sequence[KVEvent]) -> None:
        if not events:
            return
        self.seq += 1
        payload = self._pack([self._clock(), [encode_event(e) for e in events], self._rank])
        try:
            frames = [self.topic, self.seq.to_bytes(8, "big"), payload]
            self._sock.send_multipart(frames, flags=self._zmq.NOBLOCK)
        except self._zmq.Again:
            self.dropped += 1

    def close(self) -> None:
        self._sock.close(linger=0)
