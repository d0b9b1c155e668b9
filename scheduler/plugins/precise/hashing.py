"""vLLM's prefix-cache block hashes, computed here from a request's token ids.

vLLM (``vllm/v1/core/kv_cache_utils.py``) hashes each *full* block of ``block_size`` tokens as::

    h[i] = hash_fn((h[i-1], tuple(block_i_token_ids), extra_keys_i))      # h[-1] = NONE_HASH

``hash_fn`` is the server's ``--prefix-caching-hash-algo``: ``sha256`` (pickle protocol 5, then
SHA-256; vLLM's default), ``sha256_cbor`` (canonical CBOR, then SHA-256), ``xxhash`` / ``xxhash_cbor``
(the same serialisations, then XXH3-128). Parents are the previous block's full digest (bytes).
``NONE_HASH = hash_fn(seed)`` where ``seed`` is the server's ``PYTHONHASHSEED`` (llm-d's ``hashSeed``);
with no seed vLLM uses ``"vllm-none-hash"`` for the SHA-256 algorithms and a per-process random seed for
the xxhash ones (which then cannot be reproduced: set ``PYTHONHASHSEED`` on the servers).
``extra_keys`` is None for a base-model text block, ``(lora_name,)`` under a LoRA adapter; the
request's ``cache_salt`` is appended to the first block's keys.

KV events carry each digest as an int: the digest's last 8 bytes, big-endian
(``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, on by default); :func:`external_key` does that conversion
(a bytes hash on the wire is converted the same way). Index keys are those ints masked to 60 bits
(:data:`KEY_MASK`), which keeps every key a two-digit Python int (32 bytes instead of 48).

:class:`BlockKeyer` memoises the chain per (parent, block) so a shared prefix (a system prompt) is
hashed once: at most ``cache_blocks`` entries (default 262,144; about 400 B each, 100 MB when full, measured
with tracemalloc), oldest dropped first.
"""

from __future__ import annotations

import hashlib
import pickle
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import xxhash

__all__ = [
    "ALGORITHMS",
    "DEFAULT_SEED",
    "KEY_MASK",
    "BlockKeyer",
    "cbor_encode",
    "external_key",
    "hash_function",
    "none_hash",
]

ALGORITHMS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
DEFAULT_SEED = "vllm-none-hash"
KEY_MASK = (1 << 60) - 1


