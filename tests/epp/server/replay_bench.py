"""Picker CPU per request of any version of the code, from Envoy's captured ext_proc bytes (issue 12).

Behind the real Envoy a version's figure moves ±15 % from run to run on the shared 2-core machine (Envoy and
the load generator compete for the same cores), and ``inproc_bench.py`` runs only the checkout whose internals
it imports. This script compares versions that share nothing but ``python -m epp``:

* ``capture FILE``: the stack of ``epp-bench extproc-envoy`` (16 simulated servers in one process, Envoy
  with GIE's fail-closed config, 1 KB completions at c=32 for ``--seconds``) with a picker that writes every
  read of its ext_proc connection to ``FILE`` (4-byte big-endian length, then the bytes);
* ``replay FILE DIR...``: for each version (a checkout or a ``git archive`` of it, run with ``DIR`` first on
  ``sys.path``) a fresh picker on the same simulated servers, fed ``FILE`` over one TCP connection as fast
  as it reads (its answers read and dropped), ``--reps`` times; prints the picker's CPU per request (utime +
  stime from ``/proc``, net of its idle rate), the user/system split, context switches per request and its
  threads.

The picker polls the servers' metrics every 10 s (``--picker-args``), so polling does not blur the figure. Run
versions in alternation (``--rounds``) and compare medians::

    git -C . archive a199366 | tar -x -C /tmp/old
    .venv/bin/python tests/epp/server/replay_bench.py capture /tmp/envoy.bin
    .venv/bin/python tests/epp/server/replay_bench.py replay /tmp/envoy.bin /tmp/old . --rounds 3

Measurement only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench.extproc_bench import _body, bench_stack, measure, picker_cpu_seconds  # noqa: E402
from devtools.stack import Stack  # noqa: E402

_REPLAY_ARGS = "--refresh-metrics-interval=10s"

_CAPTURE_PICKER = """\
import runpy, sys
sys.path.insert(0, {root!r})
sys.argv[0] = "epp"
from epp.server.h2 import connection
_files = {{}}
_received = connection.H2Connection.data_received
def data_received(self, data):
    out = _files.get(id(self))
    if out is None:
        name = {out!r} if not _files else {out!r} + f".{{len(_files)}}"
        out = _files[id(self)] = open(name, "wb")
    out.write(len(data).to_bytes(4, "big") + data)
    out.flush()
    return _received(self, data)
connection.H2Connection.data_received = data_received
runpy.run_module("epp", run_name="__main__", alter_sys=True)
"""

_VERSION_PICKER = """\
import runpy, sys
sys.path.insert(0, {root!r})
sys.argv[0] = "epp"
runpy.run_module("epp", run_name="__main__", alter_sys=True)
"""


def read_capture(path: Path) -> list[bytes]:
    """The reads of a capture file, in order."""
    data, reads, pos = path.read_bytes(), [], 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise ValueError(f"{path}: truncated length at byte {pos}")
        n = int.from_bytes(data[pos : pos + 4], "big")
        if len(data) - pos - 4 < n:
            raise ValueError(f"{path}: read of {n} bytes at byte {pos} is truncated")
        reads.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return reads


def count_streams(data: bytes) -> int:
    """Streams a client's HTTP/2 bytes open (HEADERS frames of distinct stream ids, after the preface)."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    if not data.startswith(preface):
        raise ValueError("not an HTTP/2 client connection (no preface)")
    pos, ids = len(preface), set()
    while len(data) - pos >= 9:
        length = int.from_bytes(data[pos : pos + 3], "big")
        if data[pos + 3] == 0x1:  # HEADERS
            ids.add(int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF)
        pos += 9 + length
    return len(ids)


def proc_counters(pid: int) -> dict[str, float]:
    """utime and stime (seconds), context switches (all threads) and the thread count of ``pid``."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    voluntary = involuntary = 0
    tasks = os.listdir(f"/proc/{pid}/task")
    for task in tasks:
        status = Path(f"/proc/{pid}/task/{task}/status").read_text()
        voluntary += int(re.search(r"\nvoluntary_ctxt_switches:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        involuntary += int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return {
        "utime": int(fields[11]) / tick,
        "stime": int(fields[12]) / tick,
        "voluntary": voluntary,
        "involuntary": involuntary,
        "threads": len(tasks),
    }


def _send_all(port: int, reads: list[bytes]) -> None:
    """One connection: send every read, read the answers until the picker goes quiet, close."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = threading.Event()

    def drain() -> None:
        sock.settimeout(1.0)
        while True:
            try:
                if not sock.recv(1 << 20):
                    return
            except TimeoutError:
                if sent.is_set():
                    return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    for chunk in reads:
        sock.sendall(chunk)
    sent.set()
    reader.join()
    sock.close()


