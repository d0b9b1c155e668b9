"""Go-compatible flag syntax on top of :mod:`argparse`.

The Go endpoint picker parses its flags with ``pflag`` (plus klog's ``-v``), and Helm charts written for
it pass arguments in every spelling Go accepts. This module turns such argument lists into the form
argparse understands, and parses Go value syntax:

* ``-pool-name x`` (one dash, long name) -> ``--pool-name x``; ``--v=3`` / ``-v=3`` / ``-v3`` /
  ``--v 3`` -> ``-v 3``.
* Booleans: ``--flag`` (true), ``--flag=false``, and ``--flag false`` (the next argument is consumed only
  when it is a Go boolean literal: ``1 t T TRUE true True 0 f F FALSE false False``).
* Durations: Go's ``time.ParseDuration`` grammar, the one of :mod:`scheduler.duration` (``50ms``,
  ``1.5s``, ``1m30s``, ``0``; see docs/scheduler.md, "Durations"); flags take no negative ones.
  Results are seconds as float.

Help: :class:`ManualHelpFormatter` gives every flag one format, ``help text (default X)``: the default is
appended from the flag's own default (durations as Go durations such as ``50ms``, sizes as ``16MiB``,
booleans as ``true``/``false``) unless the help already states it as ``(default ...)``, so a flag added
later conforms without effort; :func:`suggest` adds "did you mean" to unknown names.

Every parse function raises :class:`argparse.ArgumentTypeError` with a message saying what was expected,
which argparse reports as ``error: argument --flag: ...`` with exit status 2.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from scheduler.duration import go_duration

__all__ = [
    "BoolAction",
    "ManualHelpFormatter",
    "format_default",
    "normalise_argv",
    "parse_bool",
    "parse_duration",
    "parse_port",
    "parse_port_list",
    "parse_quantity",
    "suggest",
]

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true or false), got {text!r}")


def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` (:func:`scheduler.duration.go_duration`), non-negative, in seconds."""
    try:
        seconds = go_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 50ms, 2s or 1m30s, got {text!r}"
        ) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"expected a duration that is not negative, got {text!r}")
    return seconds


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[kMGTPE]|m|)")
_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


def parse_quantity(text: str) -> int:
    """A byte size as the Go picker's gRPC message-size flags take it: a Kubernetes quantity
    (``resource.ParseQuantity``: ``1048576``, ``10Mi``, ``25M``, ``1.5Gi``, ``1e6``) after one trailing
    ``B``/``b`` is dropped (``10MiB`` = ``10Mi``, ``25MB`` = ``25M``). The value must be a whole,
    non-negative number of bytes that fits in 63 bits."""
    s = text.strip()
    if len(s) > 1 and s[-1] in "Bb":
        s = s[:-1]
    match = _QUANTITY.fullmatch(s)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 4194304, 10MiB or 25MB, got {text!r}")
    number, suffix = match.groups()
    from fractions import Fraction

    if suffix[:1] in ("e", "E"):
        value = Fraction(number) * Fraction(10) ** int(suffix[1:])
    elif suffix == "m":
        value = Fraction(number) / 1000
    else:
        value = Fraction(number) * _SUFFIX[suffix]
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be non-negative, got {text!r}")
    if value.denominator != 1 or value >= 2**63:
        raise argparse.ArgumentTypeError(f"not a whole number of bytes that fits in 63 bits: {text!r}")
    return int(value)


def parse_port(text: str) -> int:
    """A TCP port number, 0-65535 (0 asks the OS for a free port)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return port


def parse_port_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of ports 1-65535 (``8000,8001``); duplicates are dropped (order kept, as
    the Go picker does), leaving 1 to 8."""
    parts = [p for p in text.split(",") if p]
    ports: list[int] = []
    for part in parts:
        port = parse_port(part)
        if port == 0:
            raise argparse.ArgumentTypeError(f"expected ports 1-65535, got {text!r}")
        if port not in ports:
            ports.append(port)
    if not 1 <= len(ports) <= 8:
        raise argparse.ArgumentTypeError(f"expected 1 to 8 distinct comma-separated ports, got {text!r}")
    return tuple(ports)


