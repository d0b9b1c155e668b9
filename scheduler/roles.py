"""Which roles a plugin fills: its protocols, checked against what it declares.

The framework slots plugins by the extension-point protocols they satisfy, and a ``runtime_checkable``
protocol matches by method name only. Left alone, a flow-control policy with a ``pick()`` method would
silently become a :class:`~scheduler.interfaces.Picker` in every profile that lists it. So the protocols
that give a plugin a *role* (a slot the framework fills with it) are grouped in families:

* profile: :class:`Filter`, :class:`Scorer`, :class:`Picker` (one plugin may be several of these);
* each other role is a family of its own: :class:`ProfileHandler`, :class:`SaturationDetector`,
  :class:`RequestAdmitter`, :class:`PDDecider`, and the flow-control policies :class:`OrderingPolicy`,
  :class:`FairnessPolicy`, :class:`UsageLimitPolicy`.

A plugin whose methods match roles of two families must declare the roles it means in a class
variable ``plugin_roles`` (a tuple of those protocol classes), e.g. a saturation detector that also
filters: ``plugin_roles = (Filter, SaturationDetector)``. :func:`check_roles` (called by
:meth:`~scheduler.registry.Registry.create` for every instance) refuses an undeclared plugin that
matches two families, a declaration naming a protocol that is not a role, and a declared role whose
methods the plugin lacks. :func:`has_role` is what the framework asks when it slots a plugin: the
declared roles when there is a declaration, the matching protocols otherwise. Lifecycle hooks
(``PrepareHook``, ``DispatchHook``, ...) are capabilities, not roles: they are never declared, and
every plugin that has their methods gets called.
"""

from __future__ import annotations

from typing import Any

from scheduler.errors import ConfigError
from scheduler.interfaces import (
    Filter,
    PDDecider,
    Picker,
    ProfileHandler,
    RequestAdmitter,
    SaturationDetector,
    Scorer,
)
from scheduler.plugins.flowcontrol.interfaces import FairnessPolicy, OrderingPolicy, UsageLimitPolicy

__all__ = ["ROLE_FAMILIES", "check_roles", "declared_roles", "has_role", "role_name"]

# family name -> the role protocols in it
ROLE_FAMILIES: dict[str, tuple[type, ...]] = {
    "profile": (Filter, Scorer, Picker),
    "profile handler": (ProfileHandler,),
    "saturation detector": (SaturationDetector,),
    "admitter": (RequestAdmitter,),
    "decider": (PDDecider,),
    "ordering policy": (OrderingPolicy,),
    "fairness policy": (FairnessPolicy,),
    "usage limit policy": (UsageLimitPolicy,),
}
_FAMILY_OF: dict[type, str] = {proto: family for family, protos in ROLE_FAMILIES.items() for proto in protos}
_NAMES: dict[type, str] = {
    Filter: "filter",
    Scorer: "scorer",
    Picker: "picker",
    ProfileHandler: "profile handler",
    SaturationDetector: "saturation detector",
    RequestAdmitter: "admitter",
    PDDecider: "decider",
    OrderingPolicy: "ordering policy",
    FairnessPolicy: "fairness policy",
    UsageLimitPolicy: "usage limit policy",
}


def role_name(role: type) -> str:
    """The role's words in messages ("picker", "fairness policy", ...)."""
    return _NAMES.get(role, role.__name__)


def declared_roles(plugin: Any) -> tuple[type, ...] | None:
    """The plugin's ``plugin_roles`` declaration (None: it declares none)."""
    roles = getattr(plugin, "plugin_roles", None)
    return None if roles is None else tuple(roles)


def has_role(plugin: object, role: type[Any]) -> bool:
    """Whether the framework may slot ``plugin`` as ``role`` (a role protocol, or any other protocol).

    For a role protocol: declared (when the plugin declares roles) and implemented. Any other
    protocol (a hook) is a plain structural check. Callers that need the narrowed type write
    ``isinstance(plugin, Picker) and has_role(plugin, Picker)``."""
    if not isinstance(plugin, role):
        return False
    if role not in _FAMILY_OF:
        return True
    declared = declared_roles(plugin)
    return declared is None or role in declared


def check_roles(plugin: Any) -> None:
    """Refuse an ambiguous or wrong role declaration of ``plugin`` (ConfigError, no location: the
    caller adds the plugin's)."""
    declared = declared_roles(plugin)
    if declared is not None:
        for role in declared:
            if role not in _FAMILY_OF:
                raise ConfigError(
                    f"plugin_roles names {getattr(role, '__name__', role)!r}, which is not a role "
                    f"(roles: {', '.join(p.__name__ for p in _FAMILY_OF)})"
                )
            if not isinstance(plugin, role):
                raise ConfigError(
                    f"plugin_roles declares {role_name(role)} ({role.__name__}), but the plugin lacks "
                    "its methods"
                )
        return
    matched = [role for role in _FAMILY_OF if isinstance(plugin, role)]
    families = dict.fromkeys(_FAMILY_OF[role] for role in matched)
    if len(families) > 1:
        names = ", ".join(f"{role_name(r)} ({r.__name__})" for r in matched)
        raise ConfigError(
            f"the plugin's methods match the contracts of {names}: roles of different kinds "
            f"({' and '.join(families)}). Declare the ones it fills in the class variable plugin_roles, "
            f"e.g. plugin_roles = ({', '.join(r.__name__ for r in matched)},), or rename the methods "
            "that are not meant as those extension points"
        )
