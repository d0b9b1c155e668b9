"""gRPC status codes (the numbers of grpc/status.h, as grpc-go sends them) as plain ints, and their names.

The engines close ext_proc streams with these and the opt-in stream metrics count streams by them
(:class:`epp.server.stream_metrics.StreamMetrics` labels them with :data:`GRPC_CODES`). Plain module
constants: cheaper on the hot path than ``grpc.StatusCode`` members, whose value is a (number, name)
tuple.
"""

from __future__ import annotations

__all__ = [
    "GRPC_CANCELLED",
    "GRPC_CODES",
    "GRPC_DEADLINE_EXCEEDED",
    "GRPC_INTERNAL",
    "GRPC_INVALID_ARGUMENT",
    "GRPC_NOT_FOUND",
    "GRPC_OK",
    "GRPC_RESOURCE_EXHAUSTED",
    "GRPC_UNAVAILABLE",
    "GRPC_UNIMPLEMENTED",
    "GRPC_UNKNOWN",
]

GRPC_OK = 0
GRPC_CANCELLED = 1
GRPC_UNKNOWN = 2
GRPC_INVALID_ARGUMENT = 3
GRPC_DEADLINE_EXCEEDED = 4
GRPC_NOT_FOUND = 5
GRPC_RESOURCE_EXHAUSTED = 8
GRPC_UNIMPLEMENTED = 12
GRPC_INTERNAL = 13
GRPC_UNAVAILABLE = 14

GRPC_CODES = ("OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
              "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
              "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated")  # fmt: skip
"""gRPC status numbers -> the names grpc-go prints (the ``code`` label of upstream's stream counter)."""
