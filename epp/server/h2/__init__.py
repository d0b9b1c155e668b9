"""A lean HTTP/2 gRPC engine for the ext_proc ``Process`` method (``--grpc-engine=h2``).

:class:`H2Server` listens (plaintext or TLS with ALPN ``h2``) and serves every stream of every
connection as ``Process`` through :class:`~epp.server.h2.connection.H2Connection`, the asyncio adapter of
the sans-I/O protocol core :class:`~epp.server.h2.core.H2Core` (bytes in, bytes and events out). It trades
generality (one method, no compression, only ``:path``, content-type and ``grpc-timeout`` read from the
request headers) for far fewer event-loop wake-ups per request than grpc.aio; see docs/epp-server.md for
the measurements.
"""

from epp.server.h2.server import H2Server

__all__ = ["H2Server"]
