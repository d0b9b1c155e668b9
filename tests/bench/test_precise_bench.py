"""epp-bench precise: the figures are computed from real work and printed as PASS/MISS lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.precise_bench import (
    entry_bytes,
    ingestion_us,
    keys_ms,
    local_tokenizer_ms,
    main,
    pooled_ingestion_us,
)


def test_figures_are_positive_and_plausible() -> None:
    assert 0 < ingestion_us(servers=4, batches=5, seed=1) < 1000
    assert 0 < pooled_ingestion_us(servers=4, batches=5, seed=1) < 1000
    assert 28 < entry_bytes(servers=2, blocks=300, seed=1) < 1000  # at least an int object per entry
    assert keys_ms(256, 128, seed=1, tokenize=False) >= 0
    ms, ids = local_tokenizer_ms(512, 384, seed=1, bpe=False, cached=True)
    assert ms >= 0 and ids == 512  # the bench fleet's tokenizer: one word one token
    assert local_tokenizer_ms(512, 384, seed=1, bpe=True, cached=False)[1] > 512  # BPE splits words


def test_main_prints_a_verdict_per_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--servers", "4", "--batches", "5", "--blocks", "300", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    verdicts = [line for line in lines if not line.startswith("INFO ")]
    assert len(verdicts) == 11 and all(line.split()[0] in ("PASS", "MISS") for line in verdicts)
    assert sum("in-process tokenizer" in line for line in lines) == 8  # 2 x (2 cached, cold) + byte-level 2


def test_the_precise_profile_is_the_default_with_the_prefix_scorer_swapped() -> None:
    import yaml

    from bench.routers import PRECISE_CONFIG, precise_profile
    from scheduler.config.defaults import DEFAULT_CONFIG_TEXT

    def weights(text: str) -> dict[str, object]:
        doc = yaml.safe_load(text)
        return {r["pluginRef"]: r.get("weight") for r in doc["schedulingProfiles"][0]["plugins"]}

    filled = PRECISE_CONFIG.format(model="m", render_url="http://r:1", hash_seed="7", kv_events_port=5557)
    default, precise = weights(DEFAULT_CONFIG_TEXT), weights(filled)
    assert precise.pop("precise-prefix-cache-scorer") == default.pop("prefix-cache-scorer")
    assert precise == default
    # a change of the default's weights reaches the precise profile
    changed = DEFAULT_CONFIG_TEXT.replace("    weight: 10", "    weight: 7")
    assert (
        weights(precise_profile(changed).format(model="m", render_url="u", hash_seed="", kv_events_port=1))[
            "prefix-affinity-scorer"
        ]
        == 7
    )
    doc = yaml.safe_load(filled)
    scorer = next(p for p in doc["plugins"] if p["type"] == "precise-prefix-cache-scorer")
    assert scorer["parameters"]["kvEventsConfig"]["zmqEndpoint"] == "tcp://127.0.0.1:5557"
    assert doc["plugins"][0] == {
        "type": "token-producer",
        "parameters": {"modelName": "m", "vllm": {"url": "http://r:1"}},
    }


def test_the_hash_variants_differ_from_their_profiles_only_in_new_prefix_placement() -> None:
    import yaml

    from bench.routers import (
        DEFAULT_HASH_CONFIG,
        PRECISE_CONFIG,
        PRECISE_HASH_CONFIG,
        ROUTERS,
        hash_placement,
    )
    from scheduler.config import load_config_text
    from scheduler.config.defaults import DEFAULT_CONFIG_TEXT
    from scheduler.plugins.prefix.affinity import PrefixAffinityScorer

    def without_placement(text: str) -> object:
        doc = yaml.safe_load(text)
        for plugin in doc["plugins"]:
            if plugin["type"] == "prefix-affinity-scorer":
                assert plugin.pop("parameters") == {"newPrefixPlacement": "hash"}
        return doc

    assert without_placement(DEFAULT_HASH_CONFIG) == yaml.safe_load(DEFAULT_CONFIG_TEXT)
    fill = {"model": "m", "render_url": "u", "hash_seed": "", "kv_events_port": 1}
    precise = yaml.safe_load(PRECISE_CONFIG.format(**fill))
    assert without_placement(PRECISE_HASH_CONFIG.format(**fill)) == precise
    resolved = load_config_text(DEFAULT_HASH_CONFIG)
    scorers = [s for p in resolved.profiles.values() for s, _ in p.scorers]
    scorers = [s for s in scorers if isinstance(s, PrefixAffinityScorer)]
    assert [s.params.new_prefix_placement for s in scorers] == ["hash"]
    assert ROUTERS["picker-default-hash-x2"].replicas == 2
    with pytest.raises(ValueError, match="prefix-affinity-scorer"):
        hash_placement("plugins: [{type: queue-scorer}]\n")


def test_the_precise_local_profile_tokenizes_in_process_from_the_fleets_tokenizer(tmp_path: Path) -> None:
    import yaml

    from bench.routers import PRECISE_CONFIG, PRECISE_LOCAL_CONFIG, ROUTERS, write_bench_tokenizer
    from scheduler.config import load_config_text
    from simulator.protocol import chat_token_ids, prompt_token_lists
    from simulator.tokenizer import OfflineTokenizer, load_tokenizer
    from simulator.workloads import VOCAB

    path = write_bench_tokenizer(tmp_path / "tok")
    assert path.read_bytes() == write_bench_tokenizer(tmp_path / "again").read_bytes()  # deterministic
    fill = {"model": "m", "render_url": "http://r:1", "hash_seed": "7", "kv_events_port": 5557}
    local = yaml.safe_load(PRECISE_LOCAL_CONFIG.format(tokenizer=str(path), **fill))
    precise = yaml.safe_load(PRECISE_CONFIG.format(**fill))
    assert [p["type"] for p in precise["plugins"]] == ["token-producer"] + [
        p["type"] for p in local["plugins"]
    ]
    scorer = next(p for p in local["plugins"] if p["type"] == "precise-prefix-cache-scorer")
    pool = scorer["parameters"]["indexerConfig"]["tokenizersPoolConfig"]
    assert pool == {"modelName": "m", "local": {"modelTokenizerMap": {"m": str(path)}}}
    config = load_config_text(PRECISE_LOCAL_CONFIG.format(tokenizer=str(path), **fill))
    assert config.plugin("precise-prefix-cache-scorer").local is not None
    assert ROUTERS["picker-precise-local"].tokenizer and ROUTERS["picker-default-tokenizer"].tokenizer
    # one workload word is one token, as for the simulator's offline tokenizer: token counts are kept
    hf, offline = load_tokenizer(str(path.parent)), OfflineTokenizer()
    prompt = " ".join(VOCAB[:50]) + "\n\n" + " ".join(VOCAB[-30:])
    assert len(prompt_token_lists(prompt, hf)[0]) == len(prompt_token_lists(prompt, offline)[0]) == 80
    chat = {"messages": [{"role": "system", "content": prompt}, {"role": "user", "content": VOCAB[7]}]}
    assert 0 not in chat_token_ids(chat, hf)  # nothing unknown in a chat prompt
