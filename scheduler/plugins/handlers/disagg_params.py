"""Parameters of ``disagg-profile-handler``, in llm-d's current (nested) and deprecated (flat) forms.

Nested (current llm-d)::

    parameters:
      stageOrder: decode-first                                   # or prefill-first
      profiles: {decode: decode, prefill: prefill, encode: encode}   # profile names, the defaults
      deciders: {prefill: prefix-based-pd-decider, encode: always-disagg-multimodal-decider}

Flat (deprecated in llm-d, still accepted): ``decodeProfile``, ``prefillProfile``,
``encodeProfile``, ``prefillDeciderPluginName`` (its older alias ``deciderPluginName`` is used only
when ``prefillDeciderPluginName`` is not given, as in llm-d), ``encodeDeciderPluginName``,
``stageOrder``. Mixing the two forms is an error, as in llm-d. ``primaryPort`` (1-65535, data
parallelism, from llm-d's pd-profile-handler) may go with either.

``stageOrder`` is parsed like llm-d's ``ParseStageOrder``: case-insensitive, ``-`` and ``_`` ignored;
``decode-first`` (also ``decode``, the default) or ``prefill-first`` (also ``prefill``). A prefill
decider with ``prefill-first`` is an error (llm-d: the prefill stage then always runs when its
profile exists, so a decider would never be consulted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.params import param

__all__ = ["DECODE_FIRST", "PREFILL_FIRST", "DisaggParams", "parse_stage_order"]

DECODE_FIRST = "decode-first"
PREFILL_FIRST = "prefill-first"
_PROFILE_KEYS = ("decode", "prefill", "encode")
_DECIDER_KEYS = ("prefill", "encode")


def parse_stage_order(raw: Any) -> str:
    """llm-d's stage-order syntax -> ``decode-first`` or ``prefill-first``; ValueError otherwise."""
    if raw is None:
        return DECODE_FIRST
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {raw!r}")
    key = raw.replace("-", "").replace("_", "").lower()
    if key in ("", "decodefirst", "decode"):
        return DECODE_FIRST
    if key in ("prefillfirst", "prefill"):
        return PREFILL_FIRST
    raise ValueError(f"invalid stage order {raw!r}, must be {DECODE_FIRST!r} or {PREFILL_FIRST!r}")


def _names(raw: Any, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    allowed = _PROFILE_KEYS if field == "profiles" else _DECIDER_KEYS
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field}: expected a mapping with keys {', '.join(allowed)}")
    out: dict[str, str] = {}
    for key, value in raw.items():
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
    stage_order: str = param(DECODE_FIRST, convert=parse_stage_order, expect="decode-first or prefill-first")
    decode_profile: str | None = None
    prefill_profile: str | None = None
    encode_profile: str | None = None
    prefill_decider_plugin_name: str | None = None
    decider_plugin_name: str | None = None
    encode_decider_plugin_name: str | None = None
    primary_port: int | None = param(None, ge=1, le=65535)

    def __post_init__(self) -> None:
        profiles, deciders = _names(self.profiles, "profiles"), _names(self.deciders, "deciders")
        flat = (
            self.decode_profile,
            self.prefill_profile,
            self.encode_profile,
            self.prefill_decider_plugin_name,
            self.decider_plugin_name,
            self.encode_decider_plugin_name,
        )
        if (profiles or deciders or self.profiles is not None or self.deciders is not None) and any(
            v is not None for v in flat
        ):
            raise ValueError(
                "cannot mix the deprecated flat parameters (decodeProfile, prefillProfile, encodeProfile, "
                "prefillDeciderPluginName, deciderPluginName, encodeDeciderPluginName) with "
                "profiles/deciders: use one form"
            )
        if self.stage_order == PREFILL_FIRST and self.decider_name is not None:
            raise ValueError(f"a prefill decider is not supported with stageOrder {PREFILL_FIRST}")
        names = [self.decode, self.prefill, self.encode]
        if len(set(names)) < 3:
            raise ValueError(f"the decode, prefill and encode profiles must differ, got {names}")

    @property
    def decode(self) -> str:
        """The decode profile's name (default ``decode``)."""
        return _names(self.profiles, "profiles").get("decode") or self.decode_profile or "decode"

    @property
    def prefill(self) -> str:
        """The prefill profile's name (default ``prefill``)."""
        return _names(self.profiles, "profiles").get("prefill") or self.prefill_profile or "prefill"

    @property
    def encode(self) -> str:
        """The encode profile's name (default ``encode``)."""
        return _names(self.profiles, "profiles").get("encode") or self.encode_profile or "encode"

    @property
    def decider_name(self) -> str | None:
        """The P/D decider plugin's name; None disables the prefill stage in decode-first order."""
        nested = _names(self.deciders, "deciders").get("prefill")
        return nested or self.prefill_decider_plugin_name or self.decider_plugin_name

    @property
    def decider_key(self) -> str:
        """The parameter that named the P/D decider (for error messages)."""
        if self.deciders is not None:
            return "deciders.prefill"
        return "prefillDeciderPluginName" if self.prefill_decider_plugin_name else "deciderPluginName"

    @property
    def encode_decider_name(self) -> str | None:
        """The encode decider plugin's name; None disables the encode stage."""
        return _names(self.deciders, "deciders").get("encode") or self.encode_decider_plugin_name

    @property
    def encode_decider_key(self) -> str:
        """The parameter that named the encode decider (for error messages)."""
        return "deciders.encode" if self.deciders is not None else "encodeDeciderPluginName"
