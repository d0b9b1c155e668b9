"""``epp-bench``: run one benchmark, or ``all`` of them in their quick form.

Subcommands come from :data:`BENCHMARKS`, a table of (name, module, quick arguments); a module is
imported only when its benchmark runs and must define ``main(argv: list[str]) -> int``. To add a
benchmark, add one line to the table. ``epp-bench all [--full]`` runs every registered benchmark in
turn (quick arguments unless ``--full``; those marked ``in_all=False`` only run when named), reports
the ones not available in this build, and returns non-zero if any benchmark failed.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BENCHMARKS", "Benchmark", "main"]


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    module: str
    quick_args: tuple[str, ...] = ("--quick",)
    summary: str = ""
    in_all: bool = True  # False: run only when named (e.g. needs a separate ~800 MB virtualenv)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("scheduler", "bench.scheduler_bench", ("--quick",), "decision latency, prefix index memory"),
    Benchmark(
        "simulator",
        "bench.simulator_bench",
        ("--seconds", "2", "--scenario", "realtime"),
        "epp-sim throughput: servers x streams in one process, real time",
    ),
    Benchmark("datalayer", "bench.datalayer_bench", ("--seconds", "2"), "metrics polling and parsing"),
    Benchmark("extproc", "bench.extproc_core_bench", ("--quick",), "ext_proc protocol core"),
    Benchmark("extproc-envoy", "bench.extproc_bench", ("--quick",), "picker cost behind the real Envoy"),
    Benchmark("routing", "bench.routing", ("--quick",), "end-to-end routing quality vs peers"),
    Benchmark("flow-control", "bench.flow_control_bench", ("--quick",), "flow control on vs off, sim fleet"),
    Benchmark(
        "latency-model", "bench.latency_model", ("--quick",), "predicted-latency model vs alternatives"
    ),
    Benchmark("soak", "bench.soak", ("--quick",), "~80% of max throughput for 30 min behind Envoy"),
    Benchmark("precise", "bench.precise_bench", ("--quick",), "KV-event ingestion, exact index, block keys"),
    Benchmark(
        "inference-perf", "bench.inference_perf", ("--quick",), "external harness (own venv)", in_all=False
    ),
)


class _Unavailable(Exception):
    pass


def _entry(bench: Benchmark) -> Callable[[list[str]], Any]:
    try:
        module = importlib.import_module(bench.module)
    except ModuleNotFoundError as exc:
        if exc.name and bench.module.startswith(exc.name):
            raise _Unavailable(f"module {bench.module} is not in this build") from None
        raise
    entry = getattr(module, "main", None)
    if not callable(entry):
        raise _Unavailable(f"module {bench.module} defines no main(argv)")
    return entry  # type: ignore[no-any-return]


def _usage() -> str:
    rows = [(b.name, b.summary + ("" if b.in_all else "; not part of all")) for b in BENCHMARKS]
    rows.append(("all [--full]", "every benchmark above in its quick form (--full: their default sizes)"))
    width = max(len(name) for name, _ in rows)
    lines = [
        "usage: epp-bench {all [--full] | BENCHMARK [args...]}",
        "",
        "Benchmarks of the picker and its parts; each prints its figures and its targets as PASS/MISS",
        "lines. 'epp-bench BENCHMARK --help' lists a benchmark's own flags.",
        "",
        "benchmarks:",
    ]
    lines += [f"  {name:<{width}}  {summary}" for name, summary in rows]
    lines += ["", "exit status: 0 when every benchmark ran, 1 when one failed, 2 for a bad command line"]
    return "\n".join(lines)


def _run_all(full: bool) -> int:
    failed: list[str] = []
    for bench in (b for b in BENCHMARKS if b.in_all):
        args = [] if full else list(bench.quick_args)
        print(f"=== epp-bench {bench.name} {' '.join(args)}".rstrip(), flush=True)
        start = time.perf_counter()
        try:
            code = _entry(bench)(args)
        except _Unavailable as exc:
            print(f"--- {bench.name}: skipped ({exc})", flush=True)
            continue
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:
            print(f"--- {bench.name}: crashed: {exc!r}", flush=True)
            code = 1
        print(f"--- {bench.name}: exit {code or 0} in {time.perf_counter() - start:.1f}s", flush=True)
        if code:
            failed.append(bench.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "all":
        if rest not in ([], ["--full"]):
            print(_usage(), file=sys.stderr)
            return 2
        return _run_all(full=bool(rest))
    bench = next((b for b in BENCHMARKS if b.name == name), None)
    if bench is None:
        print(f"epp-bench: unknown benchmark {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        entry = _entry(bench)
    except _Unavailable as exc:
        print(f"epp-bench: {name} is not available: {exc}", file=sys.stderr)
        return 2
    code = entry(rest)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
