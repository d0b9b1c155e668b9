"""Message classes built at import from a short field table, for the gRPC parsers.

There is no ``protoc`` in the build, so the few messages the gRPC parsers read are declared as
tables of ``(name, number, label, type, message type, oneof index, proto3 optional)`` and turned
into a descriptor in a private pool. Field numbers and wire types are upstream's; fields left out of
a table are kept as unknown fields when a message is decoded, so complete upstream messages parse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["BOOL", "BYTES", "FLOAT", "MESSAGE", "OPTIONAL", "REPEATED", "STRING", "UINT32", "Field", "build"]

_F = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
STRING, BYTES, UINT32, BOOL, FLOAT, MESSAGE = (
    _F.TYPE_STRING,
    _F.TYPE_BYTES,
    _F.TYPE_UINT32,
    _F.TYPE_BOOL,
    _F.TYPE_FLOAT,
    _F.TYPE_MESSAGE,
)

Field = tuple[str, int, int, int, str, int | None, bool]
"""``(name, number, label, type, full message type name or "", oneof index or None, proto3 optional)``"""


def build(file_name: str, messages: Mapping[str, tuple[Sequence[Field], Sequence[str]]]) -> Mapping[str, Any]:
    """Message classes by full name; ``messages`` maps a full name (``pkg.Message``) to its
    (fields, oneof names). Message-typed fields name their type in full.

    One proto3 file is made per package, in the order the packages first appear; each file imports
    the earlier ones, so a message may use types of packages listed before its own.
    """
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for full_name, (fields, oneofs) in messages.items():
        package, _, short = full_name.rpartition(".")
        if package not in files:
            proto = descriptor_pb2.FileDescriptorProto(
                name=f"{file_name}/{package}.proto", package=package, syntax="proto3"
            )
            proto.dependency.extend(f.name for f in files.values())
            files[package] = proto
        message = files[package].message_type.add(name=short)
        for oneof in oneofs:
            message.oneof_decl.add(name=oneof)
        for name, number, label, kind, type_name, oneof_index, optional in fields:
            field = message.field.add(name=name, number=number, label=label, type=kind)
            if type_name:
                field.type_name = f".{type_name}"
            if oneof_index is not None:
                field.oneof_index = oneof_index
            if optional:
                field.proto3_optional = True
    pool = descriptor_pool.DescriptorPool()
    for proto in files.values():
        pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name)) for name in messages}
