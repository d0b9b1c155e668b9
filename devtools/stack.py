"""Start and stop a local inference stack: simulated vLLM servers, the picker, and Envoy, on 127.0.0.1.

Used by the end-to-end tests, the demo (:mod:`devtools.demo`) and the ext_proc benchmark. Every process is
started in its own process group with its output in ``<workdir>/<name>.log``; :meth:`Stack.stop`
(also run by the context manager on any exception, including ``KeyboardInterrupt``) sends SIGTERM to
each group, then SIGKILL after ``stop_timeout_s``. Readiness: a simulated server answers
``GET /health/ready`` with 200; the picker's ``grpc.health.v1`` reports SERVING; Envoy's admin
``GET /ready`` answers ``LIVE``. A process that exits or is not ready within ``ready_timeout_s``
raises :class:`StackError` carrying the tail of its log.

Ports come from the OS (bind port 0), never fixed, so several stacks can run side by side; if another
program takes one between choosing and binding, :meth:`Stack.start` retries once on fresh ports. Each
model server runs as its own ``epp-sim`` process so a test can stop one (:meth:`Stack.stop_server`),
or all in one process (``StackSpec.single_sim_process``, cheaper for the benchmark). Envoy is (re)started
with any variant of :mod:`devtools.envoy_config` (:meth:`Stack.start_envoy`), the picker can be stopped and
started again (:meth:`Stack.stop_picker` / :meth:`Stack.start_picker`) to exercise failure modes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType

import httpx

from devtools.envoy_config import EnvoyParams, envoy_binary, write_config

__all__ = [
    "ManagedProcess",
    "SigintDeferred",
    "Stack",
    "StackError",
    "StackSpec",
    "free_ports",
    "log_tail",
    "running_process",
]


class StackError(RuntimeError):
    """A process of the stack failed to start or become ready (the message includes its log tail)."""


class SigintDeferred:
    """A ``with`` block during which Ctrl-C (SIGINT) is recorded instead of raised; when the block ends
    the interrupt is raised as ``KeyboardInterrupt`` (once, however many arrived).

    It acts only in the main thread and only while SIGINT's handler is Python's default
    (``signal.default_int_handler``): elsewhere (another thread, a process that ignores SIGINT, an
    enclosing deferral) the block runs unchanged. :attr:`pending` tells whether an interrupt is waiting;
    :meth:`take` clears it (for code that handles the interrupt itself)."""

    __slots__ = ("_active", "_previous", "pending")

    def __init__(self) -> None:
        self.pending = False
        self._active = False
        self._previous: object = None

    def _record(self, _signum: int, _frame: FrameType | None) -> None:
        self.pending = True

    def take(self) -> bool:
        """Whether an interrupt was waiting; it no longer is."""
        pending, self.pending = self.pending, False
        return pending

    def __enter__(self) -> SigintDeferred:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._record)
            self._active = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._active:
            return
        self._active = False
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.take() and exc_type is None:
            raise KeyboardInterrupt


_FRESH: set[str] = set()  # working directories made by _fresh_workdir, not yet claimed by a Stack


def _fresh_workdir() -> Path:
    path = tempfile.mkdtemp(prefix="epp-stack-")
    _FRESH.add(path)
    return Path(path)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, chosen by the OS."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(slots=True)
class ManagedProcess:
    """One child process in its own process group, with its combined output in ``log``."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise StackError(f"{self.name} is not running")
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM the group, SIGKILL it after ``timeout_s``; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue

    def fail(self, why: str) -> StackError:
        return StackError(f"{self.name}: {why}\n--- {self.log} (tail) ---\n{log_tail(self.log)}")


@contextlib.contextmanager
def running_process(
    name: str, argv: Sequence[str], log: Path, stop_timeout_s: float = 5.0
) -> Iterator[ManagedProcess]:
    """``argv`` running as a :class:`ManagedProcess` (output in ``log``) for a ``with`` block."""
    proc = ManagedProcess(name, list(argv), log)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop(stop_timeout_s)


