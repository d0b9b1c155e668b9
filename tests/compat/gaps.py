"""Print the corpus files pyepp gets wrong today, grouped by cause, as the literals of ``known_gaps.py``.

``python -m tests.compat.gaps`` prints ``KNOWN_GAPS`` (upstream-valid files that do not load) and
``WRONG_REASON_GROUPS`` (upstream-rejected files that pyepp rejects for another reason), for updating
``tests/compat/known_gaps.py`` after a change: the corpus test fails on an entry that is now right
(strict xfail), so delete those; a new entry is a regression. ``--write`` rewrites ``known_gaps.py``
with the current tables and refuses (exit 1, naming the files) when a file would be added to either.
"""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

from tests.compat import known_gaps
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


def _files(groups: dict[str, list[str]] | dict[str, tuple[str, ...]]) -> set[str]:
    return {name for names in groups.values() for name in names}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    gaps, wrong = current_gaps(), current_wrong_reasons()
    text = io.StringIO()
    with redirect_stdout(text):
        _print("KNOWN_GAPS", gaps)
        print()
        _print("WRONG_REASON_GROUPS", wrong)
    if "--write" not in args:
        print(text.getvalue(), end="")
        return 0
    added = (_files(gaps) - _files(known_gaps.KNOWN_GAPS)) | (
        _files(wrong) - _files(known_gaps.WRONG_REASON_GROUPS)
    )
    if added:
        print("refusing to write: these files would be added (regressions):", file=sys.stderr)
        for name in sorted(added):
            print(f"  {name}", file=sys.stderr)
        return 1
    path = Path(known_gaps.__file__)
    source = path.read_text(encoding="utf-8")
    head = source[: source.index("KNOWN_GAPS: dict")]
    tail = source[source.index("\n\n\ndef ", source.index("WRONG_REASON_GROUPS: dict")) :]
    path.write_text(head + text.getvalue().rstrip("\n") + "\n" + tail, encoding="utf-8")
    print(f"wrote {path}: {len(_files(gaps))} gaps, {len(_files(wrong))} wrong reasons")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
