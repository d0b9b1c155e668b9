"""The ``epp`` console script.

``epp [flags]`` runs the endpoint picker until SIGTERM/SIGINT (see :mod:`epp.config.options` for the flags
and :mod:`epp.app` for what runs): exit status 0 after a clean shutdown, 1 for a startup failure such
as an invalid configuration file, 2 for an invalid command line. ``epp check-config [FILE | -]``
validates an EndpointPickerConfig exactly as the server does and prints its resolved form (0 valid,
2 invalid or bad usage).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from epp.config.options import UsageError, parse_options

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "check-config":
        from epp.config.sections import check_config

        return check_config(args[1:])
    try:
        options = parse_options(args)
    except UsageError as exc:
        print(f"epp: error: {exc}\n(run 'epp --help' for the list of flags)", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    from epp.app import serve

    return int(serve(options))
