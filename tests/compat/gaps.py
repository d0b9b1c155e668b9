"""Print the corpus files pyepp gets wrong today, grouped by cause, as the literals of ``known_gaps.py``.

``python -m tests.compat.gaps`` prints ``KNOWN_GAPS`` (upstream-valid files that do not load) and
``WRONG_REASON_GROUPS`` (upstream-rejected files that pyepp rejects for another reason), for updating
``tests/compat/known_gaps.py`` after a change: the corpus test fails on an entry that is now right
(strict xfail), so delete those; a new entry is a regression.
"""

from __future__ import annotations

from tests.compat.corpus_lib import entries, gap_cause, rejected_for_upstreams_reason, try_load

__all__ = ["current_gaps", "current_wrong_reasons", "main"]


def current_gaps() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for entry in entries():
        if entry.expect != "load":
            continue
        error = try_load(entry)
        if error is not None:
            groups.setdefault(gap_cause(error), []).append(entry.name)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def current_wrong_reasons() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for entry in entries():
        if entry.expect != "reject":
            continue
        error = try_load(entry)
        if error is not None and not rejected_for_upstreams_reason(entry, error):
            groups.setdefault(gap_cause(error), []).append(entry.name)
        elif error is None:
            groups.setdefault("loads (upstream rejects it)", []).append(entry.name)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def _print(title: str, groups: dict[str, list[str]]) -> None:
    print(f"{title}: dict[str, tuple[str, ...]] = {{")
    for cause, names in groups.items():
        print(f"    # {len(names)} file(s)")
        print(f"    {cause!r}: (")
        for name in names:
            print(f"        {name!r},")
        print("    ),")
    print("}")


def main() -> int:
    _print("KNOWN_GAPS", current_gaps())
    print()
    _print("WRONG_REASON_GROUPS", current_wrong_reasons())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
