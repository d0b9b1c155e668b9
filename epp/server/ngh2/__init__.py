"""The ext_proc engine on ngh2 (sans-I/O HTTP/2 over libnghttp2), ``--grpc-engine=ngh2``.

:class:`~epp.server.ngh2.connection.NgH2Connection` is served by the h2 engine's listener
(:class:`~epp.server.h2.server.H2Server`: TLS, certificate reload, mTLS, admission, graceful stop) in place
of :class:`~epp.server.h2.connection.H2Connection`; see docs/epp-server.md for its limits and measurements.
"""

from epp.server.ngh2.connection import NgH2Connection

__all__ = ["NgH2Connection"]
