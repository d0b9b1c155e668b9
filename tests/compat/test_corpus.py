"""The upstream config corpus: every EndpointPickerConfig upstream ships or tests, loaded as the server does.

Upstream-valid files must load and upstream-rejected files must raise ConfigError. The valid files that do
not load yet are listed in ``known_gaps.py`` and run as strict xfails, so the table can only shrink.
"""

from __future__ import annotations

import pytest

from tests.compat.corpus_lib import (
    CORPUS,
    Entry,
    entries,
    error_text,
    rejected_for_upstreams_reason,
    try_load,
)
from tests.compat.known_gaps import KNOWN_GAPS, gap_reasons, wrong_reasons

_GAPS = gap_reasons()
WRONG_REASON = wrong_reasons()


def _params() -> list[object]:
    params: list[object] = []
    for entry in entries():
        marks = []
        if entry.name in _GAPS:
            marks.append(pytest.mark.xfail(strict=True, reason=f"known gap: {_GAPS[entry.name]}"))
        if entry.name in WRONG_REASON:
            marks.append(
                pytest.mark.xfail(
                    strict=True, reason=f"rejected for another reason: {WRONG_REASON[entry.name]}"
                )
            )
        params.append(pytest.param(entry, id=entry.name, marks=marks))
    return params


def test_manifest_matches_the_corpus_files() -> None:
    on_disk = {p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("*/*.yaml")}
    assert on_disk == {e.name for e in entries()}


def test_corpus_covers_every_source_repository_with_configs() -> None:
    repos = {e.repositories[0] for e in entries()}
    assert {"gie", "llm-d-inference-scheduler", "llm-d-router"} <= repos


@pytest.mark.parametrize("entry", _params())
def test_upstream_verdict(entry: Entry) -> None:
    error = try_load(entry)
    if entry.expect == "load":
        assert error is None, f"{entry.name} ({entry.why}) does not load: {error}"
    else:
        assert entry.expect == "reject"
        assert error is not None, f"{entry.name} loads, but upstream rejects it: {entry.why}"
        assert rejected_for_upstreams_reason(entry, error), (
            f"{entry.name} is rejected, but not for upstream's reason ({entry.why}; "
            f"expected /{entry.match}/): {error_text(error)}"
        )


def test_known_gaps_name_existing_upstream_valid_files() -> None:
    by_name = {e.name: e for e in entries()}
    for cause, names in KNOWN_GAPS.items():
        assert names, cause
        for name in names:
            assert name in by_name, f"KNOWN_GAPS[{cause!r}] names {name}, which is not in the corpus"
            assert by_name[name].expect == "load", f"{name} is rejected upstream: it cannot be a gap"
    assert len(_GAPS) == sum(len(v) for v in KNOWN_GAPS.values()), "a file is listed under two causes"


def test_wrong_reason_entries_name_existing_rejected_files() -> None:
    by_name = {e.name: e for e in entries()}
    for name in WRONG_REASON:
        assert name in by_name, f"WRONG_REASON names {name}, which is not in the corpus"
        assert by_name[name].expect == "reject", f"{name} is valid upstream: it belongs in KNOWN_GAPS"


def test_every_rejection_states_upstreams_reason() -> None:
    assert all(e.match for e in entries() if e.expect == "reject")