@dataclass(frozen=True, slots=True)
class StackSpec:
    """What to start. ``envoy_variant`` names a :data:`devtools.envoy_config.VARIANTS` entry (None: no
    Envoy); ``picker`` False starts no picker (e.g. the round-robin baseline); ``picker_hosts`` gives
    the picker's ``--endpoints`` a host name per server instead of 127.0.0.1 (names the test maps)."""

    servers: int = 4
    sim_args: tuple[str, ...] = ("--profile", "8b-h100", "--time-scale", "20")
    picker: bool = True
    picker_tls: bool = False
    picker_client_cert: tuple[str, str] = ("", "")  # (cert, key) PEM files Envoy presents to the picker
    picker_args: tuple[str, ...] = ()
    picker_program: tuple[str, ...] = ("-m", "epp")  # what the Python runs as the picker (before its flags)
    picker_hosts: tuple[str, ...] = ()
    envoy_variant: str | None = "gie-fail-closed"
    envoy_concurrency: int = 1
    subset_hint_header: str = ""
    report_served_endpoint: bool = False  # Envoy reports the served endpoint (see devtools.envoy_config)
    single_sim_process: bool = False  # all servers in one epp-sim process (cheaper; no stop_server)
    server_args: tuple[tuple[str, ...], ...] = ()  # extra epp-sim args per server (after sim_args)
    ready_timeout_s: float = 30.0
    stop_timeout_s: float = 5.0


@dataclass(slots=True)
class _Ports:
    servers: list[int]
    grpc: int
    health: int
    metrics: int
    listen: int
    admin: int


