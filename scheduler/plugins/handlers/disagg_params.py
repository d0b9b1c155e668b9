"""Parameters of ``disagg-profile-handler``, in llm-d's current (nested) and deprecated (flat) forms.

Nested (current llm-d)::

    parameters:
      profiles: {decode: decode, prefill: prefill}      # profile names, these are the defaults
      deciders: {prefill: prefix-based-pd-decider}      # the P/D decider plugin, by name

Flat (deprecated in llm-d, still accepted): ``decodeProfile``, ``prefillProfile``,
``prefillDeciderPluginName`` or its older alias ``deciderPluginName``. Mixing the two forms is an
error, as in llm-d. ``primaryPort`` (1-65535, data parallelism, from llm-d's pd-profile-handler) may
go with either. The encode stage (``profiles.encode``, ``deciders.encode``, ``encodeProfile``,
``encodeDeciderPluginName``) is not provided and is rejected with a message saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.params import param

__all__ = ["DisaggParams"]

_ENCODE_UNSUPPORTED = "the encode stage (E/P/D) is not supported; remove the encode settings"


def _names(raw: Any, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field}: expected a mapping with keys decode and prefill")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if key == "encode":
            raise ValueError(f"{field}.encode: {_ENCODE_UNSUPPORTED}")
        allowed = ("decode", "prefill") if field == "profiles" else ("prefill",)
        if key not in allowed:
            raise ValueError(f"{field}.{key}: unknown key (allowed: {', '.join(allowed)})")
        if not isinstance(value, str) or not value:
            raise ValueError(f"{field}.{key}: expected a non-empty name, got {value!r}")
        out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class DisaggParams:
    profiles: Any | None = None
    deciders: Any | None = None
    decode_profile: str | None = None
    prefill_profile: str | None = None
    prefill_decider_plugin_name: str | None = None
    decider_plugin_name: str | None = None
    encode_profile: str | None = None
    encode_decider_plugin_name: str | None = None
    primary_port: int | None = param(None, ge=1, le=65535)

    def __post_init__(self) -> None:
        if self.encode_profile is not None or self.encode_decider_plugin_name is not None:
            raise ValueError(_ENCODE_UNSUPPORTED)
        profiles, deciders = _names(self.profiles, "profiles"), _names(self.deciders, "deciders")
        flat = (
            self.decode_profile,
            self.prefill_profile,
            self.prefill_decider_plugin_name,
            self.decider_plugin_name,
        )
        if (profiles or deciders) and any(v is not None for v in flat):
            raise ValueError(
                "cannot mix the deprecated flat parameters (decodeProfile, prefillProfile, "
                "prefillDeciderPluginName, deciderPluginName) with profiles/deciders: use one form"
            )
        if self.prefill_decider_plugin_name and self.decider_plugin_name:
            raise ValueError("give prefillDeciderPluginName or its alias deciderPluginName, not both")
        if self.decode == self.prefill:
            raise ValueError(f"the decode and prefill profiles must differ, both are {self.decode!r}")

    @property
    def decode(self) -> str:
        """The decode profile's name."""
        return _names(self.profiles, "profiles").get("decode") or self.decode_profile or "decode"

    @property
    def prefill(self) -> str:
        """The prefill profile's name."""
        return _names(self.profiles, "profiles").get("prefill") or self.prefill_profile or "prefill"

    @property
    def decider_name(self) -> str | None:
        """The P/D decider plugin's name; None disables the prefill stage (as in llm-d)."""
        nested = _names(self.deciders, "deciders").get("prefill")
        return nested or self.prefill_decider_plugin_name or self.decider_plugin_name

    @property
    def decider_key(self) -> str:
        """The parameter that named the decider (for error messages)."""
        if self.deciders is not None:
            return "deciders.prefill"
        return "prefillDeciderPluginName" if self.prefill_decider_plugin_name else "deciderPluginName"
