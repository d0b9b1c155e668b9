"""A body that is not JSON gets a plain-language 400 naming what is wrong and the byte where it is."""

from __future__ import annotations

import pytest

from epp.request.errors import InvalidRequestError
from epp.request.openai import OpenAIParser


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"not json at all", "request body is not valid JSON: unexpected text 'not json at ' at byte 0"),
        (
            b'{"model": "m"',
            "request body is not valid JSON: it ends at byte 13 before the JSON value is complete",
        ),
        (b"", "request body is empty: expected a JSON object"),
        (b"   ", "request body is empty: expected a JSON object"),
        (b'{"model": "m",}', "request body is not valid JSON: a trailing comma at byte 13"),
        (
            b'{"model" "m"}',
            # the reason in parentheses after it is orjson's words, which differ between its versions
            "request body is not valid JSON: unexpected text '\"m\"}' at byte 9 (",
        ),
        (b'{"p": "\xc3\xa9\xc3\xa9" x}', "request body is not valid JSON: unexpected text 'x}' at byte 13"),
        (b"{} []", "request body is not valid JSON: unexpected text '[]' after the JSON value, at byte 3"),
        (b'{"p": "\xff"}', "request body is not valid UTF-8 (JSON must be UTF-8): byte 7"),
    ],
)
def test_invalid_json_is_explained_in_plain_words(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        OpenAIParser().parse("/v1/completions", raw)
    assert info.value.message.startswith(message), info.value.message
    assert "literal" not in info.value.message and "(char" not in info.value.message
