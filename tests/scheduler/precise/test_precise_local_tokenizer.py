"""precise-prefix-cache-*'s in-process tokenizer (``indexerConfig.tokenizersPoolConfig``, local backend).

The ids must be exactly what ``epp-sim --tokenizer DIR`` computes for the same body (its completions and
chat paths, :mod:`simulator.protocol`), with the prefix cache on and off; the configuration follows
llm-d-kv-cache's ``tokenizersPoolConfig`` / ``prefixStoreConfig`` and refuses hub downloads and the UDS
sidecar with a message naming the field. Tokenizers are trained here from a fixed corpus (never
downloaded).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from testutil import write_tokenizer

from epp.server.render import token_renderer
from scheduler.chat_render import chat_args
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.precise import local_tokenizer
from scheduler.plugins.precise.chunking import chunk_mode, chunk_safety
from scheduler.plugins.precise.local_tokenizer import (
    LocalTokenizer,
    LocalTokenizerError,
    LocalTokenizerSettings,
    discover_tokenizers,
)
from scheduler.plugins.precise.scorer import factory
from scheduler.types import ApiKind, Endpoint, LLMRequest
from simulator.protocol import ApiError, chat_token_ids, prompt_token_lists
from simulator.tokenizer import load_tokenizer
from simulator.workloads import words

MODEL = "org/model"
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'tool' %}"
    "{{ raise_exception('no tools here') }}{% endif %}<|start|>{{ m['role'] }}\n"
    "{{ m['content'] | trim }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)


def corpus() -> list[str]:
    rng = random.Random(7)
    return [words(rng, 60) for _ in range(200)] + ["<|system|> <|user|> <|assistant|> hello world 0123"]


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tokenizers")
    text = corpus()
    return {
        "plain": write_tokenizer(base / "plain", text).parent,
        "bos": write_tokenizer(base / "bos", text, bos=True).parent,
        "bytes": write_tokenizer(base / "bytes", text, byte_level=True, bos=True).parent,
        "template": write_tokenizer(base / "template", text, chat_template=TEMPLATE).parent,
    }


def local(directory: Path, **kw: Any) -> LocalTokenizer:
    return LocalTokenizer(LocalTokenizerSettings(model_name=MODEL, model_map={MODEL: str(directory)}, **kw))


def params(directory: Path | str, **pool: Any) -> dict[str, Any]:
    return {
        "indexerConfig": {
            "tokenizersPoolConfig": {
                "modelName": MODEL,
                "local": {"modelTokenizerMap": {MODEL: str(directory)}},
            }
            | pool
        }
    }


def bodies() -> list[tuple[bool, dict[str, Any]]]:
    rng = random.Random(11)
    system = words(rng, 900)
    out: list[tuple[bool, dict[str, Any]]] = []
    for i in range(4):
        out.append((False, {"prompt": f"{system} {words(rng, 40 + i)}"}))
        out.append((False, {"prompt": [f"{system} q{i}", words(rng, 30)]}))
        out.append(
            (
                True,
                {
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": [{"type": "text", "text": words(rng, 20)}]},
                        {"role": "assistant", "content": words(rng, 10)},
                        {"role": "user", "content": f"tail {i}\n\n  spaced\tout 12345"},
                    ]
                },
            )
        )
    out.append((False, {"prompt": [5, 6, 7, 8]}))
    out.append((False, {"prompt": [[1, 2], [3]]}))
    return out


def sim_ids(directory: Path, chat: bool, body: dict[str, Any]) -> list[int]:
    sim = load_tokenizer(str(directory))
    if chat:
        return chat_token_ids(body, sim)
    return [t for ids in prompt_token_lists(body["prompt"], sim) for t in ids]


@pytest.mark.parametrize("kind", ["plain", "bos", "bytes"])
@pytest.mark.parametrize("chunk", [16, 64, 256])
def test_ids_equal_the_simulators_cold_and_cached(
    tokenizer_dirs: dict[str, Path], kind: str, chunk: int
) -> None:
    tok = local(tokenizer_dirs[kind], chunk_chars=chunk)
    assert tok.mode == ("bytes" if kind == "bytes" else "words"), tok.unchunked_reason
    for _ in range(2):  # the second pass takes the shared prefixes from the cache
        for chat, body in bodies():
            assert tok.body_ids(chat, body) == sim_ids(tokenizer_dirs[kind], chat, body), (kind, body)
    if tok.chunked:
        assert tok.cached_tokens > tok.encoded_tokens > 0


def test_bos_wraps_each_completions_prompt_not_chat(tokenizer_dirs: dict[str, Path]) -> None:
    tok = local(tokenizer_dirs["bos"])
    bos = 1  # "<s>", the second special token
    assert tok.completion_ids("hello world")[0] == bos
    assert tok.completion_ids(["hello", "world"]) == [
        bos,
        *tok.encode("hello", False),
        bos,
        *tok.encode("world", False),
    ]
    assert bos not in (tok.chat_ids([{"role": "user", "content": "hello"}]) or [])


def test_the_directorys_chat_template_is_rendered_as_the_simulator_renders_it(
    tokenizer_dirs: dict[str, Path],
) -> None:
    directory = tokenizer_dirs["template"]
    tok = local(directory)
    assert tok.template is not None and tok.chunked
    messages = [
        {"role": "system", "content": " be brief "},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    text = tok.template.render(messages)
    assert text == "<s><|start|>system\nbe brief<|end|>\n<|start|>user\nhi<|end|>\n<|start|>assistant\n"
    ids = tok.chat_ids(messages)
    assert ids is not None and ids[0] == 1  # "<s>" written by the template, matched as the added token
    for _ in range(2):
        for chat, body in bodies():
            assert tok.body_ids(chat, body) == sim_ids(directory, chat, body)
    refused = [{"role": "tool", "content": "x"}]
    assert tok.chat_ids(refused) is None
    with pytest.raises(ApiError) as err:
        chat_token_ids({"messages": refused}, load_tokenizer(str(directory)))
    assert err.value.status == 400 and "no tools here" in err.value.message


TOOLS_TEMPLATE = (
    "{% if tools %}<|tools|>{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
    "{% if documents %}<|docs|>{{ documents | length }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if think is defined and not think %}<nothink>{% endif %}"
    "{% endif %}"
)


def test_tools_documents_and_template_variables_reach_the_template_as_vllm_passes_them(
    tmp_path: Path, tokenizer_dirs: dict[str, Path]
) -> None:
    """Tools usually open the prompt (the shared prefix of an agent's requests): rendered without them,
    every block key would differ from the server's."""
    (tmp_path / "tokenizer.json").write_text((tokenizer_dirs["plain"] / "tokenizer.json").read_text())
    (tmp_path / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    tok = local(tmp_path)
    assert tok.template is not None
    tool = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}, "strict": True}}
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hello world"}],
        "tools": [tool],
        "documents": [{"text": "a"}, {"text": "b"}],
        "chat_template_kwargs": {"think": False, "messages": "ignored: cannot replace the messages"},
    }
    text = tok.template.render(body["messages"], chat_args(body))
    # ChatCompletionToolsParam.model_dump(): type, then function's declared fields (null when absent),
    # then the keys it does not declare
    dumped = '{"type": "function", "function": {"name": "get", "description": null, '
    dumped += '"parameters": {"type": "object"}, "strict": true}}'
    assert text == f"<|tools|>{dumped}\n<|docs|>2\n<|user|>hello world\n<|assistant|><nothink>"
    assert tok.body_ids(True, body) == sim_ids(tmp_path, True, body)
    assert tok.body_ids(True, body) != tok.body_ids(True, {"messages": body["messages"]})
    # continue_final_message: the prompt ends with the last message's text (no generation prompt)
    cont = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello "}],
            "add_generation_prompt": False, "continue_final_message": True}  # fmt: skip
    assert tok.template.render(cont["messages"], chat_args(cont)) == "<|user|>hi\n<|assistant|>hello"
    assert tok.body_ids(True, cont) == sim_ids(tmp_path, True, cont)
    # what vLLM answers 400: no ids in the picker, 400 from the simulator
    for bad in (
        {"tools": [{"type": "function", "function": {"description": "no name"}}]},
        {"tools": {"not": "a list"}},
        {"continue_final_message": True},  # with the default add_generation_prompt
        {"chat_template_kwargs": ["x"]},
    ):
        request = {"messages": body["messages"], **bad}
        assert tok.body_ids(True, request) is None, bad
        with pytest.raises(ApiError) as err:
            sim_ids(tmp_path, True, request)
        assert err.value.status == 400, bad