def _head(major: int, n: int) -> bytes:
    """A CBOR initial byte plus argument, shortest form (canonical)."""
    m = major << 5
    if n < 24:
        return bytes((m | n,))
    if n < 0x100:
        return bytes((m | 24, n))
    if n < 0x10000:
        return bytes((m | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes((m | 26,)) + n.to_bytes(4, "big")
    if n < 0x10000000000000000:
        return bytes((m | 27,)) + n.to_bytes(8, "big")
    raise ValueError(f"integer too large for CBOR: {n}")


_SMALL = [_head(0, i) for i in range(0x10000)]  # token ids: one table lookup each


def cbor_encode(value: Any) -> bytes:
    """Canonical CBOR (RFC 8949 core deterministic) of None/bool/int/str/bytes/tuple/list values,
    byte-identical to ``cbor2.dumps(value, canonical=True)`` for those types."""
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def _encode(value: Any, out: bytearray) -> None:
    if value is None:
        out.append(0xF6)
    elif value is True:
        out.append(0xF5)
    elif value is False:
        out.append(0xF4)
    elif isinstance(value, int):
        if 0 <= value < 0x10000:
            out += _SMALL[value]
        else:
            out += _head(0, value) if value >= 0 else _head(1, -1 - value)
    elif isinstance(value, bytes):
        out += _head(2, len(value))
        out += value
    elif isinstance(value, str):
        raw = value.encode()
        out += _head(3, len(raw))
        out += raw
    elif isinstance(value, (tuple, list)):
        out += _head(4, len(value))
        for item in value:
            _encode(item, out)
    else:
        raise TypeError(f"cannot CBOR-encode {type(value).__name__}")


def _sha256_pickle(value: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=5)).digest()


def _sha256_cbor(value: Any) -> bytes:
    return hashlib.sha256(cbor_encode(value)).digest()


def _xxhash_pickle(value: Any) -> bytes:
    return xxhash.xxh3_128_digest(pickle.dumps(value, protocol=5))


def _xxhash_cbor(value: Any) -> bytes:
    return xxhash.xxh3_128_digest(cbor_encode(value))


_FUNCTIONS: dict[str, Callable[[Any], bytes]] = {
    "sha256": _sha256_pickle,
    "sha256_cbor": _sha256_cbor,
    "xxhash": _xxhash_pickle,
    "xxhash_cbor": _xxhash_cbor,
}


def hash_function(algorithm: str) -> Callable[[Any], bytes]:
    """vLLM's hash function of that name (:data:`ALGORITHMS`); ValueError for another name."""
    try:
        return _FUNCTIONS[algorithm]
    except KeyError:
        expected = ", ".join(ALGORITHMS)
        raise ValueError(f"unknown hash algorithm {algorithm!r}: expected one of {expected}") from None


def none_hash(algorithm: str, seed: str) -> bytes:
    """The chain root: ``hash_fn(seed)``, ``seed`` defaulting (empty) to vLLM's ``"vllm-none-hash"``."""
    return hash_function(algorithm)(seed or DEFAULT_SEED)


def external_key(block_hash: int | bytes) -> int:
    """The index key of a hash as KV events carry it (int, or digest bytes), masked to 60 bits."""
    if isinstance(block_hash, bytes):
        return int.from_bytes(block_hash[-8:], "big") & KEY_MASK
    return block_hash & KEY_MASK


class BlockKeyer:
    """Computes a prompt's block keys (60-bit, as :func:`external_key`) the way vLLM hashes blocks.

    ``keys(token_ids, lora, cache_salt, max_blocks)`` returns one key per full block (at most
    ``max_blocks``). Pure apart from the bounded memo; not thread-safe (the scheduler is single-threaded).
    The memo is keyed by (parent digest, the block's ids as packed bytes, extra keys) and holds the digest
    with its index key, so a memoised block costs a bytes slice and a dict lookup; the ids are packed
    once per prompt (4 bytes each, 8 when an id needs them; a tuple when one does not fit 64 bits).
    """

    __slots__ = ("_fn", "_memo", "_root", "block_size", "cache_blocks")

    def __init__(self, algorithm: str, seed: str, block_size: int, cache_blocks: int = 262_144) -> None:
        if block_size <= 0:
            raise ValueError(f"block size must be > 0, got {block_size}")
        self._fn = hash_function(algorithm)
        self._root = none_hash(algorithm, seed)
        self.block_size = block_size
        self.cache_blocks = cache_blocks
        self._memo: OrderedDict[tuple[bytes, Any, Any], tuple[bytes, int]] = OrderedDict()

    @property
    def memoised(self) -> int:
        """Blocks in the memo."""
        return len(self._memo)

    def _entries(
        self, token_ids: Sequence[int], lora: str | None, cache_salt: str, max_blocks: int
    ) -> list[tuple[bytes, int]]:
        """(digest, index key) of each full block."""
        size = self.block_size
        n = len(token_ids) // size
        if max_blocks > 0:
            n = min(n, max_blocks)
        if n <= 0:
            return []
        packed, width = _packed(token_ids, n * size)
        step = size * width
        memo = self._memo
        get = memo.get
        to_end = memo.move_to_end
        fn = self._fn
        parent = self._root
        out: list[tuple[bytes, int]] = []
        extra: tuple[str, ...] | None = (lora,) if lora else None
        first = ((lora,) if lora else ()) + (cache_salt,) if cache_salt else extra
        for i in range(n):
            a = i * size
            blk: Any = (
                packed[a * width : a * width + step] if packed is not None else tuple(token_ids[a : a + size])
            )
            key = (parent, blk, first if i == 0 else extra)
            found = get(key)
            if found is not None:
                to_end(key)
            else:
                digest = fn((parent, tuple(token_ids[a : a + size]), key[2]))
                found = (digest, external_key(digest))
                memo[key] = found
                if len(memo) > self.cache_blocks:
                    memo.popitem(last=False)
            out.append(found)
            parent = found[0]
        return out

    def digests(
        self, token_ids: Sequence[int], lora: str | None = None, cache_salt: str = "", max_blocks: int = 0
    ) -> list[bytes]:
        """The full digests (vLLM's ``BlockHash`` bytes) of the prompt's full blocks."""
        return [d for d, _ in self._entries(token_ids, lora, cache_salt, max_blocks)]

    def keys(
        self, token_ids: Sequence[int], lora: str | None = None, cache_salt: str = "", max_blocks: int = 0
    ) -> list[int]:
        """Index keys of the prompt's full blocks (see :func:`external_key`)."""
        return [k for _, k in self._entries(token_ids, lora, cache_salt, max_blocks)]


def _packed(token_ids: Sequence[int], count: int) -> tuple[bytes | None, int]:
    """The first ``count`` ids as unsigned 32-bit (else 64-bit) native bytes, and the width; (None, 0)
    when an id is negative, not an int, or over 64 bits (the memo then keys blocks by tuple)."""
    head = token_ids[:count]
    for code, width in (("I", 4), ("Q", 8)):
        try:
            if isinstance(head, array) and head.typecode == code:
                return head.tobytes(), width
            return array(code, head).tobytes(), width
        except (OverflowError, TypeError):
            continue
    return None, 0