class BoolAction(argparse.Action):
    """``--flag`` sets True; ``--flag=VALUE`` / ``--flag VALUE`` set a Go boolean literal."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("default", False)
        kwargs.setdefault("metavar", "BOOL")
        super().__init__(option_strings, dest, nargs="?", const=True, type=parse_bool, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def normalise_argv(
    argv: Iterable[str], *, long_flags: frozenset[str], bool_flags: frozenset[str]
) -> list[str]:
    """Rewrite Go-style spellings into argparse's (see the module docstring).

    ``long_flags`` are the known long names without dashes; ``bool_flags`` the boolean ones. A bool flag
    followed by a separate argument that is not a boolean literal keeps its implicit ``true`` (the
    argument is then reported as unexpected by argparse). Everything after ``--`` is left alone.
    """
    args = list(argv)
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            out.extend(args[i - 1 :])
            break
        if not arg.startswith("-") or arg == "-":
            out.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name == "v" or (arg.startswith("-v") and not arg.startswith("--") and arg[2:].isdigit()):
            # klog verbosity: -v 3, -v=3, --v=3, --v 3, -v3
            out.append("-v")
            if eq:
                out.append(value)
            elif arg[2:].isdigit() and not arg.startswith("--"):
                out.append(arg[2:])
            continue
        if name in long_flags:
            if name in bool_flags and not eq and i < len(args) and (args[i] in _TRUE or args[i] in _FALSE):
                out.append(f"--{name}={args[i]}")
                i += 1
            else:
                out.append(f"--{name}={value}" if eq else f"--{name}")
            continue
        out.append(arg)
    return out


def format_go_duration(seconds: float) -> str:
    """``seconds`` in the duration syntax the flags take: ``50ms``, ``5s``, ``1.5s``, ``1m30s``, ``0s``."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms" if ms >= 1 else f"{seconds * 1e6:g}us"
    if seconds < 60:
        return f"{seconds:g}s"
    hours, rest = divmod(seconds, 3600.0)
    minutes, secs = divmod(rest, 60.0)
    parts = [
        f"{int(hours)}h" if hours else "",
        f"{int(minutes)}m" if minutes else "",
        f"{secs:g}s" if secs else "",
    ]
    return "".join(parts)


def format_size(n: int) -> str:
    """A byte count as the size flags take it: ``16MiB``, ``1GiB``, ``1000``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def format_default(action: argparse.Action) -> str | None:
    """The default of ``action`` as its help shows it (None: nothing to show)."""
    value = action.default
    if value is None or value is argparse.SUPPRESS:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if action.type is parse_duration and isinstance(value, int | float):
        return format_go_duration(float(value))
    if action.type is parse_quantity and isinstance(value, int):
        return format_size(value)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or None
    return str(value) if value != "" else '""'


class ManualHelpFormatter(argparse.HelpFormatter):
    """Help that reads like a manual: wide option column, every flag's default in one format
    (``... (default X)``, appended here unless the help states ``(default ...)`` itself)."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 40, width: int | None = None
    ):
        super().__init__(prog, indent_increment, max_help_position, width or 110)

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        kinds: dict[object, str] = {parse_duration: "DURATION", parse_quantity: "SIZE", parse_port: "PORT"}
        return kinds.get(action.type, action.dest.upper())

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.help is argparse.SUPPRESS or "(default" in text or not action.option_strings:
            return action.help
        if action.default is argparse.SUPPRESS:  # -h/--help, --version: actions, not settings
            return action.help
        shown = format_default(action)
        if shown is None:
            shown = "none"
        return f"{text} (default {shown.replace('%', '%%')})".lstrip()


def suggest(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean PREFIX+X?"`` for the closest of ``choices`` to ``word`` (difflib ratio at
    least 0.75), or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return f"; did you mean {prefix}{close[0]}?" if close else ""
