"""Configuration: ``EndpointPickerConfig`` YAML -> plugin instances, profiles -> Scheduler.

Entry points: :func:`load_config_file`, :func:`load_config_text`, :func:`default_config` (all return a
:class:`ResolvedConfig`, whose ``build_scheduler()`` gives the Scheduler and ``render()`` the effective
configuration as YAML). ``epp check-config`` (:func:`epp.config.sections.check_config`) wraps
them with the EPP's section validators.
"""

from __future__ import annotations

from scheduler.config.defaults import DEFAULT_CONFIG_TEXT
from scheduler.config.document import API_VERSIONS, EXTERNAL_SECTIONS, SectionValidator
from scheduler.config.loader import default_config, load_config_file, load_config_text, resolve_document
from scheduler.config.resolved import ResolvedConfig, ResolvedPlugin

__all__ = [
    "API_VERSIONS",
    "DEFAULT_CONFIG_TEXT",
    "EXTERNAL_SECTIONS",
    "ResolvedConfig",
    "ResolvedPlugin",
    "SectionValidator",
    "default_config",
    "load_config_file",
    "load_config_text",
    "resolve_document",
]
