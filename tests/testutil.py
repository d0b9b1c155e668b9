"""Small helpers shared by every test folder (``tests/`` is on ``sys.path``, see tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

__all__ = ["eventually", "write_tokenizer"]


async def eventually(
    cond: Callable[[], object], timeout: float = 5.0, what: str = "condition", interval: float = 0.01
) -> None:
    """Poll ``cond()`` every ``interval`` seconds until it is truthy; fail the test after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(interval)


def write_tokenizer(
    directory: Path,
    corpus: list[str],
    *,
    bos: bool = False,
    byte_level: bool = False,
    chat_template: str = "",
    vocab_size: int = 600,
) -> Path:
    """A small BPE ``tokenizer.json`` trained on ``corpus`` (deterministic, never downloaded) in
    ``directory``: whitespace pre-tokenisation (or byte-level with ``byte_level``), a ``<s>`` BOS added to
    prompts by its post-processor with ``bos``, a ``tokenizer_config.json`` with ``chat_template`` when
    given (and ``bos_token: <s>``). Returns the file."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel() if byte_level else pre_tokenizers.Whitespace()
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_level else []
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["[UNK]", "<s>"], initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(corpus, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    if chat_template:
        config = {"chat_template": chat_template, "bos_token": "<s>"}
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return path
