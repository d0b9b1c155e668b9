"""Upstream's config-loader test tables, ported: what the Go tests assert about a fixture once it loads.

Cases of ``TestInstantiateAndConfigure`` and ``TestFilterExecutionOrderFromYAML`` (``pkg/epp/config/loader/
configloader_test.go`` of GIE, llm-d-inference-scheduler and llm-d-router) run on the same fixture file
of the corpus, loaded as the server does (with the Go test's fake plugin types, see ``go_fakes.py``).
The load/reject verdict of every fixture is checked by ``test_corpus.py``; a fixture that does not load
yet is a known gap there, and its case here is a strict xfail for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from epp.config.sections import LoadedConfig
from epp.request.openai import OpenAIParser
from epp.request.plugins import DEFAULT_PARSERS
from tests.compat.corpus_lib import Entry, go_fixture, load
from tests.compat.known_gaps import gap_reasons

_GAPS = gap_reasons()
_REPOS = ("gie", "llm-d-inference-scheduler", "llm-d-router")


def _complex_scheduler(loaded: LoadedConfig) -> None:
    """Explicit plugins exist; the explicit picker is not doubled; weight 50 is kept; a saturation
    detector is defaulted."""
    config = loaded.config
    for name in ("testScorer", "maxScorePicker", "profileHandler"):
        config.plugin(name)
    (profile,) = config.profiles.values()
    assert [(s.name, w) for s, w in profile.scorers] == [("testScorer", 50.0)]
    assert profile.picker.name == "maxScorePicker"
    assert config.saturation_detector is not None


def _default_weight(loaded: LoadedConfig) -> None:
    """A scorer without weight gets 1; a default picker is added."""
    (profile,) = loaded.config.profiles.values()
    assert [(s.name, w) for s, w in profile.scorers] == [("testScorer", 1.0)]
    assert profile.picker is not None


def _default_profile_handler(loaded: LoadedConfig) -> None:
    """With no profile handler declared, single-profile-handler is injected."""
    assert loaded.config.handler.plugin_type == "single-profile-handler"


def _picker_before_scorer(loaded: LoadedConfig) -> None:
    """A picker listed before the scorer is still the picker; the scorer's weight defaults to 1."""
    (profile,) = loaded.config.profiles.values()
    assert profile.picker.name == "test-picker"
    assert [(s.name, w) for s, w in profile.scorers] == [("test-scorer", 1.0)]


def _openai_parser(loaded: LoadedConfig) -> None:
    """The parser section selects the OpenAI parser, named ``openai-parser`` (GIE, llm-d-router)."""
    parsers = getattr(loaded.parser, "parsers", (loaded.parser,))
    assert [(p.name, p.plugin_type) for p in parsers] == [("openai-parser", "openai-parser")]


def _default_parsers(loaded: LoadedConfig) -> None:
    """Without a parser section: llm-d-router's default list (openai, anthropic, vllmhttp, then the
    passthrough fallback). GIE injects only the OpenAI parser; its paths resolve the same here, the
    other formats' paths are the list's addition."""
    parsers = getattr(loaded.parser, "parsers", (loaded.parser,))
    assert [p.name for p in parsers] == list(DEFAULT_PARSERS)
    assert isinstance(parsers[0], OpenAIParser)


def _filter_order(loaded: LoadedConfig) -> None:
    """Filters run in the order the profile lists them; scorers keep their weights."""
    (profile,) = loaded.config.profiles.values()
    assert [f.name for f in profile.filters] == ["filter-A", "filter-B", "filter-C"]
    assert [(s.name, w) for s, w in profile.scorers] == [("scorer-X", 10.0), ("scorer-Y", 20.0)]
    assert profile.picker.name == "maxScorePicker"


CASES: dict[str, Callable[[LoadedConfig], None]] = {
    "successSchedulerConfigText": _complex_scheduler,
    "successWithNoWeightText": _default_weight,
    "successWithNoProfileHandlersText": _default_profile_handler,
    "successPickerBeforeScorerText": _picker_before_scorer,
    "successParserConfigText": _openai_parser,
    "successWithNoParserConfigText": _default_parsers,
    "successFilterOrderConfigText": _filter_order,
}


def _params() -> list[object]:
    params: list[object] = []
    for repo in _REPOS:
        for constant, check in CASES.items():
            try:
                entry = go_fixture(repo, constant)
            except LookupError:
                continue  # this repository's loader tests do not have that fixture
            marks = []
            if entry.name in _GAPS:
                marks.append(pytest.mark.xfail(strict=True, reason=f"known gap: {_GAPS[entry.name]}"))
            params.append(pytest.param(entry, check, id=f"{repo}:{constant}", marks=marks))
    return params


@pytest.mark.parametrize(("entry", "check"), _params())
def test_loader_case(entry: Entry, check: Callable[[LoadedConfig], None]) -> None:
    check(load(entry))


def test_every_case_names_a_fixture_in_the_corpus() -> None:
    found = {c for c in CASES for r in _REPOS if _has(r, c)}
    assert found == set(CASES)


def _has(repo: str, constant: str) -> bool:
    try:
        go_fixture(repo, constant)
    except LookupError:
        return False
    return True


@pytest.mark.parametrize(
    "text",
    [
        "plugins:\n- type: test-source\n",
        "plugins:\n- type: mock-metrics-source\n",
        "plugins:\n- type: test-extractor\n",
        "featureGates:\n- test-feature-gate\n",
    ],
)
def test_the_server_rejects_the_go_tests_fakes(text: str) -> None:
    """The fakes are registered only inside the corpus test (go_fakes.go_test_fakes)."""
    from epp.config.sections import load_picker_config
    from scheduler.errors import ConfigError

    head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
    with pytest.raises(ConfigError, match=r"unknown (plugin type|feature gate)"):
        load_picker_config(None, head + text)
