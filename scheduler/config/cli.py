"""``check-config FILE``: validate a configuration and print the resolved form.

``check_config_main(["FILE"])`` prints the effective configuration (every plugin with all parameters,
defaults filled, every profile with weights) as YAML on stdout and returns 0; on an invalid
configuration it prints ``error: <file>: <location>: <expectation>`` on stderr and returns 2.
``-`` reads the configuration from stdin; no argument checks the default configuration. Section
validators of the EPP (``dataLayer``, ``flowControl``, ...) are passed by the caller.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TextIO

from scheduler.config.document import SectionValidator
from scheduler.config.loader import default_config, load_config_file, load_config_text
from scheduler.errors import ConfigError
from scheduler.registry import PluginRegistrationError

__all__ = ["check_config_main"]


def check_config_main(
    argv: list[str],
    *,
    sections: Mapping[str, SectionValidator] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = argparse.ArgumentParser(
        prog="check-config", description="Validate an EndpointPickerConfig and print its resolved form."
    )
    parser.add_argument("file", nargs="?", help="configuration file ('-' for stdin; none: the default)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        if args.file is None:
            resolved = default_config(sections=sections)
        elif args.file == "-":
            text = (stdin or sys.stdin).read()
            resolved = load_config_text(text, source="<stdin>", sections=sections)
        else:
            resolved = load_config_file(args.file, sections=sections)
    except (ConfigError, PluginRegistrationError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    out.write(resolved.render())
    return 0