def test_chat_template_jinja_file_and_named_templates(
    tmp_path: Path, tokenizer_dirs: dict[str, Path]
) -> None:
    data = (tokenizer_dirs["plain"] / "tokenizer.json").read_text()
    (tmp_path / "tokenizer.json").write_text(data)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": [{"name": "default", "template": "D{{ messages[0]['content'] }}"}]})
    )
    msgs = [{"role": "user", "content": "x"}]
    assert local(tmp_path).template.render(msgs) == "Dx"  # type: ignore[union-attr]
    (tmp_path / "chat_template.jinja").write_text("J{{ messages[0]['content'] }}")
    assert local(tmp_path).template.render(msgs) == "Jx"  # type: ignore[union-attr]
    (tmp_path / "chat_template.jinja").write_text("{% for %}")
    with pytest.raises(LocalTokenizerError, match="does not parse"):
        local(tmp_path)


def test_limit_stops_early_and_the_cache_is_bounded(tokenizer_dirs: dict[str, Path]) -> None:
    tok = local(tokenizer_dirs["plain"], chunk_chars=16, cache_entries=20)
    text = words(random.Random(3), 2000)
    full = tok.encode(text, False)
    assert tok.cache_entries == 20  # the LRU keeps the newest 20 chunks
    short = local(tokenizer_dirs["plain"], chunk_chars=16).encode(text, False, limit=64)
    assert 64 <= len(short) < len(full) and short == full[: len(short)]


