"""Print the upstream-valid corpus files that do not load today, grouped by cause, as a KNOWN_GAPS literal.

``python -m tests.compat.gaps`` — for updating ``tests/compat/known_gaps.py`` after a change: the corpus
test fails on an entry that now loads (strict xfail), so delete those; new entries are a regression.
"""

from __future__ import annotations

from tests.compat.corpus_lib import entries, gap_cause, try_load

__all__ = ["current_gaps", "main"]


def current_gaps() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for entry in entries():
        if entry.expect != "load":
            continue
        error = try_load(entry)
        if error is not None:
            groups.setdefault(gap_cause(error), []).append(entry.name)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def main() -> int:
    print("KNOWN_GAPS: dict[str, tuple[str, ...]] = {")
    for cause, names in current_gaps().items():
        print(f"    # {len(names)} file(s)")
        print(f"    {cause!r}: (")
        for name in names:
            print(f"        {name!r},")
        print("    ),")
    print("}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
