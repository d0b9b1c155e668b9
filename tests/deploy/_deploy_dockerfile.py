"""A small Dockerfile reader for the image tests (no Docker engine runs here).

``parse_dockerfile(text)`` joins continuation lines, drops comments and parser directives and returns the
stages in order, each a :class:`Stage` with its base image, optional name and its instructions as
``(KEYWORD, arguments)`` pairs. ``docker_ignored(path, patterns)`` applies ``.dockerignore`` rules the
way Docker does for the paths the tests need: patterns are matched in order (``*`` within one path
segment, ``**`` across segments), a leading ``!`` re-includes, the last matching rule wins, and a
path is also excluded when one of its parent directories is (unless a later rule re-includes it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Stage", "docker_ignored", "parse_dockerfile", "read_dockerignore"]

_FROM = re.compile(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Stage:
    base: str
    name: str | None
    instructions: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def args(self, keyword: str) -> list[str]:
        """The arguments of every ``keyword`` instruction of the stage, in order."""
        return [args for kw, args in self.instructions if kw == keyword]


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            continue  # comments and parser directives, also inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def parse_dockerfile(text: str) -> tuple[list[tuple[str, str]], list[Stage]]:
    """Return ``(global ARG instructions, stages)``."""
    global_args: list[tuple[str, str]] = []
    stages: list[Stage] = []
    base: str = ""
    name: str | None = None
    body: list[tuple[str, str]] = []
    for line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            if base:
                stages.append(Stage(base, name, tuple(body)))
            match = _FROM.fullmatch(args.strip())
            if match is None:
                raise ValueError(f"Dockerfile: cannot read FROM {args!r}")
            base, name, body = match.group(1), match.group(2), []
        elif not base:
            global_args.append((keyword, args.strip()))
        else:
            body.append((keyword, args.strip()))
    if base:
        stages.append(Stage(base, name, tuple(body)))
    return global_args, stages


def read_dockerignore(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _glob_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            out.append({"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i])))
            i += 1
    return "".join(out)


def docker_ignored(path: str, patterns: list[str]) -> bool:
    """Is ``path`` (relative, ``/``-separated) left out of the build context?"""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        regex = _glob_regex(pattern.strip("/"))
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            ignored = not negate
    return ignored
