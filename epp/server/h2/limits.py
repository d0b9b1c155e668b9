"""Defensive limits of the HTTP/2 engine (one set per server, applied to every connection).

Each field is a command-line flag (``--grpc-h2-*``, see docs/epp-server.md) with the default below, sized so
that Envoy at its maximum ext_proc throughput (one connection per worker, many short streams of 1-20 KB
messages) never meets a limit, while one hostile connection holds at most about ``connection_budget`` bytes:

* ``max_concurrent_streams``: advertised as SETTINGS_MAX_CONCURRENT_STREAMS; a stream beyond it gets
  RST_STREAM(REFUSED_STREAM) (Envoy opens another connection instead). Go's HTTP/2 server: 250,
  grpc-go: unlimited; 1000 here (a stream costs a few KB, an LLM response keeps its stream open).
* ``stream_window``: the initial receive window of a stream (SETTINGS_INITIAL_WINDOW_SIZE), 1 MiB. A
  stream whose current gRPC message is larger is granted that message's size (up to the message limit),
  as grpc-core does, if the connection budget can hold it; otherwise that stream ends with
  RESOURCE_EXHAUSTED. Windows are replenished as complete messages are consumed.
* ``connection_budget``: 32 MiB, the connection's receive window and the bound on what it holds: partial
  messages plus answers waiting for the peer's flow-control window. Over it, the stream that would exceed
  it ends with RESOURCE_EXHAUSTED; a peer that sends beyond our windows gets FLOW_CONTROL_ERROR.
* ``max_header_list_size``: 16 KiB (grpc-core's hard metadata limit), advertised as
  SETTINGS_MAX_HEADER_LIST_SIZE; caps the bytes of one header block (HEADERS + CONTINUATION) and its
  decoded size (RFC 7541 section 4.1 accounting), so an HPACK bomb or a CONTINUATION flood ends the
  connection with ENHANCE_YOUR_CALM.
* ``flood_rate``: 1000 control frames a second (a burst of as many): PING, SETTINGS, RST_STREAM,
  WINDOW_UPDATE, PRIORITY, empty DATA / CONTINUATION and unknown frames each take one token, every complete
  gRPC message received gives one back. An empty bucket ends the connection with GOAWAY
  ENHANCE_YOUR_CALM, as nghttp2 and Go do against ping, settings, reset and empty-frame floods
  (CVE-2019-9512/9515/9518, rapid reset CVE-2023-44487).
* ``settings_timeout``: 10 s (nghttp2's) for the client preface with its SETTINGS to arrive and for our
  SETTINGS to be acknowledged (slowloris); then GOAWAY SETTINGS_TIMEOUT.
* ``idle_timeout``: 300 s without an open stream or a received frame ends the connection (GOAWAY
  NO_ERROR); 0 disables it.
* ``write_buffer``: 256 KiB of unsent output; above it reading stops until the peer reads (asyncio's
  ``pause_writing`` / ``resume_writing``), so a client that never reads cannot queue PING ACKs without end.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from epp.config.flags import parse_duration, parse_quantity

__all__ = ["GRPC_CORE_FIELDS", "H2Limits", "add_flags", "from_flags"]


@dataclass(frozen=True, slots=True)
class H2Limits:
    """The limits above (bytes, counts, seconds); see the module docstring for each one's effect."""

    max_concurrent_streams: int = 1000
    stream_window: int = 1 << 20
    connection_budget: int = 32 << 20
    max_header_list_size: int = 16 << 10
    flood_rate: int = 1000
    settings_timeout: float = 10.0
    idle_timeout: float = 300.0
    write_buffer: int = 256 << 10

    def __post_init__(self) -> None:
        if not 1 <= self.max_concurrent_streams <= 2**31 - 1:
            raise ValueError("max_concurrent_streams must be in [1, 2^31-1]")
        if not 65535 <= self.stream_window <= 2**31 - 1:
            raise ValueError("stream_window must be in [65535, 2^31-1]")
        if not self.stream_window <= self.connection_budget <= 2**31 - 1:
            raise ValueError("connection_budget must be in [stream_window, 2^31-1]")
        if self.max_header_list_size < 1024 or self.flood_rate < 1 or self.write_buffer < 16384:
            raise ValueError("max_header_list_size >= 1024, flood_rate >= 1, write_buffer >= 16384")
        if self.settings_timeout <= 0 or self.idle_timeout < 0:
            raise ValueError("settings_timeout > 0 and idle_timeout >= 0")


# the limits the grpcio engine applies too, as grpc-core's channel arguments (epp.server.grpc_server);
# the ngh2 engine (epp.server.ngh2) applies every field
GRPC_CORE_FIELDS = frozenset(
    {"max_concurrent_streams", "max_header_list_size", "settings_timeout", "idle_timeout"}
)

# -- command-line flags (epp.config.options adds them and builds the limits) ---------------------------------

_FLAGS: tuple[tuple[str, str, str], ...] = (
    # flag, field, kind ("count", "size", "duration")
    ("--grpc-h2-max-concurrent-streams", "max_concurrent_streams", "count"),
    ("--grpc-h2-stream-window", "stream_window", "size"),
    ("--grpc-h2-connection-budget", "connection_budget", "size"),
    ("--grpc-h2-max-header-list-size", "max_header_list_size", "size"),
    ("--grpc-h2-flood-rate", "flood_rate", "count"),
    ("--grpc-h2-settings-timeout", "settings_timeout", "duration"),
    ("--grpc-h2-idle-timeout", "idle_timeout", "duration"),
    ("--grpc-h2-write-buffer", "write_buffer", "size"),
)


def add_flags(group: argparse._ArgumentGroup) -> None:
    """One flag per field of :class:`H2Limits` (``--grpc-h2-*``), each defaulting to the field's default."""
    defaults = H2Limits()
    parsers: dict[str, Callable[[str], float]] = {
        "count": int,
        "size": parse_quantity,
        "duration": parse_duration,
    }
    for flag, field, kind in _FLAGS:
        engines = "every engine" if field in GRPC_CORE_FIELDS else "h2 and ngh2 engines"
        group.add_argument(
            flag, dest=f"h2_{field}", type=parsers[kind], default=None,
            help=f"(pyepp) {engines}: {field.replace('_', ' ')} (default {getattr(defaults, field)}; "
            "see docs/epp-server.md)",
        )  # fmt: skip


def from_flags(ns: argparse.Namespace) -> H2Limits:
    """The limits the flags give; raises ValueError naming the flag and what was expected."""
    given = {field: getattr(ns, f"h2_{field}") for _, field, _ in _FLAGS}
    values = {field: value for field, value in given.items() if value is not None}
    try:
        return H2Limits(**values)
    except ValueError as exc:
        flags = ", ".join(flag for flag, field, _ in _FLAGS if field in values)
        raise ValueError(f"{flags or 'h2 limits'}: {exc}") from None