def test_chunk_safety_refuses_what_could_join_across_whitespace() -> None:
    ok = {"pre_tokenizer": {"type": "Whitespace"}, "normalizer": None}
    assert chunk_safety(ok) == ""
    metaspace = {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}}
    assert chunk_mode(metaspace | {"model": {"type": "BPE", "vocab": {"\u2581a": 0, "b": 1}}}) == (
        "metaspace",
        "",
    )
    joining = {"model": {"type": "Unigram", "vocab": [["\u2581a", -1.0], ["b\u2581c", -2.0]]}}
    assert "joins a word" in chunk_safety(metaspace | joining)
    assert "alone" in chunk_safety({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits"}, {"type": "Metaspace"}]}})  # fmt: skip
    # byte-level: cut before " word" (the file's probe decides; see the tests below)
    byte_level = {
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "model": {"type": "BPE", "vocab": {"a": 0, "\u0120b": 1}},  # "Ġb": " b"
    }
    assert chunk_mode(byte_level) == ("bytes", "")
    assert "without a split" in chunk_safety(
        byte_level | {"pre_tokenizer": {"type": "ByteLevel", "use_regex": False}}
    )
    assert "joins a word" in chunk_safety(byte_level | {"model": {"type": "BPE", "vocab": {"a\u0120b": 0}}})
    assert "normalizer" in chunk_safety(byte_level | {"normalizer": {"type": "Lowercase"}})
    assert chunk_safety(byte_level | {"normalizer": {"type": "NFC"}}) == ""
    stripping = {"content": "<mask>", "lstrip": True, "rstrip": False}
    assert "strips" in chunk_safety(byte_level | {"added_tokens": [stripping]})
    metaspace_last = {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Metaspace"}]}
    assert "alone" in chunk_safety({"pre_tokenizer": metaspace_last})
    digits_last = {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]}
    assert "not ByteLevel" in chunk_safety(byte_level | {"pre_tokenizer": digits_last})
    assert "normalizer" in chunk_safety(ok | {"normalizer": {"type": "Replace"}})
    assert "normalizer" in chunk_safety(
        ok | {"normalizer": {"type": "Sequence", "normalizers": [{"type": "Strip"}]}}
    )
    assert "truncation" in chunk_safety(ok | {"truncation": {"max_length": 8}})
    assert "dropout" in chunk_safety(ok | {"model": {"type": "BPE", "dropout": 0.1}})
    assert "whitespace" in chunk_safety(ok | {"added_tokens": [{"content": "<a b>"}]})
    seq = {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Punctuation"}]}
    assert chunk_safety({"pre_tokenizer": seq}) == ""


# the split of Llama 3's, Qwen2's and cl100k's byte-level tokenizers (before their ByteLevel step)
SPLIT_3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


def _byte_level_file(directory: Path, pre: Any, normalizer: Any = None) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([*corpus(), *_texts(random.Random(1), 50)], trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def _texts(rng: random.Random, n: int) -> list[str]:
    """Prose-like texts with what byte-level splits care about: single and repeated spaces, newlines,
    tabs, digits, contractions, punctuation, accents, other scripts."""
    pieces = ["the", "cat", "Sat", "on", "mat", "it's", "we'll", "x", "A", "42", "3.14", "1,000", ",", ".",
              "!", "?", "(", ")", "'", '"', "-", "café", "naïve", "日本", "語", "🙂", "<s>", "\n", "\n\n",
              "\t", "  ", "   ", "_id", "CamelCase", "a.b", "$5"]  # fmt: skip
    out = []
    for _ in range(n):
        words = [rng.choice(pieces) for _ in range(rng.randrange(5, 120))]
        out.append("".join(w + rng.choice(["", " ", " ", " ", " ", "  ", "\n"]) for w in words))
    return out


@pytest.mark.parametrize("kind", ["bytelevel", "bytelevel-prefix-space", "split-then-bytelevel", "nfc"])
def test_byte_level_chunks_equal_the_whole_prompt(tmp_path: Path, kind: str) -> None:
    """The cut before " word" (after a letter) against the library tokenising the whole text, cold and
    from the cache, with chunks as short as the rule allows."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    pre = {
        "bytelevel": pre_tokenizers.ByteLevel(add_prefix_space=False),
        "bytelevel-prefix-space": pre_tokenizers.ByteLevel(add_prefix_space=True),
        "split-then-bytelevel": pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(SPLIT_3), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ),
        "nfc": pre_tokenizers.ByteLevel(add_prefix_space=False),
    }[kind]
    directory = _byte_level_file(tmp_path, pre, normalizers.NFC() if kind == "nfc" else None)
    tok = local(directory, chunk_chars=8)
    assert tok.mode == "bytes", tok.unchunked_reason
    texts = _texts(random.Random(9), 150)
    shared = texts[0]
    for text in [*texts, *(shared + t for t in texts[1:40])]:
        whole = tok._tok.encode(text, add_special_tokens=False).ids
        assert tok.encode(text, False) == whole, text
        assert tok.encode(text, False) == whole, text  # from the cache
    assert tok.cached_tokens > tok.encoded_tokens > 0


def test_a_byte_level_split_that_joins_words_is_not_chunked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-tokenizer whose split keeps "a b" together learns tokens across the space: refused (the
    prompt is tokenised whole); a cut rule the file does not keep fails the probe."""
    from tokenizers import Regex, pre_tokenizers

    joined = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(r"[A-Za-z]+ [A-Za-z]+|\s+|[^\sA-Za-z]+|[A-Za-z]+"), behavior="isolated"
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok = local(_byte_level_file(tmp_path / "joined", joined))
    assert tok.mode == "" and not tok.chunked and "joins a word" in tok.unchunked_reason
    text = "hello world and more words " * 20
    assert tok.encode(text, False) == tok._tok.encode(text, add_special_tokens=False).ids
    directory = _byte_level_file(tmp_path / "plain", pre_tokenizers.ByteLevel(add_prefix_space=False))
    assert local(directory).mode == "bytes"
    monkeypatch.setattr(local_tokenizer, "_BYTE_BOUNDARY", re.compile(r"[A-Za-z] (?=[A-Za-z])"))  # after " "
    refused = local(directory)
    assert refused.mode == "" and "probe" in refused.unchunked_reason


@pytest.mark.parametrize("split", [True, False])
def test_metaspace_chunks_equal_the_whole_prompt(tmp_path: Path, split: bool) -> None:
    """SentencePiece-style ``Metaspace`` (Llama 2's and Mistral's converted files), split at its spaces
    or not (then the vocabulary decides: trained split, it has no token across a space)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", *alphabet], show_progress=False)
    tok.train_from_iterator([*corpus(), *_texts(random.Random(1), 50)], trainer)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=split)
    tmp_path.mkdir(parents=True, exist_ok=True)
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = local(tmp_path, chunk_chars=8)
    assert loaded.mode == "metaspace", loaded.unchunked_reason
    texts = _texts(random.Random(4), 120)
    for text in [*texts, *(texts[0] + t for t in texts[1:30])]:
        whole = loaded._tok.encode(text, add_special_tokens=False).ids
        assert loaded.encode(text, False) == whole, text
        assert loaded.encode(text, False) == whole, text


def test_auto_discovery_names_models_as_llm_d(tmp_path: Path, tokenizer_dirs: dict[str, Path]) -> None:
    data = (tokenizer_dirs["plain"] / "tokenizer.json").read_text()
    for rel in ("hub/models--Qwen--Qwen3-0.6B/snapshots/abc", "llama-7b", "org/team/model", "."):
        (tmp_path / rel).mkdir(parents=True, exist_ok=True)
        (tmp_path / rel / "tokenizer.json").write_text(data)
    found = discover_tokenizers(str(tmp_path), "tokenizer.json")
    assert set(found) == {"Qwen/Qwen3-0.6B", "llama-7b", "org/team/model", "."}
    pool = {"modelName": "Qwen/Qwen3-0.6B", "local": {"autoDiscoveryDir": str(tmp_path)}}
    plugin = factory("p", {"indexerConfig": {"tokenizersPoolConfig": pool}}, PluginHandle())
    assert plugin.local is not None and plugin.local.path == Path(found["Qwen/Qwen3-0.6B"])


def test_environment_defaults_of_the_local_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer_dirs: dict[str, Path]
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "tok.json").write_text((tokenizer_dirs["plain"] / "tokenizer.json").read_text())
    monkeypatch.setenv("LOCAL_TOKENIZER_DIR", str(tmp_path))
    monkeypatch.setenv("LOCAL_TOKENIZER_FILENAME", "tok.json")
    plugin = factory(
        "p", {"indexerConfig": {"tokenizersPoolConfig": {"modelName": "m", "local": None}}}, PluginHandle()
    )
    assert plugin.local is not None and plugin.local.path == tmp_path / "m" / "tok.json"


def test_resolved_parameters_render_in_llm_d_form(tokenizer_dirs: dict[str, Path]) -> None:
    p = params(
        tokenizer_dirs["plain"], workersCount=3, minPrefixOverlapRatio=0.5, hf={"enabled": False}, uds=None
    )
    p["indexerConfig"]["prefixStoreConfig"] = {"blockSize": 128, "cacheSize": 1000}
    plugin = factory("p", p, PluginHandle())
    indexer = plugin.parameters["indexerConfig"]
    assert indexer["prefixStoreConfig"] == {"blockSize": 128, "cacheSize": 1000}
    pool = indexer["tokenizersPoolConfig"]
    assert (pool["modelName"], pool["workersCount"], pool["minPrefixOverlapRatio"]) == (MODEL, 3, 0.5)
    assert pool["local"]["modelTokenizerMap"] == {MODEL: str(tokenizer_dirs["plain"])}
    assert plugin.data_needs() == ()  # no token-producer needed
    again = factory("q", plugin.parameters, PluginHandle())
    assert again.parameters == plugin.parameters


@pytest.mark.parametrize(
    ("pool", "field", "expect"),
    [
        ({"hf": {"huggingFaceToken": "x"}}, "tokenizersPoolConfig.hf", "never downloads"),
        ({"hf": {"enabled": True}}, "tokenizersPoolConfig.hf", "HuggingFace hub"),
        ({"uds": {"socketFile": "/tmp/t.sock"}}, "tokenizersPoolConfig.uds", "not available"),
        ({"modelName": ""}, "tokenizersPoolConfig.modelName", "base model"),
        ({"workersCount": 0.5}, "tokenizersPoolConfig.workersCount", "integer"),
        ({"minPrefixOverlapRatio": 2}, "tokenizersPoolConfig.minPrefixOverlapRatio", "[0, 1]"),
        ({"bogus": 1}, "tokenizersPoolConfig.bogus", "unknown parameter"),
        ({"local": {"modelTokenizerMap": {"org/model": 3}}}, "local.modelTokenizerMap", "mapping"),
        (
            {"local": {"autoDiscoveryTokenizerFileName": "a/b.json"}},
            "autoDiscoveryTokenizerFileName",
            "file name",
        ),
        (
            {"modelName": "other", "local": {"autoDiscoveryDir": "/nonexistent"}},
            "tokenizersPoolConfig",
            "'other'",
        ),
        (
            {"local": {"modelTokenizerMap": {"org/model": "/nonexistent/t.json"}}},
            "tokenizersPoolConfig",
            "cannot load",
        ),
    ],
)
def test_bad_pool_parameters_name_the_field(
    tokenizer_dirs: dict[str, Path], pool: dict[str, Any], field: str, expect: str
) -> None:
    p = params(tokenizer_dirs["plain"])
    p["indexerConfig"]["tokenizersPoolConfig"] |= pool
    with pytest.raises(ConfigError) as err:
        factory("p", p, PluginHandle())
    assert field in str(err.value) and expect in str(err.value)


def test_prefix_store_bounds_are_checked(tokenizer_dirs: dict[str, Path]) -> None:
    p = params(tokenizer_dirs["plain"])
    p["indexerConfig"]["prefixStoreConfig"] = {"blockSize": 4}
    with pytest.raises(ConfigError, match=r"prefixStoreConfig\.blockSize"):
        factory("p", p, PluginHandle())


def test_epp_step_tokenizes_in_a_thread_and_the_keys_are_the_simulators(
    tokenizer_dirs: dict[str, Path],
) -> None:
    plugin = factory("p", params(tokenizer_dirs["bos"]), PluginHandle())
    renderer = token_renderer([plugin])
    assert renderer is not None
    chat, body = bodies()[0]
    request = LLMRequest("r1", MODEL, MODEL, prompt_text=body["prompt"], api=ApiKind.COMPLETIONS)

    async def run() -> None:
        await renderer.render(request, orjson.dumps({"model": MODEL, **body}))
        await renderer.aclose()

    asyncio.run(run())
    expected = plugin.keyer.keys(sim_ids(tokenizer_dirs["bos"], chat, body), None, "", 4096)
    assert plugin.keys(CycleState(), request) == expected and len(expected) > 50
    # not handed over (another request): no ids, no keys
    other = LLMRequest("r2", MODEL, MODEL, prompt_text="x", api=ApiKind.COMPLETIONS)
    plugin.prepare(CycleState(), other, [Endpoint("10.0.0.1:8000")])
    assert plugin.keys(CycleState(), other) == []


def _longest_stall(tokenizer_dir: Path, prompt: str) -> tuple[float, float, int]:
    """Tokenise ``prompt`` through a fresh plugin's EPP step while a 1 ms ticker runs on the event loop:
    (the longest gap between ticks, the call's duration, the number of keys computed)."""
    plugin = factory("p", params(tokenizer_dir), PluginHandle())
    renderer = token_renderer([plugin])
    assert renderer is not None
    request = LLMRequest("long", MODEL, MODEL, prompt_text="", api=ApiKind.COMPLETIONS)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(asyncio.get_running_loop().time())
            await asyncio.sleep(0.001)

    async def run() -> tuple[float, float]:
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        started = asyncio.get_running_loop().time()
        await renderer.render(request, orjson.dumps({"model": MODEL, "prompt": prompt}))
        elapsed = asyncio.get_running_loop().time() - started
        task.cancel()
        await renderer.aclose()
        gaps = [b - a for a, b in itertools.pairwise(ticks) if b >= started]
        assert gaps
        return max(gaps), elapsed

    gc.collect()
    gc.disable()  # a collection in a long test session stops every thread, whatever the tokenizer does
    try:
        stall, elapsed = asyncio.run(run())
    finally:
        gc.enable()
    return stall, elapsed, len(plugin.keys(CycleState(), request))


@pytest.mark.parametrize("kind", ["plain", "bytes"])
def test_a_long_cold_prompt_does_not_stall_the_serving_loop(
    tokenizer_dirs: dict[str, Path], kind: str
) -> None:
    """The EPP step tokenises in its thread pool through ``encode_batch``, which releases the GIL: the
    event loop keeps running meanwhile (a thread in the library's ``encode`` would stop it for the whole
    call, in every attempt). A busy CI machine can deschedule the loop once; three cold attempts, each
    with a fresh plugin, and one without a stall is enough."""
    prompt = words(random.Random(5), 150_000)
    seen: list[tuple[float, float]] = []
    for _ in range(3):
        stall, elapsed, keys = _longest_stall(tokenizer_dirs[kind], prompt)
        assert elapsed > 0.02  # long enough for a stall to show
        assert keys == 4096  # maxPrefixBlocksToMatch blocks
        seen.append((stall, elapsed))
        if stall < max(0.05, elapsed / 3):
            return
    pytest.fail(f"the event loop stalled in every attempt: (longest gap, call) = {seen}")
