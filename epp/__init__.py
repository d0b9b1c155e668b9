"""The endpoint picker: an Envoy ext_proc service (``epp``) around the scheduler and the data layer.

Folders: ``config/`` (flags, the configuration file's sections), ``app/`` (wiring and lifecycle),
``kubernetes/`` (CRD watches, leader election), ``protocol/`` (the sans-I/O ext_proc core),
``request/`` (request parsers), ``admission/`` (objectives, rewrites, subset filter, shedding),
``flowcontrol/``, ``server/`` (the gRPC engines, metrics, health, TLS); ``cli.py`` is the console
script. Development tooling lives outside, in ``devtools/``, and is never imported from here.

``__version__`` is the installed ``pyepp`` distribution's version: it is written in one place,
``pyproject.toml``, and the Helm charts' ``appVersion`` follows it (checked by ``tests/test_release.py``).
A source tree that was never installed reports ``0+unknown``."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pyepp")
except PackageNotFoundError:  # imported from a source tree that pip never installed
    __version__ = "0+unknown"