@dataclass(slots=True, weakref_slot=True)
class Stack:
    """A running stack (use as a context manager, or call :meth:`start` / :meth:`stop`)."""

    spec: StackSpec
    workdir: Path = field(default_factory=lambda: _fresh_workdir())  # removed by close() if fresh
    python: str = sys.executable
    progress: Callable[[str], None] = lambda _msg: None
    ports: _Ports = field(init=False)
    servers: list[ManagedProcess] = field(default_factory=list, init=False)
    picker: ManagedProcess | None = field(default=None, init=False)
    envoy: ManagedProcess | None = field(default=None, init=False)
    _cleanup: weakref.finalize[[str, bool], Stack] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._allocate_ports()
        if str(self.workdir) in _FRESH:
            _FRESH.discard(str(self.workdir))
            # removed at close(), or at interpreter exit / garbage collection at the latest
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _allocate_ports(self) -> None:
        p = free_ports(self.spec.servers + 5)
        self.ports = _Ports(p[: self.spec.servers], *p[self.spec.servers :])

    # ---- addresses
    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports.servers]

    @property
    def picker_endpoints(self) -> list[str]:
        """The servers as the picker's ``--endpoints`` names them (``StackSpec.picker_hosts``)."""
        if not self.spec.picker_hosts:
            return self.endpoints
        if len(self.spec.picker_hosts) != len(self.ports.servers):
            raise StackError("StackSpec.picker_hosts: expected one host name per server")
        return [f"{h}:{p}" for h, p in zip(self.spec.picker_hosts, self.ports.servers, strict=True)]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.listen}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.metrics}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.admin}"

    def server_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports.servers[i]}"

    # ---- lifecycle
    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every process, then remove the working directory if the stack created it."""
        with SigintDeferred():
            self.stop()
            if self._cleanup is not None:
                self._cleanup()

    def start(self) -> None:
        """Start everything; retried once on fresh ports if a port was taken between choosing it and
        binding it (another program may grab a free port in that window)."""
        for attempt in (1, 2):
            try:
                self._start_all()
                return
            except StackError as exc:
                self.stop()
                if attempt == 2 or "in use" not in str(exc).lower():
                    raise
                self._allocate_ports()
            except BaseException:
                self.stop()
                raise

    def _start_all(self) -> None:
        self.start_servers()
        if self.spec.picker:
            self.start_picker()
        if self.spec.envoy_variant is not None:
            self.start_envoy(self.spec.envoy_variant)

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL); the working directory stays (see close())."""
        with SigintDeferred():
            for proc in [self.envoy, self.picker, *self.servers]:
                if proc is not None:
                    proc.stop(self.spec.stop_timeout_s)

    def _process(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        proc = ManagedProcess(name, list(argv), self.workdir / f"{name}.log")
        proc.start()
        return proc

    def _sim_argv(self, port: int, index: int) -> list[str]:
        sim = [self.python, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port)]
        own = self.spec.server_args[index] if index < len(self.spec.server_args) else ()
        return [*sim, "--seed", str(index + 1), "--pod-name", f"sim-{index}", *self.spec.sim_args, *own]

    def start_servers(self) -> None:
        self.progress(f"starting {self.spec.servers} simulated model servers")
        for s in self.servers:
            s.stop(self.spec.stop_timeout_s)
        if self.spec.single_sim_process:
            if any(self.spec.server_args):
                raise StackError("server_args needs one process per server (single_sim_process is set)")
            ports = ",".join(str(p) for p in self.ports.servers)
            argv = [
                self.python,
                "-m",
                "simulator",
                "--host",
                "127.0.0.1",
                "--ports",
                ports,
                *self.spec.sim_args,
            ]
            self.servers = []
            with SigintDeferred():
                self.servers.append(self._process("sims", argv))
        else:
            self.servers = []
            for i, port in enumerate(self.ports.servers):
                with SigintDeferred():  # a process started is a process recorded (and so stopped)
                    self.servers.append(self._process(f"sim-{i}", self._sim_argv(port, i)))
        for i in range(len(self.ports.servers)):
            proc = self.servers[0 if self.spec.single_sim_process else i]
            self._wait(proc, functools.partial(_http_ok, f"{self.server_url(i)}/health/ready"))

    def start_server(self, i: int) -> ManagedProcess:
        """Start a fresh process for server ``i`` (stopped with :meth:`stop_server`) and wait until ready."""
        if self.spec.single_sim_process:
            raise StackError("start_server needs one process per server (single_sim_process=False)")
        proc = self._process(f"sim-{i}", self._sim_argv(self.ports.servers[i], i))
        self._wait(proc, functools.partial(_http_ok, f"{self.server_url(i)}/health/ready"))
        return proc

    def restart_servers(self) -> None:
        """Stop every model server and start fresh ones on the same ports (cold caches)."""
        self.start_servers()

    def stop_server(self, i: int) -> None:
        if self.spec.single_sim_process:
            raise StackError("stop_server needs one process per server (single_sim_process=False)")
        self.servers[i].stop(self.spec.stop_timeout_s)

    def picker_argv(self) -> list[str]:
        p = self.ports
        return [
            self.python, *self.spec.picker_program,
            "--host", "127.0.0.1",
            "--grpc-port", str(p.grpc),
            "--grpc-health-port", str(p.health),
            "--metrics-port", str(p.metrics),
            "--endpoints", ",".join(self.picker_endpoints),
            f"--secure-serving={'true' if self.spec.picker_tls else 'false'}",
            "--metrics-endpoint-auth=false",
            "-v", "1",  # no line per request (the default -v 2 logs one): picker_args may override
            *self.spec.picker_args,
        ]  # fmt: skip

    def start_picker(self) -> None:
        self.progress("starting the endpoint picker")
        if self.picker is not None:
            self.picker.stop(self.spec.stop_timeout_s)
        with SigintDeferred():
            self.picker = self._process("picker", self.picker_argv())
        self._wait(self.picker, lambda: _grpc_serving(self.ports.health))

    def stop_picker(self) -> None:
        if self.picker is not None:
            self.picker.stop(self.spec.stop_timeout_s)

    def envoy_params(self) -> EnvoyParams:
        return EnvoyParams(
            listen_port=self.ports.listen,
            admin_port=self.ports.admin,
            picker_port=self.ports.grpc,
            picker_tls=self.spec.picker_tls,
            picker_client_cert=self.spec.picker_client_cert[0],
            picker_client_key=self.spec.picker_client_cert[1],
            endpoints=tuple(self.endpoints),
            subset_hint_header=self.spec.subset_hint_header,
            report_served_endpoint=self.spec.report_served_endpoint,
        )

    def start_envoy(self, variant: str) -> None:
        """(Re)start Envoy with ``variant`` rendered for this stack's ports."""
        self.progress(f"starting Envoy ({variant})")
        if self.envoy is not None:
            self.envoy.stop(self.spec.stop_timeout_s)
        config = write_config(variant, self.envoy_params(), self.workdir / f"envoy-{variant}.yaml")
        argv = [
            str(envoy_binary()), "-c", str(config),
            "--concurrency", str(self.spec.envoy_concurrency),
            "--log-level", "warn",
            "--disable-hot-restart",  # no shared-memory domain socket: several Envoys may run at once
        ]  # fmt: skip
        with SigintDeferred():
            self.envoy = self._process(f"envoy-{variant}", argv)
        self._wait(self.envoy, lambda: _http_ok(f"{self.admin_url}/ready"))

    def _wait(self, proc: ManagedProcess, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while time.monotonic() < deadline:
            if not proc.running():
                raise proc.fail("exited before it was ready")
            if ready():
                return
            time.sleep(0.05)
        raise proc.fail(f"not ready after {self.spec.ready_timeout_s:.0f}s")

    def logs(self) -> str:
        """The tail of every process log (for test failure reports)."""
        return "\n".join(f"--- {p.name} ---\n{log_tail(p)}" for p in sorted(self.workdir.glob("*.log")))


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _grpc_serving(port: int) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