def _stack(args: argparse.Namespace, tag: str, script: Path) -> AbstractContextManager[tuple[Stack, float]]:
    """The extproc-envoy stack (16 simulated servers, ITL 100 us, no Envoy yet) with ``script`` as the
    picker."""
    return bench_stack(
        servers=16,
        itl="100us",
        picker_args=args.picker_args,
        envoy_variant=None,
        tag=tag,
        picker_script=script,
    )


def capture(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "capture_picker.py"
        script.write_text(_CAPTURE_PICKER.format(root=str(ROOT), out=str(args.file.resolve())))
        with _stack(args, "capture", script) as (stack, idle):
            stack.start_envoy("gie-fail-closed")
            point = measure(
                stack, "gie-fail-closed", _body("1k", "plain", 256), "1k", "plain", 32, args.seconds, idle
            )
    reads = read_capture(args.file)
    streams = count_streams(b"".join(reads))
    print(
        f"captured {len(reads)} reads, {streams} streams ({point.requests} requests, {point.errors} errors)"
    )


def replay(args: argparse.Namespace) -> None:
    reads = read_capture(args.file)
    requests = count_streams(b"".join(reads))
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, args.rounds + 1):
            for i, version in enumerate(args.versions):
                script = Path(tmp) / f"picker_{i}.py"
                script.write_text(_VERSION_PICKER.format(root=str(version.resolve())))
                with _stack(args, "replay", script) as (stack, idle):
                    assert stack.picker is not None
                    pid = stack.picker.pid
                    _send_all(stack.ports.grpc, reads)  # warm-up: imports, caches, first snapshot
                    per_request, c0 = [], proc_counters(pid)
                    for _ in range(args.reps):
                        cpu0, t0 = picker_cpu_seconds(pid), time.perf_counter()
                        _send_all(stack.ports.grpc, reads)
                        elapsed = time.perf_counter() - t0
                        per_request.append((picker_cpu_seconds(pid) - cpu0 - idle * elapsed) / requests * 1e6)
                    c1 = proc_counters(pid)
                n = requests * args.reps
                median = statistics.median(per_request)
                results.setdefault(str(version), []).append(median)
                line = {
                    "version": str(version),
                    "round": rnd,
                    "us_per_request": [round(x) for x in per_request],
                    "median": round(median),
                    "utime_us": round((c1["utime"] - c0["utime"]) / n * 1e6),
                    "stime_us": round((c1["stime"] - c0["stime"]) / n * 1e6),
                    "voluntary_cs": round((c1["voluntary"] - c0["voluntary"]) / n, 3),
                    "involuntary_cs": round((c1["involuntary"] - c0["involuntary"]) / n, 3),
                    "threads": c1["threads"],
                }
                print(json.dumps(line), flush=True)
    print(f"requests per replay: {requests}")
    for version, medians in results.items():
        each = ", ".join(f"{m:.0f}" for m in medians)
        print(f"{version}: median of rounds {statistics.median(medians):.0f} us/req ({each})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture", help="record Envoy's ext_proc bytes under load")
    c.add_argument("file", type=Path)
    c.add_argument("--seconds", type=float, default=4.0, help="load time (default 4)")
    c.add_argument("--picker-args", default=_REPLAY_ARGS, help=f"picker flags (default {_REPLAY_ARGS!r})")
    r = sub.add_parser("replay", help="feed a capture to a fresh picker of each version")
    r.add_argument("file", type=Path)
    r.add_argument(
        "versions", type=Path, nargs="+", help="checkouts to run (each as PYTHONPATH=DIR python -m epp)"
    )
    r.add_argument(
        "--rounds", type=int, default=1, help="versions run in alternation this many times (default 1)"
    )
    r.add_argument("--reps", type=int, default=3, help="replays measured per picker (default 3)")
    r.add_argument("--picker-args", default=_REPLAY_ARGS, help=f"picker flags (default {_REPLAY_ARGS!r})")
    args = p.parse_args()
    if args.command == "capture":
        capture(args)
    else:
        missing = [v for v in args.versions if not (v / "epp" / "__main__.py").is_file()]
        if missing:
            p.error(f"not a checkout of the picker (no epp/__main__.py): {', '.join(map(str, missing))}")
        replay(args)


if __name__ == "__main__":
    main()
