"""The prefix hash chain used by the approximate prefix-cache index.

The prompt is cut into blocks of ``block_chars`` characters (``blockSizeTokens x 4``); only full blocks
count, and at most ``max_blocks`` of them. With H = xxh3_64 (non-cryptographic, 64-bit)::

    h_0 = H(target_model || "\\x00" || cache_salt)
    h_i = H(block_i, seed = h_{i-1})          for i = 1 .. n

so ``h_i`` identifies the whole prefix ``block_1 .. block_i`` (equal hashes mean equal prefixes, up to
64-bit collisions) and requests for different models or cache salts never share entries. ASCII prompts
are hashed from one encoded buffer; other prompts block by block (blocks are measured in characters).
Cost: about 0.1 us per block plus the UTF-8 encoding of the prompt.

With a ``token-producer`` (:func:`token_prefix_hashes`) the blocks are ``block_tokens`` token ids each
(hashed as little-endian uint32 words), the last one possibly shorter, as upstream's
``prefixhash.GetBlockHashes``.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

from xxhash import xxh3_64_intdigest

__all__ = ["ChainHasher", "chain_seed", "prefix_hashes", "token_prefix_hashes"]


def chain_seed(target_model: str, cache_salt: str) -> int:
    """h_0: separates the hash chains of different models and cache salts."""
    return xxh3_64_intdigest(f"{target_model}\x00{cache_salt}".encode())


def prefix_hashes(text: str, seed: int, block_chars: int, max_blocks: int) -> list[int]:
    """The chained hashes of the first ``min(len(text) // block_chars, max_blocks)`` full blocks."""
    n = min(len(text) // block_chars, max_blocks)
    out: list[int] = []
    if n <= 0:
        return out
    h = seed
    append = out.append
    end = n * block_chars
    if text.isascii():
        data = text[:end].encode("ascii")
        for start in range(0, end, block_chars):
            h = xxh3_64_intdigest(data[start : start + block_chars], h)
            append(h)
    else:
        for start in range(0, end, block_chars):
            h = xxh3_64_intdigest(text[start : start + block_chars].encode(), h)
            append(h)
    return out


def token_prefix_hashes(ids: Sequence[int], seed: int, block_tokens: int, max_blocks: int) -> list[int]:
    """The chained hashes of the first ``max_blocks`` blocks of ``block_tokens`` ids (tail included)."""
    out: list[int] = []
    if not ids or block_tokens <= 0 or max_blocks <= 0:
        return out
    words = array("I", ids[: block_tokens * max_blocks])
    if sys.byteorder == "big":
        words.byteswap()
    data = words.tobytes()
    step = block_tokens * 4
    h = seed
    for start in range(0, len(data), step):
        h = xxh3_64_intdigest(data[start : start + step], h)
        out.append(h)
    return out


class ChainHasher:
    """A request's hash chain with the per-(model, cache salt) seeds memoised (at most 1024 kept)."""

    __slots__ = ("_seeds",)

    def __init__(self) -> None:
        self._seeds: dict[tuple[str, str], int] = {}

    def hashes(
        self, text: str, target_model: str, cache_salt: str, block_chars: int, max_blocks: int
    ) -> tuple[int, ...]:
        key = (target_model, cache_salt)
        seed = self._seeds.get(key)
        if seed is None:
            if len(self._seeds) > 1024:
                self._seeds.clear()
            seed = self._seeds[key] = chain_seed(*key)
        return tuple(prefix_hashes(text, seed, block_chars, max_blocks))

    def token_hashes(
        self, ids: Sequence[int], target_model: str, cache_salt: str, block_tokens: int, max_blocks: int
    ) -> tuple[int, ...]:
        key = (target_model, cache_salt)
        seed = self._seeds.get(key)
        if seed is None:
            if len(self._seeds) > 1024:
                self._seeds.clear()
            seed = self._seeds[key] = chain_seed(*key)
        return tuple(token_prefix_hashes(ids, seed, block_tokens, max_blocks))
