"""request-attribute-reporter works when xds-protos' empty ``cel/__init__.py`` replaced the CEL package's.

Both common-expression-language and xds-protos (for its ``cel.expr`` protos) install ``cel/__init__.py``;
whichever pip installs last wins. The plugin imports the binding from the extension module ``cel.cel``,
which only common-expression-language installs, so the order does not matter.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from scheduler.handle import PluginHandle
from scheduler.plugins.response.attribute_reporter import RequestAttributeReporter, factory


def test_compiles_with_the_xds_protos_cel_init(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.find_spec("cel")
    assert spec is not None and spec.submodule_search_locations
    empty = types.ModuleType("cel")  # what xds-protos' zero-byte cel/__init__.py gives
    empty.__path__ = list(spec.submodule_search_locations)
    monkeypatch.setitem(sys.modules, "cel", empty)
    assert not hasattr(empty, "compile")
    params = {"attributes": [{"key": {"name": "tokens"}, "expression": "usage.prompt_tokens + 1"}]}
    plugin = factory("reporter", params, PluginHandle())
    assert isinstance(plugin, RequestAttributeReporter)
