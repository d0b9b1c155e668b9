"""The oracle prefix-cache hit rate of a workload, as the simulated servers would count it.

Prompts are tokenised exactly as ``epp-sim`` does (its offline tokenizer; chat messages rendered with
its chat template), then :func:`simulator.workloads.oracle_hit_rate` counts whole ``block_size`` blocks
an infinite cache shared by the whole fleet would hit. Requests for a LoRA adapter (``model`` other
than the base model) are salted with the adapter name, because the servers root their block-hash
chains in it. The result is an upper bound for the server-side hit rate of any router.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulator.protocol import chat_token_ids, prompt_token_lists
from simulator.tokenizer import OfflineTokenizer, Tokenizer
from simulator.workloads import RequestSpec, oracle_hit_rate

__all__ = ["prompt_ids", "workload_oracle"]


def prompt_ids(spec: RequestSpec, tokenizer: Tokenizer) -> list[int]:
    """The prompt token ids the simulator computes for ``spec``'s body."""
    if spec.path.endswith("/chat/completions"):
        return chat_token_ids(spec.body, tokenizer)
    return [t for ids in prompt_token_lists(spec.body["prompt"], tokenizer) for t in ids]


def workload_oracle(
    requests: Sequence[RequestSpec], block_size: int, base_model: str, tokenizer: Tokenizer | None = None
) -> float:
    """Infinite-cache hit rate of ``requests`` in order (0.0 for no requests)."""
    tok = tokenizer or OfflineTokenizer()
    prompts = [prompt_ids(r, tok) for r in requests]
    models = [r.model for r in requests]

    def salt(i: int) -> object:
        return "" if models[i] == base_model else models[i]

    return oracle_hit_rate(prompts, block_size, salt=salt)
