"""epp package.

``__version__`` is the installed ``pyepp`` distribution's version: it is written in one place,
``pyproject.toml``, and the Helm charts' ``appVersion`` follows it (checked by ``tests/test_release.py``).
A source tree that was never installed reports ``0+unknown``."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pyepp")
except PackageNotFoundError:  # imported from a source tree that pip never installed
    __version__ = "0+unknown"
