"""Generated request ids are random version-4 UUID strings, like ``str(uuid.uuid4())``."""

from __future__ import annotations

import uuid

from epp.protocol.config import SessionConfig


def test_generated_ids_are_distinct_canonical_uuid4_strings() -> None:
    factory = SessionConfig().request_id_factory
    ids = [factory() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text


def test_every_variant_digit_occurs() -> None:
    factory = SessionConfig().request_id_factory
    assert {factory()[19] for _ in range(400)} == set("89ab")
