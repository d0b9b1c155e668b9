"""vLLM's block hashes: canonical CBOR and pickle serialisations, the seeded chain root, the int form."""

from __future__ import annotations

import hashlib
import pickle
import random
from array import array

import cbor2
import pytest
import xxhash

from scheduler.plugins.precise.hashing import (
    KEY_MASK,
    BlockKeyer,
    cbor_encode,
    external_key,
    hash_function,
    none_hash,
)

VALUES = [
    None,
    0,
    23,
    24,
    255,
    256,
    65535,
    65536,
    2**32,
    2**64 - 1,
    -1,
    -25,
    "",
    "lora-a",
    "é",
    b"",
    b"\x00" * 32,
    (),
    (b"\x01" * 32, (1, 2, 3), None),
    (b"x", tuple(range(300)), ("lora", "salt")),
    [1, [2, (3,)]],
]


@pytest.mark.parametrize("value", VALUES)
def test_cbor_matches_cbor2_canonical(value: object) -> None:
    assert cbor_encode(value) == cbor2.dumps(value, canonical=True)


def test_cbor_golden_bytes() -> None:
    # (b"\xaa", (1, 24, 256), None): array(3), bytes(1) aa, array(3) 01 1818 190100, null
    assert cbor_encode((b"\xaa", (1, 24, 256), None)).hex() == "8341aa830118181901" + "00f6"


@pytest.mark.parametrize(
    ("algorithm", "serialise", "digest"),
    [
        ("sha256_cbor", lambda v: cbor2.dumps(v, canonical=True), lambda b: hashlib.sha256(b).digest()),
        ("sha256", lambda v: pickle.dumps(v, protocol=5), lambda b: hashlib.sha256(b).digest()),
        ("xxhash_cbor", lambda v: cbor2.dumps(v, canonical=True), xxhash.xxh3_128_digest),
        ("xxhash", lambda v: pickle.dumps(v, protocol=5), xxhash.xxh3_128_digest),
    ],
)
def test_chain_is_vllms(algorithm: str, serialise, digest) -> None:  # type: ignore[no-untyped-def]
    keyer = BlockKeyer(algorithm, "42", block_size=4)
    ids = list(range(100, 111))  # two full blocks and a partial one
    root = digest(serialise("42"))
    h1 = digest(serialise((root, (100, 101, 102, 103), None)))
    h2 = digest(serialise((h1, (104, 105, 106, 107), None)))
    assert none_hash(algorithm, "42") == root
    assert keyer.digests(ids) == [h1, h2]
    assert keyer.keys(ids) == [int.from_bytes(h[-8:], "big") & KEY_MASK for h in (h1, h2)]


def test_extra_keys_lora_and_cache_salt() -> None:
    keyer = BlockKeyer("sha256_cbor", "", block_size=2)
    fn = hash_function("sha256_cbor")
    root = fn("vllm-none-hash")  # vLLM's default seed for the SHA-256 algorithms
    h1 = fn((root, (1, 2), ("ad", "salt")))
    h2 = fn((h1, (3, 4), ("ad",)))
    assert keyer.digests([1, 2, 3, 4], lora="ad", cache_salt="salt") == [h1, h2]
    assert keyer.digests([1, 2, 3, 4]) != [h1, h2]


def test_max_blocks_and_memo_bound() -> None:
    keyer = BlockKeyer("sha256_cbor", "1", block_size=2, cache_blocks=3)
    assert len(keyer.keys(list(range(20)), max_blocks=4)) == 4
    assert len(keyer._memo) == 3  # bounded
    assert keyer.keys(list(range(8))) == BlockKeyer("sha256_cbor", "1", block_size=2).keys(list(range(8)))


def _reference(keyer: BlockKeyer, algorithm: str, seed: str, ids: list[int], lora: str | None = None,
               salt: str = "") -> list[bytes]:  # fmt: skip
    """vLLM's chain written out, without a memo."""
    fn, parent, out = hash_function(algorithm), none_hash(algorithm, seed), []
    size = keyer.block_size
    for i in range(len(ids) // size):
        extra = ((lora,) if lora else ()) + ((salt,) if salt and i == 0 else ())
        parent = fn((parent, tuple(ids[i * size : (i + 1) * size]), extra or None))
        out.append(parent)
    return out


@pytest.mark.parametrize("algorithm", ["sha256", "sha256_cbor"])
def test_memoised_blocks_of_every_id_width_and_input_type(algorithm: str) -> None:
    """The memo keys blocks by their packed ids (32-bit, 64-bit, else a tuple): equal blocks of any
    width and of a list or an array give vLLM's digests, memoised or not."""
    rng = random.Random(3)
    keyer = BlockKeyer(algorithm, "s", block_size=4)
    shared = [rng.randrange(150_000) for _ in range(16)]
    prompts = [
        shared + [rng.randrange(150_000) for _ in range(9)],
        [*shared, 2**40, 7, 8, 9],  # a 64-bit id after the shared prefix
        [-5, 1, 2, 3, *shared],  # negative: the tuple path from the first block
    ]
    if algorithm == "sha256":  # over 64 bits: the tuple path (canonical CBOR has no such integers here)
        prompts.append([*shared, 2**70, 1, 2, 3])
    for _ in range(2):  # cold, then memoised
        for ids in prompts:
            assert keyer.digests(ids) == _reference(keyer, algorithm, "s", ids)
            assert keyer.digests(ids, "ad", "salt") == _reference(keyer, algorithm, "s", ids, "ad", "salt")
        packed = array("I", prompts[0])
        assert (
            keyer.keys(packed)
            == keyer.keys(prompts[0])
            == [external_key(d) for d in _reference(keyer, algorithm, "s", prompts[0])]
        )


def test_external_key_int_and_bytes_agree() -> None:
    digest = hashlib.sha256(b"x").digest()
    as_int = int.from_bytes(digest, "big") & ((1 << 64) - 1)  # vLLM's maybe_convert_block_hash
    assert external_key(as_int) == external_key(digest) == as_int & KEY_MASK


def test_unknown_algorithm() -> None:
    with pytest.raises(ValueError, match="expected one of sha256"):
        BlockKeyer("md5", "", 16)
